"""The dry run from the command line (a real ``alflow`` process) and from the Prefect UI (a flow parameter)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from uuid import UUID

import pytest
import yaml
from prefect import get_client

from alflow.config import BenchmarkParams
from alflow.methods.dry_run import Plan
from alflow_flows.benchmark import benchmark
from tests.integration.sim_runs import run_artifacts

pytestmark = pytest.mark.integration

ALFLOW = str(Path(sys.executable).with_name("alflow"))
ROOT = Path(__file__).resolve().parents[2]
MODEL = {"id": "org/target", "sampling_thinking_off": {"temperature": 0.0, "max_tokens": 64}}


def dflash_m2(root: Path) -> dict[str, object]:
    """An SGLang DFLASH M2 on a recent image, on Docker with a secret passed by name."""
    return {
        "model": MODEL,
        "method": "dflash",
        "draft_model": "org/dflash-drafter",
        "k": 4,
        "target_al": 3.1,
        "server": {"framework": "sglang", "model": "org/target", "image": "lmsysorg/sglang:v0.5.23"},
        "placement": {
            "runner": {"kind": "docker", "secrets": ["HF_TOKEN"]},
            "results_root": str(root / "results"),
        },
        "concurrencies": [4, 16],
    }


def test_the_command_line_prints_the_plan_and_starts_nothing(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "HF_TOKEN": "hf_value_never_read_123"}
    # the docs' line (docs/running/prefect.md), from the project's folder where the presets are
    text = subprocess.run(
        [ALFLOW, "run", "m2", "--preset", "sim", "--dry-run"],
        env=env,
        cwd=ROOT,
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith("dry run of m2: 1 server(s) would start; nothing was started")
    assert '"rejection_sample_method":"synthetic"' in text.stdout
    # an SGLang DFLASH M2 on Docker, as JSON: the forced length, its gate, the secret by name only
    config = tmp_path / "m2.yaml"
    config.write_text(yaml.safe_dump(dflash_m2(tmp_path)))
    as_json = subprocess.run(
        [ALFLOW, "run", "m2", "--config", str(config), "--dry-run", "--json"],
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert as_json.returncode == 0, as_json.stderr
    assert "hf_value_never_read_123" not in as_json.stdout + as_json.stderr
    (server,) = json.loads(as_json.stdout)["servers"]
    assert server["server"]["env"]["SGLANG_SIMULATE_ACC_LEN"] == "3.1"
    assert "--speculative-algorithm DFLASH" in server["server"]["command"]
    assert server["secrets"] == ["HF_TOKEN"]
    assert any("PR #32595" in g["source"] for g in server["gates"])
    assert not (tmp_path / "results").exists()  # nothing was written: no run directory, no store


def test_the_flow_parameter_returns_the_plan_and_writes_it_as_an_artifact(
    tmp_path: Path, prefect_harness: None
) -> None:
    del prefect_harness
    params = BenchmarkParams.model_validate(dflash_m2(tmp_path))
    state = benchmark(params=params, dry_run=True, return_state=True)
    assert state.is_completed(), state.message
    plan = state.result()
    assert isinstance(plan, Plan)
    assert plan.servers[0].step == "m2"
    (artifact,) = [a for a in run_artifacts(state) if a.key == "m2-dry-run"]
    with get_client(sync_client=True) as client:
        run = client.read_flow_run(UUID(str(state.state_details.flow_run_id)))
    assert run.name.startswith("m2-dry-run-org-target-k4-"), run.name  # the run's name says it only planned
    assert "SGLANG_SIMULATE_ACC_LEN=3.1" in str(artifact.data)
    assert str(artifact.data).count("```") == 2  # the plan sits in one fenced block: shown, never rendered
    assert not (tmp_path / "results").exists()
