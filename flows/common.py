"""Pieces every flow shares: run ids, the run store, server configs per point, gate events."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from prefect import get_client, get_run_logger
from prefect.artifacts import create_markdown_artifact
from prefect.context import FlowRunContext
from prefect.events import Event, emit_event
from prefect.runtime import flow_run
from pydantic import BaseModel

from alflow.config import (
    BenchmarkParams,
    CalibrateParams,
    ExternalServer,
    GateParams,
    ProcessOptions,
    ServerConfig,
    SweepParams,
)
from alflow.errors import GateFailedError
from alflow.frameworks.recipes import build_launch, check_install
from alflow.methods.dry_run import Plan, first_server, plan_of, runs_here, unit_params
from alflow.results.provenance import code_version, host_info
from alflow.results.store import RunWriter, run_id_of
from alflow.util.fsutil import check_writable_dir, check_writable_file, local_path_of
from alflow.util.redact import redact_data, redact_urls_in_text
from alflow.workloads import check_m2_prompt_memory
from alflow_infra.runners.base import api_key_from_env
from alflow_tasks.redaction import install_log_redaction

install_log_redaction()  # every flow imports this module: its logs reach Prefect only through the redactor

PASSED_EVENT = "alflow.gate.passed"
"""M1's pass event: a deployment trigger in prefect.yaml (``m2-after-m1``) starts M2 from it."""
FAILED_EVENT = "alflow.gate.failed"
"""A failed gate or audit (M1, M2): never starts M2."""
OutcomeT = TypeVar("OutcomeT")
TOP_LEVEL = "none"
"""``alflow.parent-flow-run`` of a run that no other flow run started (not a sweep's or the demo's)."""


def label_flow_run(*labels: str) -> None:
    """Add ``labels`` (``model:...``, ``framework:...``, ``k:...``, the method) to this flow run's tags.

    The Prefect UI filters flow runs by them. They go on the run, not on its task runs (a ``tags()`` context): Prefect
    3.9 asks the server for a ``tag:<tag>`` concurrency slot before each tagged task run (``prefect/task_engine.py``,
    ``_concurrency(names=[f"tag:{tag}" ...])``), one round trip per task run: 157 of them, 15 s of a 49 s K = 1..7 sim
    sweep here.

    A label is for finding runs, not part of a measurement: when the server refuses it, the run goes on with a
    warning. The run's context gets the tags too, so the events its tasks emit (``alflow.regression.detected``) name
    them among their related resources.
    """
    context = FlowRunContext.get()
    if context is None or context.flow_run is None:
        return
    tags = sorted({*context.flow_run.tags, *labels})
    try:
        with get_client(sync_client=True) as client:
            client.update_flow_run(context.flow_run.id, tags=tags)
    except Exception as exc:  # any failure of the API call leaves the run unlabelled, nothing more
        get_run_logger().warning("the flow run was not labelled %s: %s", ", ".join(labels), exc)
        return
    context.flow_run.tags = tags


def run_id() -> str:
    """The Prefect flow run id (a fresh id outside a flow run)."""
    rid = flow_run.get_id()
    return str(rid) if rid else uuid.uuid4().hex


def new_run_writer(flow: str, root: str, params: BaseModel, server: ServerConfig) -> RunWriter:
    """A run directory for this flow run: ``params`` as its config, code and host provenance, ``server``'s engine label."""
    rid = run_id()
    provenance: dict[str, Any] = {"code_version": code_version(), "host": host_info(), "flow_run_id": rid}
    if server.engine_note is not None:
        provenance["engine_note"] = server.engine_note
    config = params.model_dump(mode="json")
    return RunWriter(
        root, flow, run_id=run_id_of(rid), config=config, provenance=provenance, simulated=server.simulated
    )


def check_outputs(params: object) -> None:
    """Before anything is measured: every local place the run writes to can take its files.

    The results root (a local one; an object store answers for itself) must be a folder alflow can write in
    or create (:func:`alflow.util.fsutil.check_writable_dir`: not under a regular file, not ``/dev/null`` or
    ``/proc``); M0's reference table must be writable at its real path (through a symlink, the link's target;
    :func:`alflow.util.fsutil.check_writable_file`). Raises :class:`~alflow.errors.InvalidInputError` (one line
    naming the input, the value and what is allowed). Nothing is created.
    """
    if not isinstance(params, CalibrateParams | GateParams | BenchmarkParams):
        return
    local = local_path_of(params.placement.results_root)
    if local is not None:  # an object store's root is checked when the run writes
        check_writable_dir(local, what="results_root")
    if isinstance(params, CalibrateParams):
        check_writable_file(params.reference_path, what="reference_path")


def check_launchable(params: object) -> None:
    """Before a run starts: its first server renders, and the install a process runner names can run it.

    Builds the launch of the flow's first point (M0: first model and K; M1; M2 with its synthetic target, the
    reference looked up as the flow will) and runs the recipe's install check against ``framework_env``: a vLLM
    CPU build without alflow's synthetic port asked for M2, a per-request acceptance level the installed release
    lacks, a release gate the image tag fails, an external server's ``api_key_env`` unset here; and first
    :func:`check_outputs`. Raises the recipe's error (an :class:`InvalidInputError`); other
    parameters (the sweep's: its children check their own) are not checked here.
    """
    if not isinstance(params, CalibrateParams | GateParams | BenchmarkParams):
        return
    check_outputs(params)
    if isinstance(params.placement.runner, ExternalServer):  # its API key's variable is set in this process
        api_key_from_env(params.placement.runner.api_key_env)
    if isinstance(params, BenchmarkParams):
        check_m2_prompt_memory(params)
    launch = build_launch(first_server(params))
    runner = params.placement.runner
    if isinstance(runner, ProcessOptions) and runner.framework_env:
        check_install(launch, Path(runner.framework_env).expanduser().absolute())


def measured(value: OutcomeT | Plan) -> OutcomeT:
    """A child flow's outcome from a measured run (the flows that call others never ask for a dry run)."""
    if isinstance(value, Plan):
        raise TypeError("internal: a dry run's plan where a measured outcome was expected")
    return value


def checked_plan(flow: str, params: CalibrateParams | GateParams | BenchmarkParams | SweepParams) -> Plan:
    """Every check a real run makes before it starts, then the run's plan.

    Each M1 and M2 of a sweep in this process; a sweep fanned out over GPU nodes checks only what renders
    here (its children check their installs and outputs on their nodes, as a real sweep's do).
    """
    if runs_here(params):
        for unit in unit_params(params):
            check_launchable(unit)
    return plan_of(flow, params)


def dry_run_plan(flow: str, params: CalibrateParams | GateParams | BenchmarkParams | SweepParams) -> Plan:
    """A flow's dry run: :func:`checked_plan`, written to the run's log and a markdown artifact.

    The artifact holds the text in a fenced block longer than any backtick run in it: user strings are shown,
    never rendered.
    """
    plan = checked_plan(flow, params)
    get_run_logger().info("%s", plan.text())
    create_markdown_artifact(
        key=f"{flow}-dry-run", markdown=plan.markdown(), description=f"{flow}: the plan; nothing was started"
    )
    return plan


def gate_failure(flow: str, message: str, payload: dict[str, Any]) -> GateFailedError:
    """Emit an ``alflow.gate.failed`` event for automations and return the error to raise.

    The message (it becomes the flow run's state message) and the event pass through the redactor: a
    failure may quote another error's text with a URL in it (:func:`alflow.util.redact.redact_urls_in_text`).
    """
    message = redact_urls_in_text(message)
    emit_event(
        event=FAILED_EVENT,
        resource={"prefect.resource.id": f"alflow.flow-run.{run_id()}", "prefect.resource.name": flow},
        payload=_redacted({"message": message, **payload}),
    )
    return GateFailedError(message)


def _redacted(payload: dict[str, Any]) -> dict[str, Any]:
    """An event's payload with every URL in it without credentials (Prefect stores events as given)."""
    clean = redact_data(payload)
    assert isinstance(clean, dict)
    return clean


def pass_event(
    params: GateParams, *, run_dir: str, reference_al: float
) -> tuple[dict[str, str], dict[str, Any]]:
    """The labels and payload of M1's pass event: what M2 needs to measure the server M1 passed.

    Labels (strings, what a trigger matches on): ``alflow.model`` (the model id), ``alflow.framework``,
    ``alflow.k``, ``alflow.thinking``, ``alflow.method``. Payload (JSON): the model, the server
    template and its placement as M1 ran them, K, thinking, method and drafter, the reference table
    and the model's name in it, the reference AL and M1's run directory.
    """
    labels = {
        "alflow.model": params.model.id,
        "alflow.framework": params.server.framework,
        "alflow.k": str(params.k),
        "alflow.thinking": params.thinking.value,
        "alflow.method": params.method.value,
    }
    payload: dict[str, Any] = {
        "model": params.model.model_dump(mode="json"),
        "method": params.method.value,
        "draft_model": params.draft_model,
        "k": params.k,
        "thinking": params.thinking.value,
        "server": params.server.model_dump(mode="json"),
        "placement": params.placement.model_dump(mode="json"),
        "reference_path": params.reference_path,
        "reference_model": params.reference_model,
        "reference_al": reference_al,
        "run_dir": run_dir,
    }
    return labels, payload


def _parent_flow_run() -> str:
    """The flow run this one runs inside (a sweep, the demo), ``TOP_LEVEL`` when none, "unknown" when the API cannot say."""
    try:
        parent = flow_run.get_parent_flow_run_id()
    except Exception:  # the API did not answer: not known to be a top-level run
        return "unknown"
    return str(parent) if parent else TOP_LEVEL


def emit_passed(flow: str, labels: Mapping[str, str], payload: dict[str, Any]) -> Event | None:
    """Emit an ``alflow.gate.passed`` event (see :func:`pass_event`); only ever after a passed gate.

    The resource is this flow run (``alflow.flow-run.<id>``) with ``labels``, the preset's name
    (``alflow.preset``) when the run was given one, and ``alflow.parent-flow-run``: the flow run that
    started this one, or ``none`` for a top-level run (the trigger starts M2 only for those: a sweep
    and the demo run their own M2).
    """
    resource = {
        "prefect.resource.id": f"alflow.flow-run.{run_id()}",
        "prefect.resource.name": flow,
        **labels,
        "alflow.parent-flow-run": _parent_flow_run(),
    }
    preset = flow_run.get_parameters().get("preset")
    if isinstance(preset, str) and preset:
        resource["alflow.preset"] = preset
    return emit_event(event=PASSED_EVENT, resource=resource, payload=_redacted(payload))
