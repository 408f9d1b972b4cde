"""The sweep's own run: after M1 and M2 ran for every K (in one process or fanned out), its verdict and report.

:func:`conclude_sweep` turns the per-K outcomes and M2 points into the best K per concurrency, the K choice and
its spread, the failures and lost nodes, stores them with the report, and fails the run when a K failed. How
the Ks ran (subflows, deployments on GPU nodes) is the flow's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import polars as pl

from alflow.config import SweepParams
from alflow.methods.kchoice import all_choices
from alflow.methods.outcomes import KOutcome, SweepOutcome
from alflow.methods.points import best_k
from alflow.methods.steps import H, Steps
from alflow.methods.sweep_rules import lost_nodes, per_k_rows, sweep_failures
from alflow.results.rows import M2Point
from alflow.results.store import RunWriter
from alflow.results.summaries import SweepRunSummary
from alflow.util.rows import dump_row

FLOW = "sweep"


def run_mode(params: SweepParams) -> str:
    """How the Ks run: ``in-process``, or fanned out over the named work queues."""
    if params.fan_out is None:
        return "in-process"
    return f"fanned out over {len(params.fan_out.nodes)} node(s): " + ", ".join(
        n.work_queue for n in params.fan_out.nodes
    )


def conclude_sweep(
    params: SweepParams,
    writer: RunWriter,
    steps: Steps[H],
    results: Mapping[int, KOutcome],
    points: Sequence[M2Point],
    lost: Mapping[str, str],
) -> SweepOutcome:
    """Judge, store and report the sweep; raise its failure (after storing) when any K failed."""
    server = params.benchmark.server
    mode = run_mode(params)
    summary = best_k(points)
    choices = [dump_row(c) for c in all_choices(points)]
    for best in summary:
        steps.log(
            f"concurrency {best.concurrency}: best K by throughput/GPU = {best.best_k_throughput}, "
            f"by interactivity = {best.best_k_interactivity}"
        )
    failures = sweep_failures(results)
    warnings = lost_nodes(lost)
    for line in warnings:
        steps.warn(line)
    rows = per_k_rows(results)
    tables = {"per_k": pl.DataFrame(rows)}
    if points:
        tables["spec_stats"] = pl.DataFrame([p.model_dump() for p in points])
    stored = SweepRunSummary(
        flow="sweep",
        mode=mode,
        ks=list(params.ks),
        best_k=summary,
        repeats=params.benchmark.repeats,
        k_choice=choices,
        failures=failures,
        lost_nodes=warnings,
    )
    steps.store(writer, tables, stored)
    if params.benchmark.regression.enabled:  # the children's verdicts gathered, before the report
        steps.check_regression(writer, params.benchmark.regression)
    steps.render(writer, rows, f"sweep-{server.framework}")
    outcome = SweepOutcome(
        per_k=dict(results), best_k=tuple(summary), points=tuple(points), run_dir=writer.dir
    )
    if failures:
        failed = sorted(k for k, r in results.items() if r.failed)
        raise steps.fail(
            FLOW,
            f"sweep finished with failures at K={failed}: " + "; ".join(failures),
            {"results": dump_row(outcome)["per_k"]},
        )
    return outcome
