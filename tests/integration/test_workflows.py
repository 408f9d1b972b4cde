"""The GitHub Actions workflows pass actionlint (from PyPI, installed by the dev setup)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
ACTIONLINT = Path(sys.executable).parent / "actionlint"
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


def _lint(*files: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ACTIONLINT), "-no-color", *map(str, files)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_both_workflows_exist() -> None:
    assert {p.name for p in WORKFLOWS} >= {"ci.yml", "reference-al.yml"}


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_actionlint_passes(workflow: Path) -> None:
    out = _lint(workflow)
    assert out.returncode == 0, out.stdout + out.stderr


def test_actionlint_catches_a_broken_workflow(tmp_path: Path) -> None:
    bad = tmp_path / ".github" / "workflows" / "bad.yml"
    bad.parent.mkdir(parents=True)
    bad.write_text(
        "on: push\njobs:\n  x:\n    runs-on: ubuntu-latest\n    steps:\n      - run: echo ${{ inputs.nope }}\n"
    )
    out = _lint(bad)
    assert out.returncode != 0
    assert "nope" in out.stdout


def test_reference_workflow_runs_the_readme_setup_and_the_audit() -> None:
    text = (ROOT / ".github" / "workflows" / "reference-al.yml").read_text()
    assert "bash scripts/setup.sh" in text
    assert "alflow run m0 --config" in text
    assert "alflow reference audit" in text
    assert "workflow_dispatch" in text
    assert "cron:" in text
