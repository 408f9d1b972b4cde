"""Control characters in user strings never reach an output raw (issue #35 item 7: terminal injection).

A model name such as ``"\x1b]0;pwned\x07"`` (retitle the terminal), ``"\x1b[2J"`` (clear it), a NUL, a CR or a
bidi override used to pass into ``report.md``, ``report.html`` and the CLI tables as it came. Each output is
checked for the same thing: no character of category Cc or Cf but newline and tab, and the escaped form
(:func:`alflow.reports.markdown.escape_controls`) visible where the name was. The Markdown helpers and the
other hostile names (HTML, links, rich markup) are :mod:`tests.markdown_check`'s and
:mod:`tests.unit.test_markdown_escaping`'s.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from rich.console import Console
from typer.testing import CliRunner

from alflow.cli import app
from alflow.cli import bench as bench_cli
from alflow.reports import render_comparison, render_run
from alflow.reports.markdown import escape_controls, escape_md, md_cell
from tests.markdown_check import HOSTILE, assert_inert, md_text
from tests.unit.report_runs import write_m0, write_m1, write_m2
from tests.unit.sse_server import threaded_sse_server
from tests.unit.test_markdown_escaping import reference_yaml

pytestmark = pytest.mark.unit

CONTROL = (
    "\x1b]0;pwned\x07",  # OSC: retitle the terminal, BEL-terminated
    "\x1b[2J\x1b[H",  # CSI: clear the screen, cursor home
    "ok\rFAKE",  # carriage return: overwrite what was printed
    "nul\x00byte",
    "del\x7f",
    "c1\x9b31m",  # C1 CSI
    "evil\u202etxt.exe",  # right-to-left override
    "\u2066isolate\u2069 \u200emark\u200f",
    "zero\u200bwidth\ufeffbom",
    "line\u2028sep",
)
"""Names carrying control and format characters, one kind each."""
ALL = " ".join(CONTROL)
MIXED = ALL + " " + " ".join(v for v in HOSTILE if "\n" not in v)
"""Every control name with the HTML, link and rich-markup ones of :data:`tests.markdown_check.HOSTILE`."""


def raw_controls(text: str) -> list[str]:
    """The control and format characters left in ``text`` (newline and tab are layout)."""
    return [c for c in text if unicodedata.category(c) in ("Cc", "Cf") and c not in "\n\t"]


def visible_md(value: str) -> str:
    """How a Markdown renderer shows an escaped value: escapes as text, CR and runs of space one space."""
    return " ".join(escape_controls(value, keep="\r").split())


def test_escape_controls_writes_visible_escapes_and_keeps_everything_else() -> None:
    assert escape_controls("\x1b]0;pwned\x07") == "\\x1b]0;pwned\\x07"
    assert escape_controls("ok\rFAKE\x00\x7f\x9b") == "ok\\x0dFAKE\\x00\\x7f\\x9b"
    assert escape_controls("evil\u202etxt") == "evil\\u202etxt"
    assert escape_controls("tag\U000e0041") == "tag\\U000e0041"
    assert escape_controls("a\nb\tc") == "a\nb\tc"
    assert escape_controls("a\nb", keep="") == "a\\x0ab"
    assert (
        escape_controls("Qwen3-235B é 日本 \u00e9\u0301 🚀 [x] <y>")
        == "Qwen3-235B é 日本 \u00e9\u0301 🚀 [x] <y>"
    )
    assert escape_controls(None) == "None"
    for value in (*CONTROL, ALL):
        assert raw_controls(escape_controls(value)) == [], value


def test_every_control_and_format_character_is_escaped() -> None:
    every = "".join(chr(c) for c in range(0x110000) if unicodedata.category(chr(c)) in ("Cc", "Cf"))
    assert raw_controls(escape_controls(every)) == []


@pytest.mark.parametrize("value", [*CONTROL, MIXED])
def test_markdown_filters_leave_no_raw_control(value: str) -> None:
    for out in (escape_md(value), md_cell(value)):
        assert raw_controls(out) == [], out
        assert_inert(out)
        assert md_text(out) == visible_md(value)


@pytest.mark.parametrize("value", [CONTROL[0], CONTROL[2], CONTROL[6], MIXED])
def test_report_md_and_html_leave_no_raw_control(tmp_path: Path, value: str) -> None:
    dirs = [write_m0(tmp_path, model=value), write_m1(tmp_path, model=value), write_m2(tmp_path, model=value)]
    for fmt in ("md", "html"):
        texts = [*(render_run(d, fmt) for d in dirs), render_comparison(dirs, fmt)]  # type: ignore[arg-type]
        for text in texts:
            assert raw_controls(text) == [], (fmt, raw_controls(text))
            if fmt == "md":
                assert_inert(text)
                assert visible_md(value) in md_text(text)
    if value is not MIXED:  # HTML: the name's escaped form, as text (MIXED also holds <, > and &)
        html = render_run(dirs[2], "html")
        assert escape_controls(value, keep="") in html


# --------------------------------------------------------------------------------------------
# CLI tables


def test_reference_show_leaves_no_raw_control(tmp_path: Path) -> None:
    path = reference_yaml(tmp_path / "ref.yaml", ("plain-model",), 2.5)
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["category"] = CONTROL[0]
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    show = CliRunner().invoke(app, ["reference", "show", str(path)], env={"COLUMNS": "600"})
    assert show.exit_code == 0, show.output
    assert raw_controls(show.output) == [], raw_controls(show.output)
    assert f"Reference AL: speed-bench/{escape_controls(CONTROL[0])} (example)" in show.output
    # model ids take the configuration's check (round 17): refused in one line, escaped
    refused = reference_yaml(tmp_path / "models.yaml", (*CONTROL, MIXED), 2.5)
    show = CliRunner().invoke(app, ["reference", "show", str(refused)], env={"COLUMNS": "600"})
    assert show.exit_code == 2, show.output
    assert raw_controls(show.output) == [], raw_controls(show.output)
    assert "control character(s)" in show.output


def test_bench_summary_table_escapes_every_value(monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = Console(record=True, width=800)
    monkeypatch.setattr(bench_cli, "console", recorder)
    summary = {
        "model": MIXED,
        "completed": 1,
        "failed": 0,
        "duration": 1.0,
        "request_throughput": 1.0,
        "output_throughput": 2.0,
        "total_token_throughput": 3.0,
        "itl_ms_note": CONTROL[1],
        "spec_decode": {"error": CONTROL[0]},
    }
    bench_cli._print_summary(summary)
    text = recorder.export_text(styles=False)
    assert raw_controls(text) == [], raw_controls(text)
    assert f"alflow bench: {escape_controls(MIXED)}" in text
    assert escape_controls(CONTROL[1]) in text
    assert f"unavailable: {escape_controls(CONTROL[0])}" in text


@pytest.fixture
def sse_server() -> Iterator[str]:
    with threaded_sse_server() as server:
        yield server.base_url


@pytest.mark.parametrize("name", [CONTROL[0], CONTROL[1], CONTROL[6], ALL])
def test_bench_table_title_leaves_no_raw_control(sse_server: str, name: str) -> None:
    args = ["bench", "--base-url", sse_server, "--model", name, "--endpoint", "completions", "--num-prompts", "2",
            "--isl", "8", "--osl", "4", "--vocab-size", "500", "--no-metrics", "--no-progress"]  # fmt: skip
    result = CliRunner().invoke(app, args, env={"COLUMNS": "800", "OPENAI_API_KEY": ""})
    assert result.exit_code == 2, result.output  # hostile round 6: refused before any request, in one line
    assert raw_controls(result.output) == [], raw_controls(result.output)
    assert result.output.startswith("error: --model ")
    assert "control character(s)" in result.output


def test_an_error_line_is_one_line_and_bounded_whatever_the_input() -> None:
    """Hostile round 4: a path holding a newline split the error line (a forged second line); an input of 100,000
    characters was echoed whole, twice."""
    from alflow.cli.common import MAX_ERROR_CHARS, error_line

    forged = error_line("run '/r/20261205T000200Z-a\nerror: forged <script>' does not exist\x1b[2J")
    assert not any(line.startswith("error:") for line in forged.splitlines()[1:])  # a second line is marked
    assert forged.splitlines()[1].startswith("  | error: forged")
    assert "\x1b" not in forged
    long = error_line(f"--dialect {'d' * 100_000!r} is not one of vllm, sglang; --dialect {'d' * 100_000!r}")
    assert len(long) < MAX_ERROR_CHARS + 100
    assert "characters cut" in long
    assert long.endswith("'")  # its end is kept
    secret = error_line("cannot reach http://u:Pw-Canary-14@h/" + "x" * 5000)
    assert "Canary-14" not in secret
