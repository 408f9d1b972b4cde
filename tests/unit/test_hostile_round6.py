"""Hostile round 6 of issue #49: what a sixth round of hostile inputs found, each answered now."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from alflow.cli import app

pytestmark = pytest.mark.unit

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "4f9de94" / "m2"
PASSWORD = "Pw-round6-9f3a"


@pytest.fixture
def m2_with_password(tmp_path: Path) -> Path:
    """The previous release's M2 run, its model id turned into a URL with a password (the configuration allows it)."""
    run = tmp_path / "m2" / next(p.name for p in FIXTURE.iterdir())
    shutil.copytree(next(FIXTURE.iterdir()), run)
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["config"]["model"]["id"] = f"https://bob:{PASSWORD}@models.example/llama"
    (run / "manifest.json").write_text(json.dumps(manifest))
    return run


@pytest.mark.parametrize("fmt", ["md", "html", "json", "csv"])
def test_a_password_in_a_stored_model_id_is_in_no_report_format(m2_with_password: Path, fmt: str) -> None:
    """F8: ``alflow report show RUN -f md|html|json|csv`` printed it (the site redacted the same run)."""
    out = m2_with_password.parent / f"out.{fmt}"
    ran = CliRunner().invoke(app, ["report", "show", str(m2_with_password), "-f", fmt, "-o", str(out)])
    assert ran.exit_code == 0, ran.output
    assert PASSWORD not in out.read_text()
    assert PASSWORD not in ran.output
    default = CliRunner().invoke(app, ["report", "show", str(m2_with_password)])  # report.html into the run
    assert default.exit_code == 0, default.output
    assert PASSWORD not in (m2_with_password / "report.html").read_text()


def test_a_report_output_that_cannot_be_a_file_is_refused_before_any_work(m2_with_password: Path) -> None:
    """F27: ``-o FIFO`` blocked until a reader came; ``-o /proc/self/mem`` failed after the work."""
    fifo = m2_with_password.parent / "fifo"
    os.mkfifo(fifo)
    for output, said in ((str(fifo), "not a regular file"), ("/proc/self/mem", "is under /proc"),
                         (str(m2_with_password), "is a folder"), ("", "is empty")):  # fmt: skip
        ran = CliRunner().invoke(app, ["report", "show", str(m2_with_password), "-f", "md", "-o", output])
        assert ran.exit_code == 2, (output, ran.output)
        assert said in ran.output
