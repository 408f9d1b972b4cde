"""The K sweep: for each K, M1 (gate) then M2 (benchmark at that K's reference AL), and a summary.

Each K runs as subflows in this process; on a cluster, run the `m1-gate` and `m2-benchmark`
deployments per K on GPU work pools instead, so several nodes work in parallel. The summary picks,
for each concurrency, the best K by output throughput per GPU and by median interactivity
(:func:`alflow.points.best_k`, tested without Prefect).
"""

from __future__ import annotations

from typing import Any

from prefect import flow, get_run_logger

from alflow.config import BenchmarkParams, GateParams, SweepParams
from alflow.points import M2Point, best_k
from flows.benchmark import benchmark
from flows.common import fail
from flows.gate import gate


@flow(name="sweep", flow_run_name="sweep-{params.gate.server.framework}")
def sweep(params: SweepParams) -> dict[str, Any]:
    """M1 then M2 for every K; a summary across K."""
    log = get_run_logger()
    results: dict[int, dict[str, Any]] = {}
    points: list[dict[str, Any]] = []
    for k in params.ks:
        gate_params = GateParams.model_validate({**params.gate.model_dump(), "k": k})
        state = gate(gate_params, return_state=True)
        entry: dict[str, Any] = {"gate": "passed" if state.is_completed() else "failed"}
        if not state.is_completed():
            entry["gate_message"] = str(state.message)
            log.error("K=%d: M1 failed: %s", k, state.message)
            if params.stop_on_gate_failure:
                results[k] = entry
                continue
        bench_params = BenchmarkParams.model_validate({**params.benchmark.model_dump(), "k": k})
        bstate = benchmark(bench_params, return_state=True)
        if bstate.is_completed():
            out = bstate.result()
            entry["benchmark"] = "passed"
            points += out["points"]
        else:
            entry["benchmark"] = "failed"
            entry["benchmark_message"] = str(bstate.message)
        results[k] = entry
    summary = best_k([M2Point.from_dict(p) for p in points])
    for best in summary:
        log.info(
            "concurrency %d: best K by throughput/GPU = %s, by interactivity = %s",
            best.concurrency,
            best.best_k_throughput,
            best.best_k_interactivity,
        )
    failed = [k for k, r in results.items() if r.get("gate") == "failed" or r.get("benchmark") == "failed"]
    if failed:
        raise fail("sweep", f"sweep finished with failures at K={failed}", {"results": results})
    return {"per_k": results, "best_k": {b.concurrency: b.to_dict() for b in summary}}
