"""The K sweep's report: each K's M1 and M2 child runs, the best K per concurrency, the curves of every K."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from alflow.frameworks.registry import repeated_draws
from alflow.methods.kchoice import RULE, KChoice, all_choices, spread_rows
from alflow.reports.content.base import Column, Report, Section, Table, base_report, column_table, fmt
from alflow.reports.content.m2 import THROUGHPUT_NOTE, points_table, throughput_figure
from alflow.reports.content.regression import regression_sections
from alflow.results.rows import M2Point
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
    report.sections.append(_runs_section(rows))
    report.sections.append(_best_section(stored))
    points = m2_points(run)
    if points:
        report.sections.append(_uncertainty_section(points, stored.get("repeats")))
        report.sections.append(
            Section(
                "Throughput per GPU against interactivity, every K",
                paragraphs=[THROUGHPUT_NOTE],
                figures=[throughput_figure(points)],
                tables=[points_table(points)],
            )
        )
    report.sections.extend(regression_sections(run))
    lost = [str(line) for line in stored.get("lost_nodes") or []]
    if lost:
        report.warnings.extend(lost)
    if failures:
        report.sections.append(Section("Failures", notes=failures, status="fail"))
    return report


def _runs_section(rows: list[dict[str, Any]]) -> Section:
    """Each K's child runs (M1, then M2), their states, nodes and run directories."""
    return Section(
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


def _best_section(stored: Mapping[str, Any]) -> Section:
    """The best K per concurrency, by throughput per GPU and by interactivity (valid points only)."""
    best = [b for b in stored.get("best_k") or [] if isinstance(b, Mapping)]
    if not best:
        return Section("Best K per concurrency", paragraphs=["No valid M2 point: no best K."])
    return Section(
        "Best K per concurrency",
        paragraphs=[
            "Among valid points only, by output throughput per GPU and by median interactivity: "
            f"{RULE}. The figure is the chosen K's median over its repeats."
        ],
        tables=[
            column_table(
                [
                    ("concurrency", True, lambda b: fmt(b.get("concurrency"))),
                    ("best K (throughput/GPU)", True, lambda b: fmt(b.get("best_k_throughput"))),
                    ("output tok/s/GPU", True, lambda b: fmt(b.get("output_throughput_per_gpu"), 1)),
                    ("best K (interactivity)", True, lambda b: fmt(b.get("best_k_interactivity"))),
                    (
                        "interactivity (tok/s/user)",
                        True,
                        lambda b: fmt(b.get("median_interactivity_tokens_per_s"), 1),
                    ),
                ],
                best,
            )
        ],
    )


def _runner_up(c: KChoice) -> str:
    if c.runner_up is None:
        return "-"
    return f"K={c.runner_up.k} ({fmt(c.runner_up.score, 1)})"


CHOICE_COLUMNS: list[Column] = [
    ("concurrency", True, lambda c: fmt(c.concurrency)),
    ("objective", False, lambda c: c.objective.value),
    ("chosen K", True, lambda c: fmt(c.chosen.k)),
    ("score", True, lambda c: fmt(c.chosen.score, 1)),
    ("median ± MAD", True, lambda c: f"{fmt(c.chosen.median, 1)} ± {fmt(c.chosen.mad, 1)}"),
    ("ties", False, lambda c: ", ".join(str(k) for k in c.ties)),
    ("best score", False, lambda c: f"K={c.best.k} ({fmt(c.best.score, 1)})"),
    ("runner-up", False, _runner_up),
]
"""The K choice's columns, one row per :class:`~alflow.methods.kchoice.KChoice`."""


def _uncertainty_section(points: list[M2Point], repeats: object) -> Section:
    """The K choice with its score, ties and runner-up, and the spread over repeats per (concurrency, K)."""
    choices = all_choices(points)
    spread = spread_rows(points)
    spread_cells = []
    for r in spread:
        cells = [fmt(r["concurrency"]), fmt(r["k"]), f"{r['n']}/{r['repeats']}", fmt(r["draws"])]
        for name in ("throughput", "interactivity"):
            low, high = r[f"{name}_min"], r[f"{name}_max"]
            cells += [
                fmt(r[f"{name}_median"], 1),
                fmt(r[f"{name}_mad"], 1),
                "-" if low is None else f"{fmt(low, 1)}..{fmt(high, 1)}",
                fmt(r[f"{name}_score"], 1),
            ]
        spread_cells.append(cells)
    how_many = f"{repeats} repeat(s) per (K, concurrency). " if isinstance(repeats, int) else ""
    notes = sorted({why for p in points if (why := repeated_draws(p.framework)) is not None})
    if notes and any(r["draws"] < r["n"] for r in spread):
        how_many += (
            "Repeats of one point here share one synthetic draw, so each (K, concurrency) counts as one draw and "
            "its spread over repeats is the timing's, not the acceptance's: " + "; ".join(notes) + ". "
        )
    return Section(
        "K with its uncertainty",
        paragraphs=[how_many + RULE + "."],
        tables=[
            column_table(CHOICE_COLUMNS, choices, title="Chosen K"),
            Table(
                [
                    "concurrency",
                    "K",
                    "valid/repeats",
                    "independent draws",
                    *(
                        h
                        for name in ("tok/s/GPU", "interactivity")
                        for h in (f"{name} median", "MAD", "min..max", "score")
                    ),
                ],
                spread_cells,
                title="Spread over repeats",
                numeric=[True] * 12,
            ),
        ],
    )
