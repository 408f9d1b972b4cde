"""The K sweep's report: each K's M1 and M2 child runs, the best K per concurrency, the curves of every K."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from alflow.reports.content.base import Report, Section, Table, base_report, fmt
from alflow.reports.content.m2 import THROUGHPUT_NOTE, points_table, throughput_figure
from alflow.results.store import StoredRun
from alflow.results.view import m2_points, summary, table_or_none


def _step(row: Mapping[str, Any], name: str) -> str:
    result = row.get(name)
    if result is None:
        return "not run"
    state = row.get(f"{name}_state")
    cached = " (cached)" if row.get(f"{name}_cached") else ""
    return f"{result}: {state}{cached}" if state else str(result)


def build_sweep(run: StoredRun) -> Report:
    """The sweep: per-K child runs and their states, the best K per concurrency, every K's curve."""
    report = base_report(run, "K sweep")
    stored = summary(run)
    mode = stored.get("mode")
    if mode:
        report.facts.append(("Mode", str(mode)))
    failures = [str(f) for f in stored.get("failures") or []]
    per_k = table_or_none(run, "per_k")
    rows = [] if per_k is None else list(per_k.iter_rows(named=True))
    if stored or run.complete:
        report.verdict_passed = not failures
        report.verdict = (
            f"All {len(rows)} K passed M1 and M2"
            if not failures
            else f"{len(failures)} failure(s): see below"
        )
    report.sections.append(
        Section(
            "Runs per K",
            paragraphs=[
                "Each K ran M1 (the real-acceptance gate), then M2 (the synthetic benchmark) at its target."
            ],
            tables=[
                Table(
                    ["K", "node", "M1", "M1 run", "M2", "M2 run", "M2 run directory"],
                    [
                        [
                            fmt(r.get("k")),
                            str(r.get("node") or "this process"),
                            _step(r, "gate"),
                            str(r.get("gate_run") or "-"),
                            _step(r, "benchmark"),
                            str(r.get("benchmark_run") or "-"),
                            str(r.get("benchmark_dir") or "-"),
                        ]
                        for r in rows
                    ],
                    numeric=[True],
                )
            ],
        )
    )
    best = [b for b in stored.get("best_k") or [] if isinstance(b, Mapping)]
    report.sections.append(
        Section(
            "Best K per concurrency",
            paragraphs=[
                "Among valid points only: the K with the highest output throughput per GPU, and the K with "
                "the highest median interactivity; among equals the lowest K."
            ]
            if best
            else ["No valid M2 point: no best K."],
            tables=[
                Table(
                    [
                        "concurrency",
                        "best K (throughput/GPU)",
                        "output tok/s/GPU",
                        "best K (interactivity)",
                        "interactivity (tok/s/user)",
                    ],
                    [
                        [
                            fmt(b.get("concurrency")),
                            fmt(b.get("best_k_throughput")),
                            fmt(b.get("output_throughput_per_gpu"), 1),
                            fmt(b.get("best_k_interactivity")),
                            fmt(b.get("median_interactivity_tokens_per_s"), 1),
                        ]
                        for b in best
                    ],
                    numeric=[True] * 5,
                )
            ]
            if best
            else [],
        )
    )
    points = m2_points(run)
    if points:
        report.sections.append(
            Section(
                "Throughput per GPU against interactivity, every K",
                paragraphs=[THROUGHPUT_NOTE],
                figures=[throughput_figure(points)],
                tables=[points_table(points)],
            )
        )
    lost = [str(line) for line in stored.get("lost_nodes") or []]
    if lost:
        report.warnings.extend(lost)
    if failures:
        report.sections.append(Section("Failures", notes=failures, status="fail"))
    return report
