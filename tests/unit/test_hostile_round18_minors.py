"""Hostile round 18 (#49), minors M1 and M7: contradictory or useless bench options, one line before any request.

M1: ``--min-tokens 10 --max-tokens 5`` was sent (a server answers every such request with 400); now refused
naming both. M7: ``--scrape-interval 1e-9`` scraped the metrics endpoint back to back; now 0 (off) or >= 0.05 s.
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from alflow.cli import app

pytestmark = pytest.mark.unit

CLOSED = "http://127.0.0.1:9"  # nothing listens: a row that passed the checks fails with "cannot reach"


def _run(argv: list[str]) -> tuple[int, list[str]]:
    result = CliRunner().invoke(app, ["bench", "--base-url", CLOSED, "--model", "m", "--no-progress", *argv])
    return result.exit_code, [line for line in result.output.splitlines() if line.strip()]


@pytest.mark.parametrize(
    ("argv", "wanted"),
    [
        (["--min-tokens", "10", "--max-tokens", "5"], "--min-tokens 10: must be at most --max-tokens (5)"),
        (["--min-tokens", "65", "--osl", "64"], "--min-tokens 65: must be at most --osl (64)"),
        (["--scrape-interval", "1e-9"], "--scrape-interval 1e-09: must be 0 (off) or at least 0.05 s"),
        (["--scrape-interval", "0.049"], "--scrape-interval 0.049: must be 0 (off) or at least 0.05 s"),
    ],
)
def test_contradictory_or_useless_options_are_one_line(argv: list[str], wanted: str) -> None:
    code, lines = _run(argv)
    assert code == 2, lines
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: "), lines
    assert wanted in lines[0], lines


@pytest.mark.parametrize(
    "argv",
    [
        ["--min-tokens", "5", "--max-tokens", "5"],
        ["--min-tokens", "64", "--osl", "64"],
        ["--scrape-interval", "0"],
        ["--scrape-interval", "0.05"],
        [
            "--dataset",
            "custom",
            "--input-file",
            "missing.jsonl",
            "--min-tokens",
            "99999",
        ],  # rows' caps: not known here
    ],
)
def test_consistent_options_pass_the_checks(argv: list[str]) -> None:
    code, lines = _run(argv)
    joined = "\n".join(lines)
    assert "--min-tokens" not in joined, joined
    assert "--scrape-interval" not in joined, joined
    assert code != 0  # it went on: the missing file or the closed port stops it
