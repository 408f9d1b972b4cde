"""Hostile round 18 (#49), F5: every line alflow prints that holds a path or a name escapes control characters.

``wrote RUN_DIR/report.html`` (``report show``), ``wrote OUT`` (``-o``) and the site's start line ``alflow results:
N runs in ROOT`` printed the path raw: an ESC (clear screen, an OSC retitling the terminal) or an RLO (reordering
the line) in a run folder's name drove the terminal of whoever looped over a shared results root. The error lines
already escaped the same path; now :func:`alflow.cli.common.say` and ``say_err``, which print every such line, do.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from alflow.cli import app
from alflow.cli.common import markup_safe, say, say_err
from alflow.cli.results import _announce
from tests.unit.report_runs import write_m2

pytestmark = pytest.mark.unit

HOSTILE = "evil\x1b]0;pwn\x07\x1b[2Jroot\u202e"
RAW = ("\x1b", "\x07", "\u202e")


def _no_raw_controls(text: str) -> None:
    assert not [c for c in RAW if c in text], ascii(text)


def _hostile_run(tmp_path: Path) -> Path:
    run = Path(write_m2(tmp_path / "plain"))
    hostile = tmp_path / HOSTILE / "m2" / run.name
    hostile.parent.mkdir(parents=True)
    shutil.copytree(run, hostile)
    return hostile


def test_report_show_says_wrote_with_the_folder_escaped(tmp_path: Path) -> None:
    run = _hostile_run(tmp_path)
    result = CliRunner().invoke(app, ["report", "show", str(run)])
    assert result.exit_code == 0, result.output
    _no_raw_controls(result.output)
    assert "wrote " in result.output, result.output
    assert "\\x1b]0;pwn\\x07\\x1b[2Jroot\\u202e" in result.output, result.output
    assert (run / "report.html").is_file()


def test_report_show_output_file_escaped(tmp_path: Path) -> None:
    run = _hostile_run(tmp_path)
    out = tmp_path / HOSTILE / "out.md"
    result = CliRunner().invoke(app, ["report", "show", str(run), "-f", "md", "-o", str(out)])
    assert result.exit_code == 0, result.output
    _no_raw_controls(result.output)
    assert "\\u202e/out.md" in result.output, result.output
    assert out.is_file()


def test_results_start_line_escapes_the_root(capsys: pytest.CaptureFixture[str]) -> None:
    _announce(f"1 runs in {HOSTILE}")
    err = capsys.readouterr().err
    _no_raw_controls(err)
    assert err.startswith("alflow results: 1 runs in evil\\x1b]0;pwn\\x07"), ascii(err)


def test_say_and_say_err_escape_controls_and_keep_newlines(capsys: pytest.CaptureFixture[str]) -> None:
    say(f"Results: {HOSTILE}\nnext line")
    say_err(f"wrote {HOSTILE}/report.html")
    got = capsys.readouterr()
    for text in (got.out, got.err):
        _no_raw_controls(text)
    assert got.out.splitlines()[1] == "next line"
    assert "\\u202e/report.html" in got.err


def test_markup_safe_escapes_controls_and_markup() -> None:
    text = markup_safe(f"[red]{HOSTILE}")
    _no_raw_controls(text)
    assert text.startswith("\\[red]evil\\x1b]0;pwn\\x07"), text
