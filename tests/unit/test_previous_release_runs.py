"""Runs stored by the previous release (4f9de94, before the methods moved out of the flows and summary.json got
its models) still read, validate and render.

``tests/fixtures/runs/4f9de94/`` holds what that release wrote (reports left out: they are rendered here):
``alflow demo`` on the sim (M0, two M1 runs, one passed and one failed, M2) and
``alflow run sweep --preset sim --ks 1,2 --concurrencies 2 --target-al 1.5``, run from a worktree of 4f9de94.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from alflow.reports.render import render_run
from alflow.results.store import open_run
from alflow.results.summaries import read_summary

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "4f9de94"
RUNS = sorted(p.parent for p in FIXTURES.glob("*/*/manifest.json"))


def test_the_fixture_holds_a_run_of_every_flow() -> None:
    assert sorted({run.parent.name for run in RUNS}) == ["m0", "m1", "m2", "sweep"]


@pytest.mark.parametrize("stored", RUNS, ids=[f"{p.parent.name}-{p.name[-6:]}" for p in RUNS])
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
