"""M2: synthetic benchmark. Synthetic acceptance at the reference AL, random prompts, a concurrency sweep.

Per point: prompts = ``prompts_per_concurrency`` x concurrency, warm-up =
``warmup_per_concurrency`` x concurrency (excluded from the window), client metrics and spec stats,
and the audit: the achieved AL must match the target within the scheme's expected spread, else the
point is invalid and the run fails (unless ``fail_on_invalid`` is off).
"""

from __future__ import annotations

from prefect import flow, get_run_logger

from alflow.config import BenchmarkParams
from alflow.methods.common import synthetic_target
from alflow.methods.dry_run import Plan, m2_server
from alflow.methods.m2 import run_m2
from alflow.methods.outcomes import M2Outcome
from alflow.workloads import check_m2_prompt_memory
from alflow_flows.common import dry_run_plan, label_flow_run, new_run_writer
from alflow_flows.presets import m2_params, run_name
from alflow_flows.steps import PREFECT_STEPS


@flow(
    name="m2-benchmark",
    flow_run_name=run_name("m2", m2_params, lambda p: f"{p.model.id}-k{p.k}"),
)
def benchmark(
    preset: str | None = None,
    model: str | None = None,
    k: int | None = None,
    target_al: float | None = None,
    concurrencies: list[int] | None = None,
    dry_run: bool = False,
    params: BenchmarkParams | None = None,
) -> M2Outcome | Plan:
    """M2: synthetic acceptance at the target AL over a concurrency sweep, audited per point.

    Give a preset (and change what you need below it), or the full configuration as params.

    Args:
        preset: Server preset by name: presets/NAME.yaml in the project (sim, vllm-h200, sglang-h200,
            trtllm-h200) or a Prefect Variable alflow-preset-NAME. It brings the server, where it runs,
            the model and this run's defaults. Given with params, it replaces their server and placement.
        model: Model id to serve and measure, e.g. Qwen/Qwen3-Next-80B-A3B-Instruct (empty: the preset's).
        k: Number of speculative tokens K, 1 to 16 (empty: the preset's).
        target_al: Target acceptance length that synthetic acceptance forces, 1 to K + 1 (empty: the
            reference AL of this model, method, thinking mode and K in the preset's reference table).
        concurrencies: Concurrency sweep, e.g. [4, 16] (empty: the preset's).
        dry_run: Print the plan (each server's command, environment with secrets by name, config
            files, release gates and knobs) to the log and an artifact, and start nothing.
        params: Advanced: the full configuration (empty: built from the preset). The fields above win
            over it.
    """
    params = m2_params(preset, model, k, target_al, concurrencies, params)
    if dry_run:
        return dry_run_plan("m2", params)
    check_m2_prompt_memory(params)  # on the machine that draws them, before the server starts
    server, origin = m2_server(params)  # what the dry run shows: the same code
    get_run_logger().info("synthetic target AL %.4f (%s)", synthetic_target(server), origin)
    writer = new_run_writer("m2", params.placement.results_root, params, server)
    label_flow_run(f"model:{params.model.id}", f"framework:{server.framework}", f"k:{params.k}", "m2")
    with writer:
        return run_m2(params, server, writer, PREFECT_STEPS)
