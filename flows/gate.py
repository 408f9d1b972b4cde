"""M1: evaluation gate. Real acceptance of the framework under test against the reference, then GSM8K.

Synthetic acceptance is off. The AL gate passes when the achieved AL (with its confidence interval)
is not below ``reference - max(abs_tol, rel_tol x reference)``; the accuracy gate when both GSM8K
scores reach the model's threshold. The flow run ends Failed, naming the metric, its value and the
threshold, when either gate fails, and emits an ``alflow.gate.failed`` event for automations. A run that
passes emits ``alflow.gate.passed`` (labels: model, framework, K; payload: the server it passed), from
which the ``m2-after-m1`` deployment's trigger in prefect.yaml starts M2.
"""

from __future__ import annotations

from prefect import flow, get_run_logger

from alflow.config import GateParams, ThinkingMode
from alflow.methods.dry_run import Plan, first_server, reference_entry
from alflow.methods.m1 import run_m1
from alflow.methods.outcomes import M1Outcome
from alflow_flows.common import dry_run_plan, label_flow_run, new_run_writer
from alflow_flows.presets import m1_params, run_name
from alflow_flows.steps import PREFECT_STEPS


@flow(
    name="m1-gate",
    flow_run_name=run_name("m1", m1_params, lambda p: f"{p.server.framework}-{p.model.id}-k{p.k}"),
)
def gate(
    preset: str | None = None,
    model: str | None = None,
    k: int | None = None,
    thinking: ThinkingMode | None = None,
    dry_run: bool = False,
    params: GateParams | None = None,
) -> M1Outcome | Plan:
    """M1: the AL gate on SPEED-Bench coding, then the GSM8K accuracy gate.

    Give a preset (and change what you need below it), or the full configuration as params.

    Args:
        preset: Server preset by name: presets/NAME.yaml in the project (sim, vllm-h200, sglang-h200,
            trtllm-h200) or a Prefect Variable alflow-preset-NAME. It brings the server, where it runs,
            the model, the reference table and this run's defaults. Given with params, it replaces their
            server and placement.
        model: Model id to serve and gate, e.g. Qwen/Qwen3-Next-80B-A3B-Instruct (empty: the preset's).
        k: Number of speculative tokens K, 1 to 16 (empty: the preset's).
        thinking: Thinking mode of the requests, on or off; the reference AL of this mode is the bar
            (empty: the preset's).
        dry_run: Print the plan (each server's command, environment with secrets by name, config
            files, release gates and knobs) to the log and an artifact, and start nothing.
        params: Advanced: the full configuration (empty: built from the preset). The fields above win
            over it.
    """
    params = m1_params(preset, model, k, thinking, params)
    if dry_run:
        return dry_run_plan("m1", params)
    entry = reference_entry(params)  # what the dry run shows: the same code
    reference = entry.al
    get_run_logger().info(
        "reference AL for %s K=%d [%s]: %.4f (%s)",
        entry.model,
        params.k,
        entry.variant.label(),
        reference,
        params.reference_path,
    )
    server = first_server(params)
    writer = new_run_writer("m1", params.placement.results_root, params, server)
    label_flow_run(f"model:{params.model.id}", f"framework:{server.framework}", f"k:{params.k}", "m1")
    return run_m1(params, reference, server, writer, PREFECT_STEPS)  # enters the run directory itself
