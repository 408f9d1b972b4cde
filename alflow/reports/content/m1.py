"""The M1 gate report: the verdict, AL with its CI against the threshold, GSM8K scores against theirs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl

from alflow.gates import AccuracyDetails, AlGateDetails, Verdict
from alflow.metrics.point_metrics import POINT_METRICS
from alflow.reports import svg
from alflow.reports.content.base import (
    Report,
    Section,
    Table,
    base_report,
    cells_table,
    fmt,
    label_table,
    per_request_section,
    position_figure,
    svg_figure,
)
from alflow.results.store import StoredRun
from alflow.results.view import (
    get_path,
    m1_verdicts,
    model_id,
    run_request_acceptance,
    summary,
    table_or_none,
)


def build_m1(run: StoredRun) -> Report:
    """M1: the verdict, AL with its CI against the threshold, GSM8K scores against theirs."""
    report = base_report(run, "M1 evaluation gate")
    stored = summary(run)
    verdicts = m1_verdicts(run)
    if "passed" in stored:
        passed = bool(stored["passed"])
        report.verdict_passed = passed
        report.verdict = f"{'PASSED' if passed else 'FAILED'}: {stored.get('subject') or model_id(run) or ''}"
    elif run.status != "complete":
        report.verdict = "NO VERDICT: the run stopped before both gates were judged"
        report.verdict_passed = False
    for v in verdicts:
        if isinstance(v.details, AlGateDetails):
            report.sections.append(_al_gate_section(v, v.details, table_or_none(run, "spec_stats")))
        elif isinstance(v.details, AccuracyDetails):
            report.sections.append(_gsm8k_section(v, v.details, stored.get("gsm8k")))
        else:
            report.sections.append(
                Section(v.gate, paragraphs=[v.message], status="pass" if v.passed else "fail")
            )
    if not verdicts:
        report.sections.append(Section("Gates", paragraphs=["The run stored no verdicts."]))
    per_request = run_request_acceptance(run)
    if per_request is not None:
        report.sections.append(per_request_section([("AL point", per_request)]))
    client = stored.get("client")
    if isinstance(client, Mapping):
        report.sections.append(_client_section(client))
    return report


def _al_gate_section(v: Verdict, d: AlGateDetails, stats: pl.DataFrame | None) -> Section:
    passed = v.passed
    ci = d.ci
    sec = Section(
        "AL gate (SPEED-Bench, synthetic acceptance off)",
        paragraphs=[v.message],
        status="pass" if passed else "fail",
    )
    lo, hi = (None, None) if ci is None else (ci.low, ci.high)
    cells = [
        ("AL", True, fmt(d.al, 4)),
        ("CI low", True, fmt(lo, 4)),
        ("CI high", True, fmt(hi, 4)),
        ("CI level", True, "-" if ci is None else f"{ci.level:.0%}"),
        ("CI method", False, "-" if ci is None else ci.method),
        ("compared", True, fmt(d.compared, 4)),
        ("threshold", True, fmt(d.threshold, 4)),
        ("reference AL", True, fmt(d.reference_al, 4)),
        ("rule", False, d.rule or "-"),
        ("result", False, "pass" if passed else "FAIL"),
    ]
    sec.tables.append(cells_table([cells]))
    al = svg.finite(d.al)
    hlines = [
        svg.HLine(d.threshold, "threshold", "#d62728"),
        svg.HLine(d.reference_al, "reference", "#555555"),
    ]
    if al is not None:
        sec.figures.append(
            svg_figure(
                svg.Chart(
                    "Achieved AL with its confidence interval against the threshold",
                    "",
                    "acceptance length",
                    [
                        svg.Series(
                            "achieved AL (CI)", [(1, al)], errors=[(lo, hi) if lo is not None else None]
                        )
                    ],
                    hlines=hlines,
                    x_ticks=[1],
                    width=420,
                    height=300,
                )
            )
        )
    if stats is not None and stats.height and "per_position_rates" in stats.columns:
        _add_measured_counts(sec, stats.row(0, named=True))
    return sec


def _add_measured_counts(sec: Section, row: dict[str, Any]) -> None:
    """The measured per-position curve and the window's counts (steps, accepted, drafted, rate) under the gate."""
    rates = row.get("per_position_rates") or []
    if rates:
        curve = [(f"K={row.get('k')}", rates)]
        sec.figures.append(
            position_figure("Per-position acceptance (measured)", "p_i", curve, width=420, height=300)
        )
    counts = [
        f"{fmt(row.get('num_drafts'))} verify steps",
        f"{fmt(row.get('accepted_tokens'))} accepted draft tokens",
    ]
    if row.get("draft_tokens") is not None:
        counts.append(f"{fmt(row.get('draft_tokens'))} drafted")
    if svg.finite(row.get("acceptance_rate")) is not None:
        counts.append(f"draft acceptance rate {fmt(row.get('acceptance_rate'), 4)}")
    sec.notes.append(", ".join(counts) + ".")


def _gsm8k_section(v: Verdict, d: AccuracyDetails, gsm8k: object) -> Section:
    sec = Section("GSM8K accuracy gate", paragraphs=[v.message], status="pass" if v.passed else "fail")
    threshold = d.threshold
    scores = get_path(gsm8k if isinstance(gsm8k, Mapping) else None, "scores")
    rows = []
    if isinstance(scores, Mapping):
        for name, s in scores.items():
            if not isinstance(s, Mapping):
                continue
            acc = svg.finite(s.get("accuracy"))
            rows.append(
                [
                    str(name),
                    fmt(acc, 4),
                    f"{fmt(s.get('correct'))}/{fmt(s.get('total'))}",
                    fmt(s.get("ci_low"), 4),
                    fmt(s.get("ci_high"), 4),
                    fmt(threshold, 4),
                    "-" if acc is None else ("pass" if acc >= threshold else "FAIL"),
                ]
            )
    else:
        for name, a in d.scores.items():
            rows.append(
                [name, fmt(a, 4), "-", "-", "-", fmt(threshold, 4), "pass" if a >= threshold else "FAIL"]
            )
    sec.tables.append(
        Table(
            ["score", "accuracy", "correct", "CI low", "CI high", "threshold", "result"],
            rows,
            numeric=[False, True, True, True, True, True, False],
        )
    )
    if isinstance(gsm8k, Mapping):
        sec.notes.extend(str(n) for n in gsm8k.get("notes") or [])
        if gsm8k.get("failed_requests"):
            sec.notes.append(f"{gsm8k['failed_requests']} request(s) failed.")
    return sec


def _client_section(client: Mapping[str, Any]) -> Section:
    keys = [
        ("completed", "completed requests", 0),
        ("failed", "failed requests", 0),
        *((m.name, m.heading, m.decimals) for m in POINT_METRICS),
    ]
    return Section(
        "Client-side metrics (AL run)",
        tables=[
            label_table(
                ["metric", "value"], [[label, fmt(client.get(k), d)] for k, label, d in keys if k in client]
            )
        ],
    )
