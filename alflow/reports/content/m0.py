"""The M0 calibration report: AL by K per thinking mode, per-position curves, category matrix, diff."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from alflow.reports import svg
from alflow.reports.content.base import Report, Section, Table, base_report, fmt, num, svg_figure
from alflow.results.store import StoredRun
from alflow.results.view import config_value, summary


def _entry_label(e: Mapping[str, Any], *, with_k: bool = True) -> str:
    text = f"{e.get('model')} thinking={e.get('thinking')}"
    return text + (f" K={e.get('k')}" if with_k else "")


def _entry_category(run: StoredRun, e: Mapping[str, Any]) -> str:
    cat = e.get("category") or config_value(run, "workload", "category")
    return str(cat or "all")


def build_m0(run: StoredRun) -> Report:
    """M0: AL by K per thinking mode, per-position curves, category matrix, diff to the previous table."""
    report = base_report(run, "M0 calibration: reference acceptance length")
    stored = summary(run)
    entries = [e for e in stored.get("entries") or [] if isinstance(e, Mapping)]
    if not entries:
        report.sections.append(Section("Results", paragraphs=["The run stored no calibration entries."]))
        return report
    if stored.get("reference_path"):
        report.facts.append(("Reference table", str(stored["reference_path"])))
    # AL by K, one curve per (model, method, thinking)
    categories = sorted({_entry_category(run, e) for e in entries})
    curves: dict[str, list[Mapping[str, Any]]] = {}
    for e in entries:
        name = f"{e.get('model')} {e.get('method')} thinking={e.get('thinking')}"
        if len(categories) > 1:  # one curve per category, never a curve across categories
            name += f" {_entry_category(run, e)}"
        curves.setdefault(name, []).append(e)
    series = []
    for name, unsorted in curves.items():
        rows = sorted(unsorted, key=lambda r: int(r.get("k") or 0))
        series.append(
            svg.Series(
                name,
                [(r.get("k"), r.get("al")) for r in rows],
                errors=[
                    (r.get("ci_low"), r.get("ci_high")) if r.get("ci_low") is not None else None for r in rows
                ],
                dashed="thinking=off" in name,
            )
        )
    ks = sorted({int(e["k"]) for e in entries if e.get("k") is not None})
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
    )
    sec.tables.append(
        Table(
            ["model", "method", "thinking", "K", "AL", "CI low", "CI high", "steps", "accepted", "p_1..p_K"],
            [
                [
                    str(e.get("model")),
                    str(e.get("method")),
                    str(e.get("thinking")),
                    fmt(e.get("k")),
                    fmt(e.get("al"), 4),
                    fmt(e.get("ci_low"), 4),
                    fmt(e.get("ci_high"), 4),
                    fmt(e.get("num_drafts")),
                    fmt(e.get("accepted_tokens")),
                    ", ".join(fmt(p, 3) for p in e.get("per_position_rates") or []) or "-",
                ]
                for e in sorted(
                    entries, key=lambda r: (str(r.get("model")), str(r.get("thinking")), r.get("k") or 0)
                )
            ],
            numeric=[False, False, False, True, True, True, True, True, True, False],
        )
    )
    report.sections.append(sec)
    # per-position acceptance curves, one chart per (model, thinking)
    pos = Section(
        "Per-position acceptance",
        paragraphs=[
            "p_i is the probability that the first i drafts are all accepted (non-increasing in i); "
            "one curve per K."
        ],
    )
    for name, rows in curves.items():
        pos_series = [
            svg.Series(
                f"K={r.get('k')}",
                [(i, p) for i, p in enumerate(r.get("per_position_rates") or [], start=1)],
            )
            for r in sorted(rows, key=lambda r: int(r.get("k") or 0))
            if r.get("per_position_rates")
        ]
        if pos_series:
            max_k = max(len(s.points) for s in pos_series)
            pos.figures.append(
                svg_figure(
                    svg.Chart(
                        f"Per-position acceptance: {name}",
                        "draft position i",
                        "p_i (first i drafts accepted)",
                        pos_series,
                        x_ticks=list(range(1, max_k + 1)),
                        y_zero=True,
                    )
                )
            )
    if not pos.figures:
        pos.paragraphs.append("No per-position counters were recorded.")
    report.sections.append(pos)
    # category matrix
    cat_sec = Section("Acceptance length by category")
    if len(categories) > 1:
        matrix: dict[str, dict[str, float | None]] = {}
        for e in entries:
            matrix.setdefault(_entry_label(e), {})[_entry_category(run, e)] = num(e.get("al"))
        cat_sec.tables.append(
            Table(
                ["model", *categories],
                [[label, *[fmt(vals.get(c), 2) for c in categories]] for label, vals in matrix.items()],
                numeric=[False, *[True] * len(categories)],
            )
        )
    else:
        cat_sec.paragraphs.append(
            f"One category ran ({categories[0]}); the category matrix needs several (see "
            "`alflow report compare --format csv` across runs)."
        )
    report.sections.append(cat_sec)
    # diff against the previous reference
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
        diff_sec.tables.append(
            Table(
                [
                    "model",
                    "method",
                    "thinking",
                    "K",
                    "status",
                    "old AL",
                    "new AL",
                    "delta",
                    "relative",
                    "provenance changes",
                ],
                [
                    [
                        str(r.get("model")),
                        str(r.get("method")),
                        str(r.get("thinking")),
                        fmt(r.get("k")),
                        str(r.get("status")),
                        fmt(r.get("old_al"), 4),
                        fmt(r.get("new_al"), 4),
                        fmt(r.get("delta"), 4),
                        "-" if num(r.get("rel_delta")) is None else f"{100 * float(r['rel_delta']):+.2f}%",
                        "; ".join(map(str, r.get("provenance_changes") or [])) or "-",
                    ]
                    for r in rows_d
                ],
                numeric=[False, False, False, True, False, True, True, True, True, False],
            )
        )
    if stored.get("cached_points"):
        diff_sec.notes.append(
            "Reused from cache (not measured again): " + ", ".join(map(str, stored["cached_points"]))
        )
    report.sections.append(diff_sec)
    return report
