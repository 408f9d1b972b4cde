"""What a report says: the content of one run (or several) as sections of text, tables and charts.

The builders read a stored run only, through :mod:`alflow.results.view`, so a report renders from the
run directory alone. One builder per flow is registered in :data:`BUILDERS` (``m0``, ``m1``, ``m2``, ``sweep``);
any other flow gets the generic part (run facts, summary, configuration). Templates turn a
:class:`Report` into HTML or Markdown; they never compute anything.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Final

from alflow.errors import AlflowError
from alflow.gates import AccuracyDetails, AlGateDetails
from alflow.metrics.point_metrics import INTERACTIVITY, OUTPUT_PER_GPU, TPOT, TTFT
from alflow.reports.content.base import (
    LIVE,
    SIMULATED_BANNER,
    Figure,
    Report,
    Section,
    Table,
    base_report,
    cells_table,
    fmt,
    label_table,
    run_label,
    validity,
)
from alflow.reports.content.m0 import build_m0
from alflow.reports.content.m1 import build_m1
from alflow.reports.content.m2 import build_m2, throughput_chart
from alflow.reports.content.sweep import build_sweep
from alflow.reports.exports import al_matrix
from alflow.results.store import StoredRun
from alflow.results.view import config_value, framework, image, json_or_none, m1_verdicts, m2_points, model_id
from alflow.util import jsonutil

__all__ = [
    "BUILDERS",
    "SIMULATED_BANNER",
    "Figure",
    "Report",
    "Section",
    "Table",
    "build_comparison",
    "build_m0",
    "build_m1",
    "build_m2",
    "build_report",
    "build_sweep",
    "fmt",
    "run_label",
]


BUILDERS: Final[dict[str, Callable[[StoredRun], Report]]] = {
    "m0": build_m0,
    "m1": build_m1,
    "m2": build_m2,
    "sweep": build_sweep,
}


def build_generic(run: StoredRun) -> Report:
    """Any other flow: run facts and the summary as JSON."""
    report = base_report(run, f"{run.manifest.flow} run")
    summary = json_or_none(run, "summary")
    if summary is not None:
        report.sections.append(Section("Summary", paragraphs=[jsonutil.dumps(summary)]))
    return report


def build_report(run: StoredRun, *, live: bool = False) -> Report:
    """The report of one stored run (the builder registered for its flow).

    ``live``: the run is rendering its own report before it closes, so a manifest that still says
    ``running`` is expected and not reported as an interrupted run.
    """
    token = LIVE.set(live)
    try:
        return BUILDERS.get(run.manifest.flow, build_generic)(run)
    finally:
        LIVE.reset(token)


def build_comparison(runs: Sequence[StoredRun]) -> Report:
    """Several runs side by side: who ran what, then the flow-specific comparison."""
    if not runs:
        raise AlflowError("give at least one run directory to compare")
    runs_table = Table(
        ["run", "flow", "status", "simulated", "model", "framework", "image", "K", "directory"],
        [
            [
                run_label(r),
                r.manifest.flow,
                r.status,
                "yes" if r.manifest.simulated else "no",
                model_id(r) or "-",
                framework(r) or "-",
                image(r)[0] or "-",
                fmt(config_value(r, "k")),
                r.dir,
            ]
            for r in runs
        ],
    )
    report = Report(
        title=f"Comparison of {len(runs)} runs",
        simulated=any(r.manifest.simulated for r in runs),
        facts=[("Runs", str(len(runs)))],
        sections=[Section("Runs", tables=[runs_table])],
        warnings=[
            f"{run_label(r)} is {r.status}: its numbers are partial or failed."
            for r in runs
            if r.status != "complete"
        ],
    )
    m2 = [r for r in runs if r.manifest.flow == "m2"]
    if m2:
        report.sections.append(_compare_m2(m2))
    m1 = [r for r in runs if r.manifest.flow == "m1"]
    if m1:
        report.sections.append(_compare_m1(m1))
    al_runs = [r for r in runs if r.manifest.flow in ("m0", "m1")]
    frame = al_matrix(al_runs) if al_runs else None
    if frame is not None and frame.height:
        cells = [[str(v) if isinstance(v, str) else fmt(v, 4) for v in row] for row in frame.iter_rows()]
        what = "Rows: model, framework, method, K and thinking mode; columns: dataset categories."
        table = label_table(frame.columns, cells)
        report.sections.append(Section("Acceptance-length matrix", paragraphs=[what], tables=[table]))
    return report


COMPARED: Final = (OUTPUT_PER_GPU, INTERACTIVITY, TPOT, TTFT)
"""The figures of the M2 comparison's table."""


def _compare_m2(runs: Sequence[StoredRun]) -> Section:
    curves = [(run_label(r), sorted(m2_points(r), key=lambda p: p.concurrency)) for r in runs]
    rows = [
        [
            label,
            fmt(p.concurrency),
            *(fmt(p.value(m), m.decimals) for m in COMPARED),
            fmt(p.achieved_al, 4),
            validity(p),
        ]
        for label, pts in curves
        for p in pts
    ]
    return Section(
        "M2: throughput per GPU against interactivity",
        figures=[throughput_chart(curves)],
        tables=[
            Table(
                ["run", "concurrency", *(m.heading for m in COMPARED), "achieved AL", "valid"],
                rows,
                numeric=[False, True, *(True for _ in COMPARED), True, False],
            )
        ],
    )


def _compare_m1(runs: Iterable[StoredRun]) -> Section:
    rows = []
    for r in runs:
        stored = json_or_none(r, "summary") or {}
        details = {v.gate: v.details for v in m1_verdicts(r)}
        al, acc = details.get("al"), details.get("gsm8k-accuracy")
        al = al if isinstance(al, AlGateDetails) else None
        acc = acc if isinstance(acc, AccuracyDetails) else None
        ci = None if al is None else al.ci
        lo, hi = (None, None) if ci is None else (ci.low, ci.high)
        scores = {} if acc is None else acc.scores
        verdict = "-" if "passed" not in stored else ("PASSED" if stored["passed"] else "FAILED")
        rows.append(
            [
                ("run", False, run_label(r)),
                ("verdict", False, verdict),
                ("AL", True, fmt(None if al is None else al.al, 4)),
                ("CI", False, f"[{fmt(lo, 4)}, {fmt(hi, 4)}]"),
                ("AL threshold", True, fmt(None if al is None else al.threshold, 4)),
                ("GSM8K strict", True, fmt(scores.get("strict-match"), 4)),
                ("GSM8K flexible", True, fmt(scores.get("flexible-extract"), 4)),
                ("GSM8K threshold", True, fmt(None if acc is None else acc.threshold, 4)),
            ]
        )
    return Section("M1: gate verdicts", tables=[cells_table(rows)])
