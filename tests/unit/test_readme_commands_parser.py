"""The README command extractor (tests/readme_commands.py) on small Markdown samples."""

from __future__ import annotations

import pytest

from tests.readme_commands import fenced_blocks, readme_commands, split_and, strip_comment

SAMPLE = """# Title

```bash
bash scripts/setup.sh && .venv/bin/alflow demo   # the demo
# a comment line
alflow bench --base-url http://127.0.0.1:8000 \\
    --dataset speed-bench --k 3
alflow tiny serve --speculative-config '{"a": "#not-a-comment"}'
```

```console
$ alflow synthetic compare --k 3 --al 3.39    # SGLang: mean 3.24
scheme  mean
vllm    3.39
```

```
alflow/      not a command
```

```yaml
key: value
```
"""


def test_commands_of_bash_and_console_blocks() -> None:
    texts = [c.text for c in readme_commands(SAMPLE)]
    assert texts == [
        "bash scripts/setup.sh",
        ".venv/bin/alflow demo",
        "alflow bench --base-url http://127.0.0.1:8000 --dataset speed-bench --k 3",
        """alflow tiny serve --speculative-config '{"a": "#not-a-comment"}'""",
        "alflow synthetic compare --k 3 --al 3.39",
    ]


def test_lines_point_at_the_readme() -> None:
    commands = readme_commands(SAMPLE)
    lines = SAMPLE.splitlines()
    for command in commands:
        first_word = command.text.split()[0]
        assert first_word in lines[command.line - 1], command


def test_blocks_and_their_languages() -> None:
    assert [b.language for b in fenced_blocks(SAMPLE)] == ["bash", "console", "", "yaml"]


def test_an_unclosed_block_is_an_error() -> None:
    with pytest.raises(ValueError, match="never closed"):
        fenced_blocks("```bash\nalflow demo\n")


def test_a_continued_line_at_the_end_of_a_block_is_an_error() -> None:
    with pytest.raises(ValueError, match="continued line"):
        readme_commands("```bash\nalflow demo \\\n```\n")


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("alflow demo   # comment", "alflow demo"),
        ("alflow x --a '#1'", "alflow x --a '#1'"),
        ('alflow x --a "b #c"', 'alflow x --a "b #c"'),
        ("alflow x --url http://h/#frag", "alflow x --url http://h/#frag"),
        ("# all comment", ""),
    ],
)
def test_strip_comment(line: str, expected: str) -> None:
    assert strip_comment(line) == expected


def test_split_and_keeps_quoted_ampersands() -> None:
    assert split_and("a && b '&&' c && d") == ["a", "b '&&' c", "d"]
