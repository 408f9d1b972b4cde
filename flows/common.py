"""Pieces every flow shares: run ids, the run store, server configs per point, failure events."""

from __future__ import annotations

import uuid
from typing import Any

from prefect import get_run_logger
from prefect.events import emit_event
from prefect.runtime import flow_run

from alflow.config import (
    ModelSpec,
    ServerConfig,
    SpecMethod,
    SpeculativeConfig,
    SyntheticAcceptance,
    ThinkingMode,
    server_config,
)
from alflow.errors import AlflowError
from alflow.reference import load_reference
from alflow.results.provenance import code_version, host_info
from alflow.results.store import RunWriter, run_id_of


class GateFailedError(AlflowError):
    """A gate or audit failed: the flow run ends Failed with this message."""


def run_id() -> str:
    """The Prefect flow run id (a fresh id outside a flow run)."""
    rid = flow_run.get_id()
    return str(rid) if rid else uuid.uuid4().hex


def open_run(
    flow: str, root: str, config: dict[str, Any], *, simulated: bool, engine_note: str | None = None
) -> RunWriter:
    """A run directory for this flow run, with code and host provenance (and the engine's label)."""
    rid = run_id()
    provenance: dict[str, Any] = {"code_version": code_version(), "host": host_info(), "flow_run_id": rid}
    if engine_note is not None:
        provenance["engine_note"] = engine_note
    return RunWriter(
        root,
        flow,
        run_id=run_id_of(rid),
        config=config,
        provenance=provenance,
        simulated=simulated,
    )


def point_server(
    template: ServerConfig,
    model: str,
    method: SpecMethod,
    k: int,
    *,
    draft_model: str | None = None,
    synthetic: SyntheticAcceptance | None = None,
) -> ServerConfig:
    """The template with this point's model, speculative method and K, and synthetic knobs (validated)."""
    data = template.model_dump()
    carry: dict[str, object] = {}
    spec = template.speculative
    if spec is not None:
        # vLLM's sampler switches hold for every K and method
        carry = {
            "rejection_sample_method": spec.rejection_sample_method,
            "draft_sample_method": spec.draft_sample_method,
        }
        if spec.method is method:
            # the template's n-gram lookup windows hold for every K
            carry.update(prompt_lookup_min=spec.prompt_lookup_min, prompt_lookup_max=spec.prompt_lookup_max)
    point_spec = SpeculativeConfig.model_validate(
        {"method": method, "k": k, "draft_model": draft_model, **carry}
    )
    data.update(
        model=model,
        speculative=point_spec.model_dump(),
        synthetic=None if synthetic is None else synthetic.model_dump(),
    )
    return server_config(data)


def reference_al(
    path: str, model: ModelSpec, name: str | None, method: SpecMethod, thinking: ThinkingMode, k: int
) -> float:
    """The reference AL of (model, method, thinking, K) from a reference table."""
    entry = load_reference(path).lookup(name or model.id, method, thinking, k)
    get_run_logger().info(
        "reference AL for %s %s thinking=%s K=%d: %.4f (%s)",
        entry.model,
        method.value,
        thinking.value,
        k,
        entry.al,
        path,
    )
    return entry.al


def fail(flow: str, message: str, payload: dict[str, Any]) -> GateFailedError:
    """Emit an ``alflow.gate.failed`` event for automations and return the error to raise."""
    emit_event(
        event="alflow.gate.failed",
        resource={"prefect.resource.id": f"alflow.flow-run.{run_id()}", "prefect.resource.name": flow},
        payload={"message": message, **payload},
    )
    return GateFailedError(message)
