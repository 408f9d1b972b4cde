"""The M1 gate report: the verdict, AL with its CI against the threshold, GSM8K scores against theirs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl

from alflow.reports import svg
from alflow.reports.content.base import Report, Section, Table, base_report, fmt, num, svg_figure
from alflow.results.store import StoredRun
from alflow.results.view import get_path, model_id, summary, table_or_none


def build_m1(run: StoredRun) -> Report:
    """M1: the verdict, AL with its CI against the threshold, GSM8K scores against theirs."""
    report = base_report(run, "M1 evaluation gate")
    stored = summary(run)
    verdicts = [v for v in stored.get("verdicts") or [] if isinstance(v, Mapping)]
    if "passed" in stored:
        passed = bool(stored["passed"])
        report.verdict_passed = passed
        report.verdict = f"{'PASSED' if passed else 'FAILED'}: {stored.get('subject') or model_id(run) or ''}"
    elif run.status != "complete":
        report.verdict = "NO VERDICT: the run stopped before both gates were judged"
        report.verdict_passed = False
    for v in verdicts:
        if v.get("gate") == "al":
            report.sections.append(_al_gate_section(v, table_or_none(run, "spec_stats")))
        elif v.get("gate") == "gsm8k-accuracy":
            report.sections.append(_gsm8k_section(v, stored.get("gsm8k")))
        else:
            report.sections.append(
                Section(
                    str(v.get("gate")),
                    paragraphs=[str(v.get("message"))],
                    status="pass" if v.get("passed") else "fail",
                )
            )
    if not verdicts:
        report.sections.append(Section("Gates", paragraphs=["The run stored no verdicts."]))
    client = stored.get("client")
    if isinstance(client, Mapping):
        report.sections.append(_client_section(client))
    return report


def _al_gate_section(v: Mapping[str, Any], stats: pl.DataFrame | None) -> Section:
    passed = bool(v.get("passed"))
    ci = v.get("ci") if isinstance(v.get("ci"), Mapping) else {}
    assert isinstance(ci, Mapping)
    sec = Section(
        "AL gate (SPEED-Bench, synthetic acceptance off)",
        paragraphs=[str(v.get("message"))],
        status="pass" if passed else "fail",
    )
    level = num(ci.get("level"))
    sec.tables.append(
        Table(
            [
                "AL",
                "CI low",
                "CI high",
                "CI level",
                "CI method",
                "compared",
                "threshold",
                "reference AL",
                "rule",
                "result",
            ],
            [
                [
                    fmt(v.get("al"), 4),
                    fmt(ci.get("low"), 4),
                    fmt(ci.get("high"), 4),
                    "-" if level is None else f"{level:.0%}",
                    str(ci.get("method") or "-"),
                    fmt(v.get("compared"), 4),
                    fmt(v.get("threshold"), 4),
                    fmt(v.get("reference_al"), 4),
                    str(v.get("rule") or "-"),
                    "pass" if passed else "FAIL",
                ]
            ],
            numeric=[True, True, True, True, False, True, True, True, False, False],
        )
    )
    al, lo, hi = num(v.get("al")), num(ci.get("low")), num(ci.get("high"))
    hlines = [
        svg.HLine(float(v["threshold"]), "threshold", "#d62728")
        if num(v.get("threshold")) is not None
        else None,
        svg.HLine(float(v["reference_al"]), "reference", "#555555")
        if num(v.get("reference_al")) is not None
        else None,
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
                    hlines=[h for h in hlines if h is not None],
                    x_ticks=[1],
                    width=420,
                    height=300,
                )
            )
        )
    if stats is not None and stats.height and "per_position_rates" in stats.columns:
        row = stats.row(0, named=True)
        rates = row.get("per_position_rates") or []
        if rates:
            sec.figures.append(
                svg_figure(
                    svg.Chart(
                        "Per-position acceptance (measured)",
                        "draft position i",
                        "p_i",
                        [svg.Series(f"K={row.get('k')}", [(i, p) for i, p in enumerate(rates, start=1)])],
                        x_ticks=list(range(1, len(rates) + 1)),
                        y_zero=True,
                        width=420,
                        height=300,
                    )
                )
            )
        counts = [
            f"{fmt(row.get('num_drafts'))} verify steps",
            f"{fmt(row.get('accepted_tokens'))} accepted draft tokens",
        ]
        if row.get("draft_tokens") is not None:
            counts.append(f"{fmt(row.get('draft_tokens'))} drafted")
        if num(row.get("acceptance_rate")) is not None:
            counts.append(f"draft acceptance rate {fmt(row.get('acceptance_rate'), 4)}")
        sec.notes.append(", ".join(counts) + ".")
    return sec


def _gsm8k_section(v: Mapping[str, Any], gsm8k: object) -> Section:
    passed = bool(v.get("passed"))
    sec = Section(
        "GSM8K accuracy gate", paragraphs=[str(v.get("message"))], status="pass" if passed else "fail"
    )
    threshold = num(v.get("threshold"))
    scores = get_path(gsm8k if isinstance(gsm8k, Mapping) else None, "scores")
    rows = []
    if isinstance(scores, Mapping):
        for name, s in scores.items():
            if not isinstance(s, Mapping):
                continue
            acc = num(s.get("accuracy"))
            rows.append(
                [
                    str(name),
                    fmt(acc, 4),
                    f"{fmt(s.get('correct'))}/{fmt(s.get('total'))}",
                    fmt(s.get("ci_low"), 4),
                    fmt(s.get("ci_high"), 4),
                    fmt(threshold, 4),
                    "-" if acc is None or threshold is None else ("pass" if acc >= threshold else "FAIL"),
                ]
            )
    elif isinstance(v.get("scores"), Mapping):
        for name, acc in v["scores"].items():
            a = num(acc)
            rows.append(
                [
                    str(name),
                    fmt(a, 4),
                    "-",
                    "-",
                    "-",
                    fmt(threshold, 4),
                    "-" if a is None or threshold is None else ("pass" if a >= threshold else "FAIL"),
                ]
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
        ("output_throughput", "output tok/s", 1),
        ("output_throughput_per_gpu", "output tok/s/GPU", 1),
        ("median_ttft_ms", "median TTFT ms", 2),
        ("p99_ttft_ms", "p99 TTFT ms", 2),
        ("median_tpot_ms", "median TPOT ms", 3),
        ("median_interactivity_tokens_per_s", "median interactivity tok/s/user", 1),
        ("tokens_per_chunk", "tokens per chunk", 3),
    ]
    return Section(
        "Client-side metrics (AL run)",
        tables=[
            Table(
                ["metric", "value"],
                [[label, fmt(client.get(k), d)] for k, label, d in keys if k in client],
                numeric=[False, True],
            )
        ],
    )
