"""The flows' short forms in real flow runs on the sim: a preset from a Prefect Variable, run names, one-line errors."""

from __future__ import annotations

from pathlib import Path
from uuid import UUID

import pytest
import yaml
from prefect.client.orchestration import get_client
from prefect.variables import Variable

from alflow_flows.benchmark import benchmark
from alflow_flows.gate import gate

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("prefect_harness")]


def _run_name(state: object) -> str:
    with get_client(sync_client=True) as client:
        run = client.read_flow_run(UUID(str(state.state_details.flow_run_id)))  # type: ignore[attr-defined]
    return str(run.name)


def test_m2_runs_a_preset_kept_in_a_prefect_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No presets/ folder under ALFLOW_HOME: the preset comes from the Variable alflow-preset-<name>."""
    monkeypatch.setenv("ALFLOW_HOME", str(tmp_path))
    preset = yaml.safe_load((ROOT / "presets" / "sim.yaml").read_text())
    preset["placement"]["results_root"] = str(tmp_path / "results")
    preset["benchmark"]["workload"] = {"kind": "random", "isl": 64, "osl": 32}
    Variable.set("alflow-preset-team-sim", preset, overwrite=True)
    state = benchmark(preset="team-sim", k=2, target_al=2.2, concurrencies=[2], return_state=True)
    assert state.is_completed(), state.message
    out = state.result()
    assert out.target_al == 2.2
    assert [p.concurrency for p in out.points] == [2]
    assert Path(out.run_dir).is_relative_to(tmp_path / "results")
    assert _run_name(state) == "m2-demo-llama-70b-k2"


def test_an_unknown_preset_fails_the_run_naming_the_input_and_the_places_looked_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ALFLOW_HOME", str(ROOT))
    state = gate(preset="no-such-preset", k=3, return_state=True)
    assert state.is_failed()
    message = str(state.message)
    assert "preset='no-such-preset' is not a known preset; known: " in message
    assert "sim" in message
    assert "a Prefect Variable alflow-preset-<name>" in message
    assert _run_name(state) == "m1-no-such-preset"
    nothing = benchmark(return_state=True)  # neither a preset nor params
    assert nothing.is_failed()
    assert "give preset (a server preset, e.g. sim) or params (the full configuration)" in str(
        nothing.message
    )
