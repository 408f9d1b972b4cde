"""One M2 point from what was measured and audited: its row of ``spec_stats.parquet``, its failures.

The M2 flow measures a point and audits it (Prefect tasks); :func:`m2_point` turns the measurement and
the audit's verdict into a :class:`M2Point` and the failures it adds to the run, without Prefect, so
the rules (an aborted point is partial and invalid, a point without spec-decode stats is invalid, a
point with failed requests is invalid) are tested on their own.
"""

from __future__ import annotations

from collections.abc import Sequence

from alflow.acceptance.runtime_k import note_warnings
from alflow.acceptance.stats import SpecStats
from alflow.gates import AuditDetails, Verdict
from alflow.measure import Measurement
from alflow.methods.kchoice import Objective, choose_k
from alflow.metrics.point_metrics import point_values
from alflow.results.rows import BestK, M2Point

__all__ = ["BestK", "M2Point", "al_source", "best_k", "m2_point"]


def al_source(stats: SpecStats) -> str:
    """Where a point's AL counts come from (the stored point's ``al_source``).

    The statistics' own source: ``per-request`` when they are exact from the responses' per-request counts
    (:func:`alflow.measure.window_stats` sets it), ``counters`` (the server's metrics over the window) or
    ``steps`` (per-step data).
    """
    return stats.source


def _judged(
    m: Measurement, audit: Verdict | None, subject: str, metrics_where: str, target_al: float
) -> tuple[bool, str, AuditDetails, list[str]]:
    """Whether an M2 point is valid, its audit message, the audit's details and the run failures it adds."""
    failures: list[str] = []
    details = AuditDetails(target_al=target_al, achieved_al=None)
    cut = m.cut_short
    if cut is not None:
        failures.append(
            f"{subject}: aborted mid-point ({cut}); its {m.records.height} requests are kept and the "
            "point is marked partial"
        )
        valid, message = False, failures[-1]
    elif m.spec_stats is None or audit is None:
        why = m.stats_error or "no baseline or final scrape"
        failures.append(f"{subject}: no spec-decode stats at {metrics_where}: {why}")
        valid, message = False, failures[-1]
    else:
        if isinstance(audit.details, AuditDetails):
            details = audit.details
        valid, message = audit.passed, audit.message
        if not valid:
            failures.append(audit.message)
    if not m.all_ok and cut is None:
        failures.append(f"{subject}: {m.client.failed} requests failed")
        valid = False
    if m.spec_stats is not None:  # e.g. SGLang's adaptive steps moved the active K inside the window
        message = "; ".join([message, *note_warnings(m.spec_stats.note)])
    return valid, message, details, failures


def m2_point(
    m: Measurement,
    *,
    concurrency: int,
    k: int,
    framework: str,
    target_al: float,
    nodes: int,
    audit: Verdict | None,
    metrics_where: str,
    repeat: int = 0,
    repeats: int = 1,
) -> tuple[M2Point, list[str]]:
    """The point and the failures it adds to the run (empty when it is valid).

    ``audit`` is the synthetic audit's verdict, None when there was nothing to audit (an aborted point,
    no spec-decode stats); ``metrics_where`` names the metrics endpoints for the missing-stats message.
    ``repeat`` is the point's 0-based repeat of ``repeats`` at this (K, concurrency); it is named in the
    failures when there is more than one.
    """
    subject = f"{framework} K={k} concurrency {concurrency}"
    if repeats > 1:
        subject += f" repeat {repeat + 1}/{repeats}"
    valid, message, details, failures = _judged(m, audit, subject, metrics_where, target_al)
    cut = m.cut_short
    c = m.client
    stats = m.spec_stats
    timing = c.timing
    load = None if timing is None else timing.client_load
    point = M2Point(
        concurrency=concurrency,
        k=k,
        framework=framework,
        target_al=target_al,
        achieved_al=None if stats is None else stats.al,
        valid=valid,
        partial=cut is not None,
        audit=message,
        num_drafts=None if stats is None else stats.num_drafts,
        expected_al=details.expected_al,
        allowed_deviation=details.allowed,
        completed=c.completed,
        failed=c.failed,
        nodes=nodes,
        num_gpus=c.num_gpus,
        metrics=point_values(c),
        duration_s=m.duration_s,
        scheme=details.scheme,
        al_source=None if stats is None else al_source(stats),
        fit_p_value=details.fit_p_value,
        histogram_observed=details.histogram_observed,
        histogram_expected=details.histogram_expected,
        repeat=repeat,
        client_verdict=None if timing is None else timing.verdict,
        client_reasons=None if timing is None or not timing.reasons else "; ".join(timing.reasons),
        itl_note=None if timing is None else timing.itl_note,
        stamp_source=None if timing is None else timing.stamp_source,
        coalesced_share=None if timing is None else timing.coalesced_share,
        client_cpu_share=None if load is None else load.cpu_share,
        loop_lag_p99_ms=None if load is None else load.lag_p99_ms,
    )
    return point, failures


def best_k(points: Sequence[M2Point]) -> list[BestK]:
    """For each concurrency with a chosen K, the K by throughput per GPU and by median interactivity.

    Invalid points (failed audit, failed requests, partial) take no part, nor does a repeat without
    the figure; with one repeat per point this is the argmax of each figure, a smaller K within 1 %
    of the best winning (:mod:`alflow.methods.kchoice`).
    """
    thr = {c.concurrency: c for c in choose_k(points, Objective.throughput)}
    inter = {c.concurrency: c for c in choose_k(points, Objective.interactivity)}
    return [
        BestK(
            concurrency=conc,
            best_k_throughput=None if conc not in thr else thr[conc].chosen.k,
            output_throughput_per_gpu=None if conc not in thr else thr[conc].chosen.median,
            best_k_interactivity=None if conc not in inter else inter[conc].chosen.k,
            median_interactivity_tokens_per_s=None if conc not in inter else inter[conc].chosen.median,
        )
        for conc in sorted(thr.keys() | inter.keys())
    ]
