"""The K sweep: for each K, M1 (gate) then M2 (benchmark at that K's reference AL), and a summary.

Each K runs as subflows in this process; on a cluster, run the `m1-gate` and `m2-benchmark`
deployments per K on GPU work pools instead, so several nodes work in parallel. The summary picks,
for each concurrency, the best K by output throughput per GPU and by median interactivity
(:func:`alflow.points.best_k`, tested without Prefect).
"""

from __future__ import annotations

from prefect import flow, get_run_logger

from alflow.config import BenchmarkParams, GateParams, SweepParams
from alflow.outcomes import KOutcome, M2Outcome, Step, SweepOutcome
from alflow.points import best_k
from alflow.results.rows import M2Point
from flows.benchmark import benchmark
from flows.common import fail
from flows.gate import gate


@flow(name="sweep", flow_run_name="sweep-{params.gate.server.framework}")
def sweep(params: SweepParams) -> SweepOutcome:
    """M1 then M2 for every K; a summary across K."""
    log = get_run_logger()
    results: dict[int, KOutcome] = {}
    points: list[M2Point] = []
    for k in params.ks:
        gate_params = GateParams.model_validate({**params.gate.model_dump(), "k": k})
        state = gate(gate_params, return_state=True)
        if not state.is_completed():
            log.error("K=%d: M1 failed: %s", k, state.message)
            if params.stop_on_gate_failure:
                results[k] = KOutcome("failed", str(state.message))
                continue
        gate_step: Step = "passed" if state.is_completed() else "failed"
        gate_message = None if state.is_completed() else str(state.message)
        bench_params = BenchmarkParams.model_validate({**params.benchmark.model_dump(), "k": k})
        bstate = benchmark(bench_params, return_state=True)
        if bstate.is_completed():
            out: M2Outcome = bstate.result()
            points += out.points
            results[k] = KOutcome(gate_step, gate_message, "passed")
        else:
            results[k] = KOutcome(gate_step, gate_message, "failed", str(bstate.message))
    summary = best_k(points)
    for best in summary:
        log.info(
            "concurrency %d: best K by throughput/GPU = %s, by interactivity = %s",
            best.concurrency,
            best.best_k_throughput,
            best.best_k_interactivity,
        )
    outcome = SweepOutcome(per_k=results, best_k=tuple(summary), points=tuple(points))
    failed = [k for k, r in results.items() if r.failed]
    if failed:
        raise fail(
            "sweep", f"sweep finished with failures at K={failed}", {"results": outcome.to_dict()["per_k"]}
        )
    return outcome
