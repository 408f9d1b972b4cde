"""M1's events on the sim: a passed gate emits ``alflow.gate.passed`` only, a failed one ``alflow.gate.failed`` only.

prefect.yaml's ``m2-after-m1`` trigger starts M2 from the pass event of a top-level run; an M1 inside
another flow (a sweep, the demo) names that flow run as ``alflow.parent-flow-run``, so it starts none.
The events are captured where :mod:`alflow_flows.common` sends them (tests/e2e/test_m1_m2_trigger.py sends them
to a real server).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from prefect import flow

from alflow.config import GateParams
from alflow_flows import common
from alflow_flows.common import FAILED_EVENT, PASSED_EVENT, TOP_LEVEL, run_id
from alflow_flows.gate import gate

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("prefect_harness")]

SIM = ("--time-scale", "0")


def _params(tmp_path: Path, *extra: str) -> GateParams:
    """The sim M1 of presets/sim.yaml (reference: the example table's Qwen3.5, thinking on), GSM8K off."""
    return GateParams.model_validate(
        {
            "model": {"id": "demo-llama-70b", "reasoning": True},
            "k": 3,
            "thinking": "on",
            "server": {"framework": "sim", "model": "demo-llama-70b", "extra_args": [*SIM, *extra]},
            "placement": {"results_root": str(tmp_path / "results")},
            "reference_path": "references/examples.yaml",
            "reference_model": "Qwen3.5",
            "load": {"concurrency": 8},
            "gsm8k": {"enabled": False},
        }
    )


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The events alflow_flows.common emits during the test."""
    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(common, "emit_event", lambda **kw: sent.append(kw))
    return sent


def test_a_passed_gate_emits_the_pass_event_only(tmp_path: Path, events: list[dict[str, Any]]) -> None:
    params = _params(tmp_path)
    out = gate(params=params)
    assert out.passed
    [event] = events
    assert event["event"] == PASSED_EVENT
    resource, payload = event["resource"], event["payload"]
    assert resource["prefect.resource.name"] == "m1-gate"
    assert resource["prefect.resource.id"].startswith("alflow.flow-run.")
    assert {k: resource[k] for k in ("alflow.model", "alflow.framework", "alflow.k", "alflow.thinking")} == {
        "alflow.model": "demo-llama-70b",
        "alflow.framework": "sim",
        "alflow.k": "3",
        "alflow.thinking": "on",
    }
    assert resource["alflow.parent-flow-run"] == TOP_LEVEL
    assert payload["run_dir"] == out.run_dir
    assert payload["server"] == params.server.model_dump(mode="json")
    assert payload["reference_path"] == "references/examples.yaml"
    assert payload["reference_al"] > 1.0


def test_a_failed_gate_emits_the_failed_event_only(tmp_path: Path, events: list[dict[str, Any]]) -> None:
    state = gate(params=_params(tmp_path, "--acceptance-quality", "0.5"), return_state=True)
    assert state.is_failed()
    assert [e["event"] for e in events] == [FAILED_EVENT]


def test_an_m1_inside_another_flow_names_its_parent(tmp_path: Path, events: list[dict[str, Any]]) -> None:
    @flow
    def outer() -> str:
        gate(params=_params(tmp_path))
        return run_id()

    parent = outer()
    [event] = events
    assert event["event"] == PASSED_EVENT
    assert event["resource"]["alflow.parent-flow-run"] == parent
