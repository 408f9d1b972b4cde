"""M2, the synthetic benchmark, as a plain procedure.

One server at the synthetic target, a concurrency plan, one audited point per planned point, everything
measured stored even when the run is stopped or fails.

The side effects are the caller's (:class:`alflow.methods.steps.Steps`): the flow gives Prefect's tasks, unit tests give fakes.
The rules live here and in the modules it calls: the synthetic scheme from the launch's recorded knobs, the
pre-flight before any point, the server's health before each point, a point stopped by a signal kept as a
partial point and the signal re-raised after storing, a signal while a measured point is judged held until it is
collected, an aborted point ending the sweep, an error or a signal after the first point stored before it is
raised, and invalid points failing the run when ``fail_on_invalid``.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from alflow.acceptance.stats import CI_LEVEL
from alflow.acceptance.synthetic import AcceptanceDistribution, distribution
from alflow.config import BenchmarkParams, LoadConfig, ServerConfig, ThinkingMode
from alflow.frameworks.recipes import seed_warning
from alflow.measure import PARTIAL_ATTR, Measurement
from alflow.methods.common import Collected, engine_note_of, run_skeleton, synthetic_target
from alflow.methods.outcomes import M2Outcome
from alflow.methods.plan import ConcurrencyPlan, FixedConcurrencies, PlannedPoint
from alflow.methods.points import M2Point, m2_point
from alflow.methods.steps import H, PointLoad, Steps
from alflow.methods.topology import gpu_layout, topology
from alflow.metrics.client import GpuLayout
from alflow.preflight import PREFLIGHT_TIMEOUT_S
from alflow.results.point_table import RUN_MAX_POINTS
from alflow.results.store import RunWriter
from alflow.results.summaries import M2RunSummary
from alflow.util import signals
from alflow.util.redact import redact_url
from alflow.util.rows import dump_row
from alflow.workloads import random_workload_sessions, request_sampling

FLOW = "m2-benchmark"
MAX_POINTS = RUN_MAX_POINTS
"""The most points one run measures: an adaptive plan that never says done is stopped there (a failure). The
readers of the points refuse a table of more (:data:`alflow.results.point_table.MAX_POINTS`)."""


@dataclass
class _Collected(Collected[M2Point]):
    """The run's points and tables (:class:`Collected`), and the synthetic scheme its server runs."""

    scheme: str | None = None
    dist: AcceptanceDistribution | None = None
    engine_note: str | None = None


def plan_of(params: BenchmarkParams) -> ConcurrencyPlan:
    """The run's concurrency plan: the configured concurrencies, each ``repeats`` times."""
    return FixedConcurrencies(
        params.concurrencies, params.prompts_per_concurrency, params.warmup_per_concurrency, params.repeats
    )


def run_m2(
    params: BenchmarkParams,
    server: ServerConfig,
    writer: RunWriter,
    steps: Steps[H],
    plan: ConcurrencyPlan | None = None,
) -> M2Outcome:
    """Measure every planned point of ``params`` on ``server``, store and report them.

    ``writer`` is the open run; ``server`` is M2's server with its synthetic knobs, the target AL among them
    (:func:`alflow.methods.dry_run.m2_server`); ``plan`` decides each next point from the points measured (None:
    the configured concurrencies, :func:`plan_of`). Raises what stopped the run after storing what it measured.
    """
    target = synthetic_target(server)
    layout = gpu_layout(server)  # every node's GPUs: per-GPU throughput divides by all of them
    got = _Collected(engine_note=server.engine_note)
    points = plan if plan is not None else plan_of(params)

    def measure() -> None:
        with steps.server_lifetime(server, params.placement) as handle:
            _start(params, target, server, writer, steps, handle, got)
            while (planned := points.next_point(got.points)) is not None:
                if len(got.points) >= MAX_POINTS:
                    got.failures.append(
                        f"the concurrency plan asked for more than {MAX_POINTS} points: stopped there"
                    )
                    break
                measured = len(got.points)
                if _measure(params, target, server, steps, handle, layout, planned, got):
                    break
                assert len(got.points) > measured  # each point is collected: the plan's feedback moves on

    def store() -> None:
        if isinstance(got.stopped, Exception):
            got.failures.append(f"{server.framework} K={params.k}: the run failed: {got.stopped}")
        elif got.stopped is not None and not any(p.partial for p in got.points[-1:]):
            # (a stopped run whose last point is partial: that point says so itself)
            got.failures.append(
                f"{server.framework} K={params.k}: the run was stopped ({type(got.stopped).__name__}) "
                f"after {len(got.points)} point(s), each stored whole"
            )
        _store(params, target, server, writer, steps, layout, got)

    run_skeleton(got, measure, store)
    if got.failures and params.fail_on_invalid:
        raise steps.fail(FLOW, "; ".join(got.failures), {"target_al": target, "k": params.k})
    assert got.scheme is not None  # set before the first point; no point means the run raised above
    return M2Outcome(
        run_dir=writer.dir,
        target_al=target,
        scheme=got.scheme,
        nodes=server.nodes,
        num_gpus=layout.gpus,
        points=tuple(got.points),
        failures=tuple(got.failures),
    )


def _start(
    params: BenchmarkParams,
    target: float,
    server: ServerConfig,
    writer: RunWriter,
    steps: Steps[H],
    handle: H,
    got: _Collected,
) -> None:
    """The scheme from the launch's recorded knobs, the run's provenance, and the pre-flight."""
    knobs = handle.provenance.synthetic
    scheme = None if knobs is None else knobs.get("scheme")
    if not scheme:
        raise steps.fail(FLOW, f"the launch of {server.framework} records no synthetic knobs", {})
    got.scheme = str(scheme)
    got.dist = dist = distribution(got.scheme, params.k, al=target)
    got.engine_note = engine_note_of(server, handle.provenance)
    record = dump_row(handle)
    facts = handle.provenance.model_dump(include={"model_runner"}, exclude_none=True)
    seed_note = seed_warning(server.framework, facts, params.model.sampling(params.thinking).seed)
    if seed_note is not None:  # stored with the server's warnings: every report of the run states it
        steps.log(seed_note)
        stored = dict(record.get("provenance") or {})
        record["provenance"] = {**stored, "warnings": [*handle.provenance.warnings, seed_note]}
    writer.update_provenance(
        server=record,
        target_al=target,
        scheme=got.scheme,
        topology=topology(server),
        engine_note=got.engine_note,
    )
    steps.log(f"synthetic target AL {target:.4f} with scheme {got.scheme} ({dist.granularity} draw)")
    if params.preflight:
        check = steps.preflight(
            handle,
            server,
            params.k,
            dist,
            f"{server.framework} K={params.k} target {target:.4f}",
            min(PREFLIGHT_TIMEOUT_S, params.request_timeout_s, params.stall_timeout_s or PREFLIGHT_TIMEOUT_S),
        )
        writer.update_provenance(preflight=dump_row(check))
        if not check.passed:
            raise steps.fail(FLOW, check.message, {"target_al": target, "k": params.k})


def _measure(
    params: BenchmarkParams,
    target: float,
    server: ServerConfig,
    steps: Steps[H],
    handle: H,
    layout: GpuLayout,
    planned: PlannedPoint,
    got: _Collected,
) -> bool:
    """Measure, audit and collect one point; True when the sweep must end (the point aborted or was stopped).

    A SIGTERM after the load ended waits until the point is judged and collected (:func:`alflow.util.signals.deferred`),
    then stops the run: the point is stored with the run's others (:func:`run_skeleton`).
    """
    m = _load(params, steps, handle, layout, planned, got)
    with signals.deferred():
        if got.stopped is None:
            m = steps.spec_stats(m, params.k, CI_LEVEL)
        _collect(params, target, server, steps, handle, planned, m, got)
    # the server died or stalled: later points would measure nothing; a signal: stop as asked
    return m.cut_short is not None or got.stopped is not None


def _load(
    params: BenchmarkParams,
    steps: Steps[H],
    handle: H,
    layout: GpuLayout,
    planned: PlannedPoint,
    got: _Collected,
) -> Measurement:
    """One point's load on the healthy server; stopped by a signal, its answered requests (``got.stopped`` set)."""
    conc = planned.concurrency
    framework = params.server.gpu_framework  # the framework, or the one the simulator speaks
    sessions = random_workload_sessions(
        params.workload, planned.prompts, seed_offset=planned.seed_offset, framework=framework
    )
    warm_sessions = random_workload_sessions(
        params.workload, max(1, planned.warmup), seed_offset=planned.warmup_seed_offset, framework=framework
    )
    load = LoadConfig(
        concurrency=conc,
        num_prompts=planned.prompts,
        warmup=planned.warmup,
        timeout_s=params.request_timeout_s,
        stall_timeout_s=params.stall_timeout_s,
        client_processes=min(params.client_processes, conc),
        auto_client_processes=params.auto_client_processes,
    )
    steps.wait_ready(handle, params.placement.runner)  # the server is still healthy before each point
    try:
        return steps.run_load(
            handle,
            PointLoad(
                sessions,
                load,
                request_sampling(params.model, ThinkingMode.OFF, fixed_length=params.workload.osl),
                params.k,
                planned.progress_key,
                warmup_sessions=warm_sessions if planned.warmup else None,
                gpus=layout,
                endpoint=params.workload.endpoint,
            ),
        )
    except BaseException as stop:
        # SIGTERM / Ctrl-C mid-point: keep the answered requests as a partial point, store them, then stop as
        # asked (re-raised after storing)
        partial = getattr(stop, PARTIAL_ATTR, None)
        if isinstance(stop, Exception) or not isinstance(partial, Measurement):
            raise
        got.stopped = stop
        return partial


def _collect(
    params: BenchmarkParams,
    target: float,
    server: ServerConfig,
    steps: Steps[H],
    handle: H,
    planned: PlannedPoint,
    m: Measurement,
    got: _Collected,
) -> None:
    """Audit the measured point ``m`` (a whole one with statistics) and collect it with its tables into ``got``."""
    assert got.dist is not None  # set by _start
    conc = planned.concurrency
    verdict = (
        steps.audit(
            m.spec_stats, got.dist, params.audit_abs_tol, f"{server.framework} K={params.k} {planned.label}"
        )
        if m.cut_short is None and m.spec_stats is not None
        else None
    )
    point, failures = m2_point(
        m,
        concurrency=conc,
        k=params.k,
        framework=server.framework,
        target_al=target,
        nodes=server.nodes,
        audit=verdict,
        metrics_where=" + ".join(redact_url(u) for u in handle.all_metrics_urls),
        repeat=planned.repeat,
        repeats=planned.repeats,
    )
    got.failures += failures
    got.points.append(point)
    tag = (pl.lit(conc).alias("concurrency"), pl.lit(planned.repeat).alias("repeat"))
    got.add("requests", m.records.with_columns(*tag))
    got.add("server_metrics", m.metrics_frame().with_columns(*tag))


def _store(
    params: BenchmarkParams,
    target: float,
    server: ServerConfig,
    writer: RunWriter,
    steps: Steps[H],
    layout: GpuLayout,
    got: _Collected,
) -> None:
    """Store the tables and ``summary.json``, then the report (both also for a stopped or failed run)."""
    # a point was measured (else the run raised before storing), so the scheme is known
    assert got.dist is not None
    rows = [p.model_dump() for p in got.points]
    tables = {**got.tables(), "spec_stats": pl.DataFrame(rows)}
    summary = M2RunSummary(
        flow="m2",
        target_al=target,
        scheme=got.scheme,
        nodes=server.nodes,
        num_gpus=layout.gpus,
        repeats=params.repeats,
        points=list(got.points),
        failures=got.failures,
        partial=got.stopped is not None or any(p.partial for p in got.points),
    )
    steps.store(writer, tables, summary)
    # judged before the report, which shows the verdicts; a run stopped or failed part-way is not judged
    if params.regression.enabled and got.stopped is None:
        steps.check_regression(writer, params.regression)
    steps.render(writer, rows, f"m2-{params.model.id}-k{params.k}")
