"""The command extractor of the README and the docs pages (tests/readme_commands.py) on small Markdown samples."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.readme_commands import (
    ROOT,
    doc_commands,
    fenced_blocks,
    file_commands,
    markdown_files,
    readme_commands,
    split_and,
    strip_comment,
)

pytestmark = pytest.mark.unit

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


def test_commands_of_several_files_remember_their_file_and_line(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    page = tmp_path / "docs" / "running" / "page.md"
    page.parent.mkdir(parents=True)
    readme.write_text(SAMPLE, encoding="utf-8")
    page.write_text(
        "# Page\n\nText.\n\n```sh\nalflow demo\n```\n\n```text\nnot a command\n```\n", encoding="utf-8"
    )
    commands = doc_commands([readme, page])
    assert [c.text for c in commands][-1] == "alflow demo"
    assert [c.path for c in commands] == [readme] * 5 + [page]
    last = commands[-1]
    assert (last.line, last.language) == (6, "sh")
    assert last.where == f"{page} line 6"  # outside the checkout: the whole path
    assert file_commands(page) == [last]


def test_where_names_a_file_of_the_checkout_relative_to_it() -> None:
    [command] = file_commands(ROOT / "docs" / "x.md", "```bash\nalflow demo\n```\n")
    assert command.where == "docs/x.md line 2"


def test_errors_name_the_file(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("```bash\nalflow demo \\\n```\n", encoding="utf-8")
    with pytest.raises(ValueError, match=re.escape(f"{page} line 2: a continued line")):
        file_commands(page)
    with pytest.raises(ValueError, match=re.escape("docs/y.md line 1: fenced block never closed")):
        file_commands(ROOT / "docs" / "y.md", "```bash\nalflow demo\n")


def test_the_files_are_the_readme_then_every_docs_page() -> None:
    files = markdown_files()
    assert files[0] == ROOT / "README.md"
    pages = files[1:]
    assert pages == sorted(pages)
    assert ROOT / "docs" / "index.md" in pages
    assert all(p.suffix == ".md" and p.is_relative_to(ROOT / "docs") for p in pages)
