"""The K sweep: for each K, M1 (gate) then M2 (benchmark at that K's reference AL), and the sweep's own run.

Two modes:

- **in-process** (``fan_out`` None, a laptop): each K runs as subflows in this process, one after another;
- **fanned out** (``fan_out`` set, a team's GPU nodes): each K's M1 then M2 runs as a run of the
  ``m1-gate`` / ``m2-benchmark`` deployment on a free node (a work queue only that node's worker
  polls; each run holds the node's global concurrency limit), all nodes busy at once. The sweep
  waits for them, reads their results from the run store, names every failed, crashed or lost child
  run, and never waits on a node whose worker is gone (:mod:`alflow_tasks.fanout`). A re-run reuses the
  children that completed (Prefect's cache).

Either way the sweep writes its own run (``per_k`` and ``spec_stats`` tables, ``summary.json`` with
the best K per concurrency, ``report.md`` and ``report.html`` with the curves of every K).
"""

from __future__ import annotations

import dataclasses
import inspect
from datetime import UTC, datetime
from typing import Any, Literal, cast

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.client.schemas.objects import State
from prefect.futures import PrefectFuture
from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner

from alflow.acceptance.synthetic import K_MAX
from alflow.config import SweepParams
from alflow.methods.dry_run import Plan
from alflow.methods.outcomes import ChildRun, KOutcome, SweepOutcome
from alflow.methods.sweep import conclude_sweep
from alflow.methods.sweep_rules import (
    NodePool,
    benchmark_for,
    child_parameters,
    dispatch_rank,
    gate_for,
)
from alflow.results.rows import M2Point
from alflow_flows.benchmark import benchmark
from alflow_flows.common import dry_run_plan, label_flow_run, measured, new_run_writer
from alflow_flows.gate import gate
from alflow_flows.presets import run_name, sweep_params_of
from alflow_flows.steps import PREFECT_STEPS
from alflow_tasks.fanout import (
    ChildRunFailedError,
    cache_options,
    deployment_pools,
    read_m2_points,
    run_child,
)


def _subflow_run(flow: Literal["m1", "m2"], state: State[Any]) -> ChildRun:
    """The ChildRun of an M1 or M2 subflow that ended in ``state``."""
    done, run = state.is_completed(), state.state_details.flow_run_id
    return ChildRun(
        flow,
        passed=done,
        state=state.name or state.type.value,
        message=None if done else str(state.message),
        run_dir=measured(state.result()).run_dir if done else None,
        flow_run_id=None if run is None else str(run),
    )


def _in_process(params: SweepParams) -> tuple[dict[int, KOutcome], list[M2Point]]:
    """Every K as subflows here, one after another."""
    results: dict[int, KOutcome] = {}
    points: list[M2Point] = []
    for k in params.ks:
        m1 = _subflow_run("m1", gate(params=gate_for(params, k), return_state=True))
        if not m1.passed:
            get_run_logger().error("K=%d: M1 failed: %s", k, m1.message)
            if params.stop_on_gate_failure:
                results[k] = KOutcome.of(m1, None)
                continue
        bstate = benchmark(params=benchmark_for(params, k), return_state=True)
        m2 = _subflow_run("m2", bstate)
        if m2.passed:
            points += measured(bstate.result()).points
        results[k] = KOutcome.of(m1, m2)
    return results, points


def _child(
    params: SweepParams,
    k: int,
    step: str,
    prefix: str,
    nodes: NodePool,
    pools: dict[str, str],
    started: datetime,
) -> ChildRun:
    """K's M1 or M2 (``step``) as a child run through the cached task; its ChildRun whether it completed, failed or never ran."""
    fan = params.fan_out
    assert fan is not None
    deployment, child_params, child_flow = (
        (fan.gate_deployment, gate_for(params, k), gate)
        if step == "m1"
        else (fan.benchmark_deployment, benchmark_for(params, k), benchmark)
    )
    top_level = inspect.signature(child_flow.fn).parameters
    state = run_child.with_options(**cache_options(fan))(
        deployment,
        child_parameters(child_params, top_level),
        step,
        pools[deployment],
        child_params.placement.results_root,
        f"{prefix}-k{k}-{step}",
        nodes,
        dispatch_rank(step, k),
        fan,
        started,
        return_state=True,
    )
    if state.is_completed():
        result: ChildRun = state.result()
        return dataclasses.replace(result, cached=state.name == "Cached")
    error = state.result(raise_on_failure=False)
    if isinstance(error, ChildRunFailedError):
        return error.child
    return ChildRun("m1" if step == "m1" else "m2", passed=False, state="Not run", message=str(error))


@task(name="sweep_k", cache_policy=NO_CACHE)
def sweep_k(
    params: SweepParams, k: int, prefix: str, nodes: NodePool, pools: dict[str, str], started: datetime
) -> tuple[KOutcome, list[M2Point]]:
    """One K fanned out: M1 on a free node, then (unless it failed) M2 on a free node; M2's points from the store."""
    m1 = _child(params, k, "m1", prefix, nodes, pools, started)
    if not m1.passed and params.stop_on_gate_failure:
        return KOutcome.of(m1, None), []
    m2 = _child(params, k, "m2", prefix, nodes, pools, started)
    points = read_m2_points(m2.run_dir) if m2.passed and m2.run_dir else []
    return KOutcome.of(m1, m2), points


def _fanned_out(
    params: SweepParams, prefix: str
) -> tuple[dict[int, KOutcome], list[M2Point], dict[str, str]]:
    """Every K at once, each waiting for a free node."""
    assert params.fan_out is not None
    nodes = NodePool(params.fan_out.nodes)
    pools = deployment_pools(params.fan_out)
    started = datetime.now(UTC)
    futures = {k: sweep_k.submit(params, k, prefix, nodes, pools, started) for k in params.ks}
    results: dict[int, KOutcome] = {}
    points: list[M2Point] = []
    for k, future in futures.items():
        done: object = future.result(raise_on_failure=False)
        if isinstance(done, BaseException):  # the orchestration of this K broke (e.g. the API went away)
            why = f"the sweep could not run K={k}: {type(done).__name__}: {done}"
            results[k] = KOutcome.of(ChildRun("m1", passed=False, state="Not run", message=why), None)
            continue
        outcome, k_points = cast("tuple[KOutcome, list[M2Point]]", done)
        results[k] = outcome
        points += k_points
    return results, points, nodes.lost


@flow(
    name="sweep",
    flow_run_name=run_name("sweep", sweep_params_of, lambda p: p.benchmark.server.framework),
    task_runner=cast("TaskRunner[PrefectFuture[Any]]", ThreadPoolTaskRunner(max_workers=K_MAX)),
)
def sweep(
    preset: str | None = None,
    model: str | None = None,
    ks: list[int] | None = None,
    target_al: float | None = None,
    concurrencies: list[int] | None = None,
    dry_run: bool = False,
    params: SweepParams | None = None,
) -> SweepOutcome | Plan:
    """M1 then M2 for every K (in this process, or fanned out over GPU nodes); the sweep's own run.

    Give a preset (and change what you need below it), or the full configuration as params.

    Args:
        preset: Server preset by name: presets/NAME.yaml in the project (sim, vllm-h200, sglang-h200,
            trtllm-h200) or a Prefect Variable alflow-preset-NAME. It brings the server, where it runs,
            the model and the M1 and M2 defaults. Given with params, it replaces their server and placement.
        model: Model id to serve and measure, e.g. Qwen/Qwen3-Next-80B-A3B-Instruct (empty: the preset's).
        ks: Numbers of speculative tokens K to sweep, e.g. [1, 2, 3, 4, 5, 6, 7] (empty: params' Ks, else 1..7).
        target_al: One target AL for M2 at every K, 1 to K + 1 (empty: each K's reference AL).
        concurrencies: M2's concurrency sweep, e.g. [4, 16] (empty: the preset's).
        dry_run: Print the plan (each server's command, environment with secrets by name, config
            files, release gates and knobs) to the log and an artifact, and start nothing.
        params: Advanced: the full configuration, including fan_out to spread the K over GPU nodes (empty:
            built from the preset, in this process). The fields above win over it.
    """
    params = sweep_params_of(preset, model, ks, target_al, concurrencies, params)
    if dry_run:
        return dry_run_plan("sweep", params)
    server = params.benchmark.server
    writer = new_run_writer(
        "sweep", params.results_root or params.benchmark.placement.results_root, params, server
    )
    label_flow_run(f"model:{params.benchmark.model.id}", f"framework:{server.framework}", "sweep")
    with writer:
        lost: dict[str, str] = {}
        if params.fan_out is None:
            results, points = _in_process(params)
        else:
            results, points, lost = _fanned_out(params, f"sweep-{writer.run_id}")
        return conclude_sweep(params, writer, PREFECT_STEPS, results, points, lost)
