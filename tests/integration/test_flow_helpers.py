"""Flow helpers that need no Prefect run: `alflow run` config errors (the best-K summary: tests/unit/test_points.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ALFLOW = str(Path(sys.executable).parent / "alflow")


def test_alflow_run_names_the_bad_field(tmp_path: Path) -> None:
    config = tmp_path / "m2.yaml"
    config.write_text(
        "model: {id: m}\nk: 3\nserver: {framework: sim, model: m}\ntarget_al: 9.5\nconcurrencies: [0]\n"
    )
    out = subprocess.run(
        [ALFLOW, "run", "m2", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 2
    assert str(config) in out.stderr
    assert "concurrencies" in out.stderr or "target_al" in out.stderr
    missing = subprocess.run(
        [ALFLOW, "run", "m9", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert missing.returncode == 2
    assert "unknown flow 'm9'; known: m0, m1, m2, sweep" in missing.stderr


def test_point_server_keeps_vllms_sampler_switches_for_every_k() -> None:
    from alflow.config import SpecMethod, SpeculativeConfig, server_config
    from alflow.methods.common import point_server

    template = server_config(
        framework="vllm",
        model="org/m",
        speculative=SpeculativeConfig(
            method="mtp", k=1, rejection_sample_method="block", draft_sample_method="greedy"
        ),
    )
    point = point_server(template, "org/m", SpecMethod.MTP, 5)
    assert point.speculative is not None
    assert point.speculative.k == 5
    assert point.speculative.rejection_sample_method == "block"
    assert point.speculative.draft_sample_method == "greedy"
