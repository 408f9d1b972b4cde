"""The M2 report: throughput per GPU against interactivity, latency percentiles, the synthetic audit."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from alflow.gates import AUDIT_MIN_FIT_P, AUDIT_Z
from alflow.metrics.point_metrics import INTERACTIVITY, OUTPUT_PER_GPU, P99_TTFT, POINT_METRICS, TTFT
from alflow.reports import svg
from alflow.reports.content.base import (
    Column,
    Figure,
    Report,
    Section,
    Table,
    base_report,
    column_table,
    fmt,
    svg_figure,
    validity,
)
from alflow.reports.content.regression import regression_sections
from alflow.results.rows import M2Point
from alflow.results.store import StoredRun
from alflow.results.view import (
    AuditSpread,
    audit_spread,
    config_value,
    latency_percentiles,
    m2_points,
    scheme,
    summary,
    table_problem,
)

THROUGHPUT_NOTE = (
    "Each point is one concurrency (c=N). Interactivity = 1000 / median TPOT (tokens/s seen by "
    "one user); throughput = output tokens / benchmark duration / GPUs."
)


def throughput_figure(points: Sequence[M2Point]) -> Figure:
    """Output throughput per GPU against median interactivity: one curve per framework and K."""
    curves: dict[str, list[M2Point]] = {}
    for p in points:
        curves.setdefault(f"{p.framework} K={p.k}", []).append(p)
    return throughput_chart(list(curves.items()))


def throughput_chart(curves: Sequence[tuple[str, Sequence[M2Point]]]) -> Figure:
    """Output throughput per GPU against median interactivity: one named curve per entry, by concurrency."""
    tput = []
    for name, rows in curves:
        ordered = sorted(rows, key=lambda r: r.concurrency)
        tput.append(
            svg.Series(
                name,
                [(p.value(INTERACTIVITY), p.value(OUTPUT_PER_GPU)) for p in ordered],
                labels=[f"c={p.concurrency}" for p in ordered],
            )
        )
    return svg_figure(
        svg.Chart(
            "Output throughput per GPU vs interactivity",
            "interactivity (tok/s/user, median)",
            "output throughput (tok/s/GPU)",
            tput,
            y_zero=True,
        )
    )


def points_table(points: Sequence[M2Point]) -> Table:
    """One row per point: concurrency, framework, K, the declared figures of the table, requests, the client."""
    columns: list[Column] = [
        ("concurrency", True, lambda p: fmt(p.concurrency)),
        ("framework", False, lambda p: p.framework),
        ("K", True, lambda p: fmt(p.k)),
        *((m.heading, True, lambda p, m=m: fmt(p.value(m), m.decimals)) for m in POINT_METRICS if m.table),
        ("completed", True, lambda p: fmt(p.completed)),
        ("failed", True, lambda p: fmt(p.failed)),
        ("client", False, client_cell),
    ]
    return column_table(columns, points)


def client_cell(p: M2Point) -> str:
    """The point's client verdict as a table cell: ``ok``, ``CLIENT-BOUND``, plus the stamp source; ``n/a`` before."""
    if p.client_verdict is None:
        return "n/a"
    verdict = "CLIENT-BOUND" if p.client_verdict == "client-bound" else p.client_verdict
    return f"{verdict} ({p.stamp_source} stamps)" if p.stamp_source else verdict


def client_notes(points: Sequence[M2Point]) -> list[str]:
    """One note per point whose client was the bottleneck or whose ITL percentiles are not measurable."""
    notes = []
    for p in points:
        where = f"K={p.k} concurrency {p.concurrency}" + (f" repeat {p.repeat + 1}" if p.repeat else "")
        if p.client_verdict == "client-bound":
            notes.append(
                f"{where}: the load generator was the bottleneck ({p.client_reasons}); its throughput and "
                "latencies measured the client, not the server: split the load over more client processes"
            )
        if p.itl_note:
            notes.append(f"{where}: ITL median and percentiles not measurable: {p.itl_note}")
    return notes


def build_m2(run: StoredRun) -> Report:
    """M2: throughput per GPU vs interactivity, latency percentiles vs concurrency, the synthetic audit."""
    report = base_report(run, "M2 synthetic benchmark")
    stored = summary(run)
    points = m2_points(run)
    name = scheme(run)
    if name:
        report.facts.append(("Synthetic scheme", name))
    target = stored.get("target_al", run.manifest.provenance.target_al)
    if target is not None:
        report.facts.append(("Target AL", fmt(target, 4)))
    isl = config_value(run, "workload", "isl")
    if isl is not None:
        report.facts.append(("ISL / OSL", f"{isl} / {config_value(run, 'workload', 'osl')}"))
    if not points:
        report.sections.append(Section("Results", paragraphs=["The run stored no benchmark points."]))
        return report
    failures = [str(f) for f in stored.get("failures") or []]
    invalid = [p for p in points if not p.valid]
    if stored or run.complete:
        ok = not failures and not invalid
        report.verdict_passed = ok
        report.verdict = (
            f"All {len(points)} point(s) valid: achieved AL matches the synthetic target"
            if ok
            else f"{len(invalid)} of {len(points)} point(s) INVALID: do not publish them"
        )
    sec = Section(
        "Throughput per GPU against interactivity",
        paragraphs=[THROUGHPUT_NOTE],
        figures=[throughput_figure(points)],
    )
    sec.tables.append(points_table(points))
    report.sections.append(sec)
    report.sections.append(_latency_section(run, points))
    notes = client_notes(points)
    if notes:
        report.sections.append(Section("Client timing", notes=notes, status="warn"))
    report.sections.append(_audit_section(run, points))
    report.sections.append(shape_section(points))
    report.sections.extend(regression_sections(run))
    if failures:
        report.sections.append(Section("Failures", notes=failures, status="fail"))
    return report


def _by_concurrency(
    title: str, y_label: str, series: list[svg.Series], concs: list[int], width: int = 680, height: int = 380
) -> Figure:
    """A chart of ``series`` against concurrency: a base-2 axis ticked at each concurrency measured, y from 0."""
    chart = svg.Chart(title, "concurrency", y_label, series, log_x=True, x_ticks=concs, y_zero=True)
    return svg_figure(replace(chart, width=width, height=height))


def _latency_section(run: StoredRun, points: Sequence[M2Point]) -> Section:
    sec = Section("Latency percentiles against concurrency")
    lat = latency_percentiles(run)
    concs = sorted({p.concurrency for p in points})
    if lat is None:
        damaged = table_problem(run, "requests")
        if damaged is not None:  # listed but unreadable: said, not taken for a run without records
            sec.status = "warn"
            sec.notes.append(f"requests.parquet cannot be read: {damaged}")
        sec.paragraphs.append("No request records: median and p99 TTFT from the stored points.")
        ttft = [
            svg.Series(TTFT.label, [(p.concurrency, p.value(TTFT)) for p in points]),
            svg.Series(P99_TTFT.label, [(p.concurrency, p.value(P99_TTFT)) for p in points], dashed=True),
        ]
        sec.figures.append(_by_concurrency("TTFT vs concurrency", "TTFT (ms)", ttft, concs))
        return sec
    sec.paragraphs.append(
        "From the request records (measured phase, successful requests): p50, p90 and p99 per concurrency."
    )
    rows = lat.to_dicts()
    unmeasurable = sorted({p.concurrency for p in points if p.itl_note})
    if unmeasurable:
        for r in rows:
            if r["concurrency"] in unmeasurable:
                r.update({key: None for key in r if key.endswith("_itl_ms")})
        sec.paragraphs.append(
            "ITL percentiles are left out (n/a) at concurrency "
            + ", ".join(str(c) for c in unmeasurable)
            + ": the client's reads there carried several chunks at once (see Client timing)."
        )
    for metric, label in (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2el", "E2E latency")):
        series = [
            svg.Series(
                f"p{p} {label}",
                [(r["concurrency"], r.get(f"p{p}_{metric}_ms")) for r in rows],
                dashed=p == 99,
            )
            for p in (50, 90, 99)
        ]
        sec.figures.append(
            _by_concurrency(f"{label} percentiles vs concurrency", f"{label} (ms)", series, concs, 520, 340)
        )
    cols = [c for c in lat.columns if c != "concurrency"]
    sec.tables.append(
        Table(
            ["concurrency", *[c.replace("_ms", " ms").replace("_", " ") for c in cols]],
            [[fmt(r["concurrency"]), *[fmt(r.get(c), 2) for c in cols]] for r in rows],
            numeric=[True] * (len(cols) + 1),
        )
    )
    return sec


AUDIT_COLUMNS: list[Column] = [
    ("concurrency", True, lambda ps: fmt(ps[0].concurrency)),
    ("K", True, lambda ps: fmt(ps[0].k)),
    ("target AL", True, lambda ps: fmt(ps[0].target_al, 4)),
    ("expected AL", True, lambda ps: fmt(ps[1].expected, 4)),
    ("per-step std", True, lambda ps: fmt(ps[1].std, 4)),
    ("steps", True, lambda ps: fmt(ps[0].num_drafts)),
    ("achieved AL", True, lambda ps: fmt(ps[0].achieved_al, 4)),
    ("deviation", True, lambda ps: _deviation(ps[0], ps[1])),
    ("allowed", True, lambda ps: fmt(ps[1].allowed, 4)),
    ("valid", False, lambda ps: validity(ps[0])),
    ("audit", False, lambda ps: ps[0].audit),
]
"""The audit table's columns, one row per (point, its :class:`~alflow.results.view.AuditSpread`)."""


def _deviation(p: M2Point, s: AuditSpread) -> str:
    return "-" if p.achieved_al is None or s.expected is None else f"{p.achieved_al - s.expected:+.4f}"


def _audit_section(run: StoredRun, points: Sequence[M2Point]) -> Section:
    sec = Section("Synthetic-acceptance audit", status="pass" if all(p.valid for p in points) else "fail")
    name = scheme(run)
    sec.paragraphs.append(
        "The achieved AL (from the responses' per-request counts where every measured request carried them, else "
        "from the server's counters; the AL source column of the shape test says which) must match what the "
        "scheme realises for the target, "
        f"within max(abs_tol, {AUDIT_Z} x per-step std / sqrt(verify steps)). Error bars: that allowed spread "
        f"around the scheme's expected AL{f' (scheme {name})' if name else ''}."
    )
    spreads = [audit_spread(run, p) for p in points]
    achieved = [(p.concurrency, p.achieved_al) for p in points]
    expected = [(p.concurrency, s.expected) for p, s in zip(points, spreads, strict=True)]
    errs = [
        (s.expected - s.allowed, s.expected + s.allowed)
        if s.expected is not None and s.allowed is not None
        else None
        for s in spreads
    ]
    hlines = [svg.HLine(t, f"target AL {t:.4f}", "#555555") for t in sorted({p.target_al for p in points})]
    concs = sorted({p.concurrency for p in points})
    sec.figures.append(
        svg_figure(
            svg.Chart(
                "Target vs achieved AL per point",
                "concurrency",
                "acceptance length",
                [
                    svg.Series(
                        "expected AL +/- allowed spread", expected, errors=errs, line=False, color="#7f7f7f"
                    ),
                    svg.Series("achieved AL", achieved, color="#1f77b4"),
                ],
                hlines=hlines,
                log_x=True,
                x_ticks=concs,
            )
        )
    )
    sec.tables.append(column_table(AUDIT_COLUMNS, zip(points, spreads, strict=True)))
    return sec


SHAPE_NOTE = (
    "A synthetic scheme is a whole distribution, not only a mean: the steps' accept lengths (drafts accepted + 1) "
    "pooled over the point's measured requests are tested against the scheme's exact pmf at the target "
    f"(Pearson chi-square, cells with small expected counts merged; a point fails below p = {AUDIT_MIN_FIT_P:g}). "
    "A per-batch scheme (SGLang) draws one length per step for the whole batch, so its counts are not "
    "independent and are shown, not tested."
)


def shape_section(points: Sequence[M2Point]) -> Section:
    """The shape test per point: observed vs expected steps by accept length, the p-value, where the AL came from."""
    shaped = [p for p in points if p.histogram_observed is not None and p.histogram_expected is not None]
    sec = Section("Accept-length histogram against the scheme (the shape test)", paragraphs=[SHAPE_NOTE])
    if not shaped:
        sec.paragraphs.append(
            "No point has a histogram (no per-position counters, no per-request histograms)."
        )
        return sec
    if any(p.fit_p_value is not None and p.fit_p_value < AUDIT_MIN_FIT_P for p in shaped):
        sec.status = "fail"
    width = max(len(p.histogram_observed or ()) for p in shaped)
    header = ["concurrency", "AL source", "scheme", "p-value"]
    header += [f"len {j}: obs / exp" for j in range(1, width + 1)]
    rows = []
    for p in shaped:
        obs, exp = p.histogram_observed or (), p.histogram_expected or ()
        cells = [f"{o} / {e:.1f}" for o, e in zip(obs, exp, strict=False)]
        cells += ["-"] * (width - len(cells))
        p_text = "not tested" if p.fit_p_value is None else f"{p.fit_p_value:.3g}"
        rows.append([fmt(p.concurrency), p.al_source or "-", p.scheme or "-", p_text, *cells])
    sec.tables.append(Table(header, rows, numeric=[True, False, False, True, *([True] * width)]))
    for p in shaped:
        sec.figures.append(svg_figure(shape_chart(p)))
    return sec


def shape_chart(p: M2Point) -> svg.BarChart:
    """Expected (outlined, the scheme's pmf x the steps) against observed (filled) verify steps per accept length."""
    obs, exp = p.histogram_observed or (), p.histogram_expected or ()
    width = max(len(obs), len(exp))
    tested = "not tested" if p.fit_p_value is None else f"p = {p.fit_p_value:.3g}"
    return svg.BarChart(
        f"c={p.concurrency}: verify steps by accept length, expected vs observed ({tested})",
        "accept length (tokens per step)",
        "verify steps",
        [str(j) for j in range(1, width + 1)],
        [
            svg.Bars(
                f"expected ({p.scheme or 'scheme'} at {p.target_al:.4f})", list(exp), "#7f7f7f", outline=True
            ),
            svg.Bars(f"observed ({p.al_source or 'source unknown'})", [float(o) for o in obs], "#1f77b4"),
        ],
    )
