"""Runs stored by earlier releases still read, validate and render.

``tests/fixtures/runs/<commit>/`` holds what that release wrote (reports left out: they are rendered here):
``alflow demo`` on the sim (M0, two M1 runs, one passed and one failed, M2, with their regression.json where the
release wrote one) and ``alflow run sweep --preset sim --ks 1,2 --concurrencies 2 --target-al 1.5``, each run from
a worktree of that commit: 4f9de94 (before the methods moved out of the flows and summary.json got its models) and
ab3cdad (where issues #48 and #49 started: before the typed rows, the stricter readers of #49).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from alflow.reports.render import render_run
from alflow.results.store import open_run
from alflow.results.summaries import read_summary

pytestmark = pytest.mark.unit

RELEASES = ("4f9de94", "ab3cdad")
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "runs"
RUNS = sorted(p.parent for release in RELEASES for p in (FIXTURES / release).glob("*/*/manifest.json"))


@pytest.mark.parametrize("release", RELEASES)
def test_the_fixture_holds_a_run_of_every_flow(release: str) -> None:
    assert sorted({run.parent.name for run in RUNS if run.parents[1].name == release}) == [
        "m0",
        "m1",
        "m2",
        "sweep",
    ]


@pytest.mark.parametrize(
    "stored", RUNS, ids=[f"{p.parents[1].name}-{p.parent.name}-{p.name[-6:]}" for p in RUNS]
)
@pytest.mark.parametrize("fmt", ["html", "md"])
def test_a_run_of_the_previous_release_reads_validates_and_renders(
    stored: Path, fmt: str, tmp_path: Path
) -> None:
    copy = tmp_path / stored.name
    shutil.copytree(stored, copy)  # the fixture stays as that release wrote it
    run = open_run(copy)
    summary = read_summary(run.json("summary"), str(copy / "summary.json"))
    assert summary.flow == run.manifest.flow
    text = render_run(run, fmt)  # type: ignore[arg-type]
    assert "SIMULATED" in text  # every fixture run is on the sim, and says so


@pytest.mark.parametrize(
    "stored",
    sorted(p.parent for p in FIXTURES.glob("*/*/*/regression.json")),
    ids=lambda p: f"{p.parents[1].name}-{p.parent.name}",
)
def test_a_regression_report_of_a_previous_release_passes_todays_reader(stored: Path) -> None:
    """Today's reader re-judges each stored verdict from its numbers (round 15): what a release wrote passes."""
    import json

    from alflow.results.regression import parse_report

    parse_report(json.loads((stored / "regression.json").read_text()), str(stored))
