"""The report's "Regression against recent runs" section: the verdicts a run stored (``regression.json``)."""

from __future__ import annotations

from alflow.reports.content.base import Column, Section, column_table, fmt
from alflow.results.regression import MetricChange, PointVerdict, RegressionReport
from alflow.results.store import StoredRun
from alflow.results.view import regression_or_problem

TITLES = {"m2": "Regression against recent runs", "sweep": "Regression against recent runs (every K)"}
REFERENCE_TITLE = "Reference moved against the previous calibration"
METRIC_LABELS = {
    "tpot_ms": "TPOT",
    "tokens_per_s_per_request": "tok/s per request",
    "achieved_al": "achieved AL",
    "al": "AL",
}


def _change(m: MetricChange | None) -> str:
    """``+4.7% [+2.7%, +6.7%]``: the relative change and its interval (``-`` where absent)."""
    if m is None or m.change is None:
        return "-"
    text = f"{m.change:+.1%}"
    if m.low is not None and m.high is not None:
        text += f" [{m.low:+.1%}, {m.high:+.1%}]"
    return text


def _metric(point: PointVerdict, name: str) -> MetricChange | None:
    return next((m for m in point.metrics if m.metric == name), None)


M2_COLUMNS: list[Column] = [
    ("run", False, lambda p: p.run or "this run"),
    ("K", True, lambda p: fmt(p.k)),
    ("concurrency", True, lambda p: fmt(p.concurrency)),
    ("repeat", True, lambda p: fmt(p.repeat + 1)),
    ("verdict", False, lambda p: p.outcome.upper() if p.outcome == "regressed" else p.outcome),
    ("TPOT change", True, lambda p: _change(_metric(p, "tpot_ms"))),
    ("tok/s per request change", True, lambda p: _change(_metric(p, "tokens_per_s_per_request"))),
    ("history runs", True, lambda p: fmt(len(p.history))),
    ("why", False, lambda p: p.message),
]
"""An M2 (or sweep) verdict's columns: one row per judged point."""
REFERENCE_COLUMNS: list[Column] = [
    ("entry", False, lambda p: p.reference or "-"),
    ("verdict", False, lambda p: p.outcome.upper() if p.outcome == "moved" else p.outcome),
    ("previous AL", True, lambda p: fmt(getattr(_metric(p, "al"), "baseline", None), 4)),
    ("new AL", True, lambda p: fmt(getattr(_metric(p, "al"), "current", None), 4)),
    ("change [previous interval]", True, lambda p: _change(_metric(p, "al"))),
    ("why", False, lambda p: p.message),
]
"""A reference verdict's columns: one row per entry judged against the previous calibration."""


def regression_section(report: RegressionReport) -> Section:
    """The verdicts as a section: the method, the counts, one row per point; ``fail`` when any point alerts."""
    title = REFERENCE_TITLE if report.kind == "reference" else TITLES[report.kind]
    counts = report.counts()
    sec = Section(title, paragraphs=[report.method], notes=list(report.notes))
    if report.parameters is not None:
        p = report.parameters
        sec.paragraphs.append(
            f"History: the last {p.history_runs} good runs of each series (at least {p.min_history}); threshold "
            f"{p.threshold:.1%}; {p.resamples} bootstrap resamples, {p.confidence:.0%} interval, seed {p.seed}."
        )
    if not report.points:
        sec.paragraphs.append("No point was judged.")
        return sec
    sec.paragraphs.append(
        "Verdicts: " + ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items())) + "."
    )
    sec.tables.append(
        column_table(REFERENCE_COLUMNS if report.kind == "reference" else M2_COLUMNS, report.points)
    )
    judged = {"regressed", "improved", "unchanged", "moved"}
    sec.status = "fail" if report.alerts() else "pass" if set(counts) <= judged else "warn"
    return sec


def regression_sections(run: StoredRun) -> list[Section]:
    """The run's regression section, none when it stored no verdicts; a warning when they cannot be read."""
    report, problem = regression_or_problem(run)
    if problem is not None:  # never silent: the file may hold a real regression (R12-8)
        return [
            Section(
                "Regression verdicts", [f"The regression verdicts cannot be read: {problem}"], status="warn"
            )
        ]
    return [] if report is None else [regression_section(report)]
