"""prefect.yaml's M1 -> M2 trigger without a server, through Prefect's own server-side code.

The trigger of ``m2-after-m1`` becomes the automation ``prefect deploy`` creates; a sample pass event is
what :func:`alflow_flows.common.emit_passed` sends for a GateParams; the server's trigger decides whether it
covers the event, and the server's RunDeployment action renders the parameters, which must then pass
the server's parameter-schema check and the flow's own validation as the M2 of the same (model,
framework, K).
"""

from __future__ import annotations

import asyncio
import copy
import json
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from prefect.events.schemas.deployment_triggers import DeploymentEventTrigger
from prefect.server.events.actions import RunDeployment
from prefect.server.events.schemas.automations import Automation, TriggeredAction
from prefect.server.events.schemas.events import ReceivedEvent
from prefect.utilities.schema_tools.validation import validate

from alflow.config import BenchmarkParams, GateParams
from alflow_deployments.serve import load_deployments, load_flow, triggers
from alflow_flows import common
from alflow_flows.common import FAILED_EVENT, PASSED_EVENT, TOP_LEVEL, emit_passed, pass_event

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
DEPLOYMENTS = load_deployments(ROOT / "prefect.yaml")
SPEC = next(d for d in DEPLOYMENTS if d["name"] == "m2-after-m1")

SIM_M1 = GateParams.model_validate(
    {
        "model": {"id": "demo-llama-70b", "reasoning": True},
        "k": 3,
        "thinking": "on",
        "server": {"framework": "sim", "model": "demo-llama-70b", "extra_args": ["--time-scale", "0"]},
        "placement": {"results_root": "/data/results"},
        "reference_path": "references/examples.yaml",
        "reference_model": "Qwen3.5",
    }
)
GPU_M1 = GateParams.model_validate(
    {
        "model": {"id": "Qwen/Qwen3-Next-80B-A3B-Instruct"},
        "method": "eagle3",
        "draft_model": "org/eagle3-drafter",
        "k": 5,
        "thinking": "off",
        "server": {
            "framework": "vllm",
            "model": "Qwen/Qwen3-Next-80B-A3B-Instruct",
            "image": "vllm/vllm-openai:v0.20.0",
            "parallelism": {"tp": 2},
        },
        "placement": {
            "runner": {"kind": "docker", "gpus": "all", "secrets": ["HF_TOKEN"]},
            "gpu_host": "gpu-h200-node-1",
        },
        "reference_path": "references/speed-bench-coding.yaml",
    }
)


def _automation() -> Automation:
    """The automation ``prefect deploy`` (and deployments/serve.py) makes of the trigger, as the server holds it."""
    [trigger] = triggers(copy.deepcopy(SPEC))  # what the deploy command's TypeAdapter makes of it
    assert isinstance(trigger, DeploymentEventTrigger)
    trigger.set_deployment_id(uuid.uuid4())
    core = trigger.as_automation().model_dump(mode="json")
    return Automation.model_validate({**core, "id": str(uuid.uuid4())})


def _sent(params: GateParams, monkeypatch: pytest.MonkeyPatch, **runtime: Any) -> dict[str, Any]:
    """What :func:`emit_passed` sends for a passed M1 of ``params`` (outside a flow run: a top-level run)."""
    sent: dict[str, Any] = {}
    monkeypatch.setattr(common, "emit_event", lambda **kw: sent.update(kw))
    if "parameters" in runtime:
        monkeypatch.setattr(common.flow_run, "get_parameters", lambda: runtime["parameters"])
    emit_passed("m1-gate", *pass_event(params, run_dir="/data/results/m1/run-1", reference_al=2.5))
    return sent


def _event(sent: dict[str, Any], *, deployment: str | None = "m1-gate", **labels: str) -> ReceivedEvent:
    """The event as the server receives it from an m1-gate deployment run (related resources added)."""
    related = []
    if deployment is not None:
        related.append(
            {
                "prefect.resource.id": f"prefect.deployment.{uuid.uuid4()}",
                "prefect.resource.role": "deployment",
                "prefect.resource.name": deployment,
            }
        )
    return ReceivedEvent.model_validate(
        {
            "occurred": datetime.now(UTC).isoformat(),
            "event": sent["event"],
            "resource": {**sent["resource"], **labels},
            "related": related,
            "payload": json.loads(json.dumps(sent["payload"])),  # what crosses the wire
            "id": str(uuid.uuid4()),
        }
    )


def _render(automation: Automation, event: ReceivedEvent) -> dict[str, Any]:
    """The parameters the server's RunDeployment action renders for ``event``."""
    [action] = automation.actions
    assert isinstance(action, RunDeployment)
    triggered = TriggeredAction(
        automation=automation,
        triggered=datetime.now(UTC),
        triggering_labels={},
        triggering_event=event,
        action=action,
    )
    rendered: dict[str, Any] = asyncio.run(action.render_parameters(triggered))
    return rendered


def test_the_trigger_expects_the_pass_event_only_and_runs_m2() -> None:
    assert SPEC["entrypoint"] == "flows/benchmark.py:benchmark"
    assert not SPEC.get("schedules")
    # the full params only: a short-form default (preset, model, K) would win over the trigger's params
    assert set(SPEC["parameters"]) == {"params"}
    [spec] = SPEC["triggers"]
    assert spec["expect"] == [PASSED_EVENT]
    assert spec.get("enabled", True)
    for deployment in DEPLOYMENTS:  # no trigger anywhere starts anything from a failed gate
        assert FAILED_EVENT not in json.dumps(deployment.get("triggers") or []), deployment["name"]
    automation = _automation()
    assert automation.enabled
    assert [a.type for a in automation.actions] == ["run-deployment"]


@pytest.mark.parametrize("m1", [SIM_M1, GPU_M1], ids=["sim", "vllm-eagle3"])
def test_a_pass_event_renders_the_m2_of_the_same_model_framework_and_k(
    m1: GateParams, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent = _sent(m1, monkeypatch)
    assert sent["event"] == PASSED_EVENT
    resource = sent["resource"]
    assert resource["prefect.resource.id"].startswith("alflow.flow-run.")
    assert resource["prefect.resource.name"] == "m1-gate"
    assert (resource["alflow.model"], resource["alflow.framework"], resource["alflow.k"]) == (
        m1.model.id,
        m1.server.framework,
        str(m1.k),
    )
    assert resource["alflow.parent-flow-run"] == TOP_LEVEL
    assert "alflow.preset" not in resource
    assert all(isinstance(v, str) for v in resource.values())

    automation = _automation()
    event = _event(sent)
    assert automation.trigger.covers(event)
    rendered = _render(automation, event)
    parameters = {**(SPEC.get("parameters") or {}), **rendered}  # the server's merge over the defaults
    flow = load_flow(SPEC["entrypoint"])
    validate(parameters, flow.parameters.model_dump_for_openapi(), raise_on_error=True)  # the server's check
    m2 = flow.validate_parameters(parameters)["params"]  # the flow run's own validation
    assert isinstance(m2, BenchmarkParams)
    assert rendered["params"]["k"] == m1.k  # typed through JSON: an int, not the label's "3"
    assert isinstance(rendered["params"]["k"], int)
    assert (m2.model, m2.server, m2.k) == (m1.model, m1.server, m1.k)
    assert (m2.method, m2.draft_model, m2.thinking) == (m1.method, m1.draft_model, m1.thinking)
    assert m2.placement == m1.placement
    assert (m2.reference_path, m2.reference_model, m2.target_al) == (
        m1.reference_path,
        m1.reference_model,
        None,
    )
    trigger_params = SPEC["triggers"][0]["parameters"]["params"]
    assert m2.workload.model_dump(mode="json") == {
        **m2.workload.model_dump(mode="json"),
        **trigger_params["workload"],
    }
    assert list(m2.concurrencies) == trigger_params["concurrencies"]


def test_no_m2_after_a_failed_gate_a_nested_m1_or_another_deployment(monkeypatch: pytest.MonkeyPatch) -> None:
    sent = _sent(SIM_M1, monkeypatch)
    automation = _automation()
    assert automation.trigger.covers(_event(sent))
    failed = _event({**sent, "event": FAILED_EVENT})
    assert not automation.trigger.covers(failed)
    # an M1 inside a sweep or the demo: its parent runs its own M2
    assert not automation.trigger.covers(_event(sent, **{"alflow.parent-flow-run": str(uuid.uuid4())}))
    assert not automation.trigger.covers(_event(sent, **{"alflow.parent-flow-run": "unknown"}))
    # the GPU sweeps' M1 deployment, and an M1 run from the command line (no deployment)
    assert not automation.trigger.covers(_event(sent, deployment="gpu-m1-gate"))
    assert not automation.trigger.covers(_event(sent, deployment=None))


def test_the_pass_event_names_the_runs_preset(monkeypatch: pytest.MonkeyPatch) -> None:
    sent = _sent(SIM_M1, monkeypatch, parameters={"preset": "sim", "k": None})
    assert sent["resource"]["alflow.preset"] == "sim"
    assert _automation().trigger.covers(_event(sent))
