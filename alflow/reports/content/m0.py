"""The M0 calibration report: AL by K per thinking mode, per-position curves, category matrix, diff."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from alflow.reference.table import ReferenceEntry
from alflow.reports import svg
from alflow.reports.content.base import (
    Column,
    Report,
    Section,
    base_report,
    column_table,
    fmt,
    per_request_section,
    position_figure,
    svg_figure,
)
from alflow.reports.content.regression import regression_sections
from alflow.results.store import StoredRun
from alflow.results.view import config_value, m0_entries, m0_request_acceptance, summary


def build_m0(run: StoredRun) -> Report:
    """M0: AL by K per thinking mode, per-position curves, category matrix, diff to the previous table."""
    report = base_report(run, "M0 calibration: reference acceptance length")
    stored = summary(run)
    entries, unreadable = m0_entries(run)
    category = str(config_value(run, "workload", "category") or "all")
    skipped = (
        [
            f"{len(unreadable)} stored entr{'y is' if len(unreadable) == 1 else 'ies are'} not a valid reference "
            f"entry and {'is' if len(unreadable) == 1 else 'are'} not shown: " + "; ".join(unreadable)
        ]
        if unreadable
        else []
    )
    if not entries:
        report.sections.append(
            Section("Results", paragraphs=["The run stored no calibration entries."], notes=skipped)
        )
        return report
    if stored.get("reference_path"):
        report.facts.append(("Reference table", str(stored["reference_path"])))
    curves: dict[str, list[ReferenceEntry]] = {}
    for e in entries:  # one run measures one category: one curve per (model, method, thinking)
        curves.setdefault(f"{e.model} {e.method.value} thinking={e.thinking.value}", []).append(e)
    report.sections.append(_al_section(entries, curves, skipped))
    report.sections.append(_position_section(curves))
    per_request = m0_request_acceptance(run)
    if per_request:
        report.sections.append(per_request_section(per_request))
    one = (
        f"One run measures one category ({category}); the category matrix needs several runs (see "
        "`alflow report compare --format csv` across runs)."
    )
    report.sections.append(Section("Acceptance length by category", paragraphs=[one]))
    report.sections.append(_diff_section(stored))
    report.sections.extend(regression_sections(run))
    return report


def _al_section(
    entries: list[ReferenceEntry], curves: dict[str, list[ReferenceEntry]], skipped: list[str]
) -> Section:
    """AL by K: one curve per (model, method, thinking) with its intervals, and the table of every entry."""
    series = []
    for name, unsorted in curves.items():
        rows = sorted(unsorted, key=lambda r: r.k)
        series.append(
            svg.Series(
                name,
                [(r.k, r.al) for r in rows],
                errors=[(r.ci_low, r.ci_high) if r.ci_low is not None else None for r in rows],
                dashed="thinking=off" in name,
            )
        )
    ks = sorted({e.k for e in entries})
    chart = svg.Chart(
        "Acceptance length by K (thinking on / off)",
        "K (speculative tokens)",
        "acceptance length (tokens per step)",
        series,
        x_ticks=ks,
    )
    sec = Section(
        "Acceptance length by K",
        paragraphs=[
            "AL = 1 + accepted drafts / verify steps over the measured window; error bars are the "
            "confidence interval where the counters allow one. Solid: thinking on; dashed: thinking off."
        ],
        figures=[svg_figure(chart)],
        notes=skipped,
    )
    columns: list[Column] = [
        ("model", False, lambda e: e.model),
        ("method", False, lambda e: e.method.value),
        ("thinking", False, lambda e: e.thinking.value),
        ("K", True, lambda e: fmt(e.k)),
        ("AL", True, lambda e: fmt(e.al, 4)),
        ("CI low", True, lambda e: fmt(e.ci_low, 4)),
        ("CI high", True, lambda e: fmt(e.ci_high, 4)),
        ("steps", True, lambda e: fmt(e.num_drafts)),
        ("accepted", True, lambda e: fmt(e.accepted_tokens)),
        ("p_1..p_K", False, lambda e: ", ".join(fmt(p, 3) for p in e.per_position_rates or ()) or "-"),
    ]
    sec.tables.append(column_table(columns, sorted(entries, key=lambda r: (r.model, r.thinking.value, r.k))))
    return sec


def _position_section(curves: dict[str, list[ReferenceEntry]]) -> Section:
    """Per-position acceptance curves, one chart per (model, method, thinking), one curve per K."""
    pos = Section(
        "Per-position acceptance",
        paragraphs=[
            "p_i is the probability that the first i drafts are all accepted (non-increasing in i); "
            "one curve per K."
        ],
    )
    for name, rows in curves.items():
        rates = [
            (f"K={r.k}", r.per_position_rates)
            for r in sorted(rows, key=lambda r: r.k)
            if r.per_position_rates
        ]
        if rates:
            title = f"Per-position acceptance: {name}"
            pos.figures.append(position_figure(title, "p_i (first i drafts accepted)", rates))
    if not pos.figures:
        pos.paragraphs.append("No per-position counters were recorded.")
    return pos


DIFF_COLUMNS: list[Column] = [
    ("model", False, lambda r: str(r.get("model"))),
    ("method", False, lambda r: str(r.get("method"))),
    ("thinking", False, lambda r: str(r.get("thinking"))),
    ("K", True, lambda r: fmt(r.get("k"))),
    ("status", False, lambda r: str(r.get("status"))),
    ("old AL", True, lambda r: fmt(r.get("old_al"), 4)),
    ("new AL", True, lambda r: fmt(r.get("new_al"), 4)),
    ("delta", True, lambda r: fmt(r.get("delta"), 4)),
    (
        "relative",
        True,
        lambda r: "-" if svg.finite(r.get("rel_delta")) is None else f"{100 * float(r['rel_delta']):+.2f}%",
    ),
    ("provenance changes", False, lambda r: "; ".join(map(str, r.get("provenance_changes") or [])) or "-"),
]
"""The diff table's columns, one row per point of the stored diff (M0's ``summary.json``)."""


def _diff_section(stored: Mapping[str, Any]) -> Section:
    """The diff against the previous reference table, and the points reused from the cache."""
    diff = stored.get("diff")
    diff_sec = Section("Diff against the previous reference table")
    if not isinstance(diff, Mapping):
        diff_sec.paragraphs.append("There was no previous reference table: every point is new.")
    else:
        rows_d = [r for r in diff.get("rows") or [] if isinstance(r, Mapping)]
        changed = [r for r in rows_d if r.get("status") != "unchanged"]
        diff_sec.paragraphs.append(
            f"{len(changed)} of {len(rows_d)} point(s) added, removed or changed."
            + (
                " Table-level changes: " + "; ".join(map(str, diff["table_changes"]))
                if diff.get("table_changes")
                else ""
            )
        )
        diff_sec.tables.append(column_table(DIFF_COLUMNS, rows_d))
    if stored.get("cached_points"):
        diff_sec.notes.append(
            "Reused from cache (not measured again): " + ", ".join(map(str, stored["cached_points"]))
        )
    return diff_sec
