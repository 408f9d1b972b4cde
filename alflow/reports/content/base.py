"""The parts every report shares: the report's data types, number formatting, the run's facts and warnings.

A :class:`Report` is what a report says (sections of text, tables and charts); the templates turn it
into HTML or Markdown and never compute anything.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any, Final

from markupsafe import Markup

from alflow.acceptance.knobs import DRAWS_NOTE
from alflow.acceptance.runtime_k import report_line, stored_knobs
from alflow.measure import RequestAcceptance
from alflow.reports import svg
from alflow.results.rows import M2Point
from alflow.results.store import StoredRun
from alflow.results.view import config_value, dialect, framework, image, model_id, server_command, summary
from alflow.util import jsonutil
from alflow.util.redact import redact_url

SIMULATED_BANNER: Final = (
    "SIMULATED DATA: every number in this report comes from alflow's simulated serving engine, "
    "not from a real GPU server. Do not publish or compare it as a measurement."
)
LIVE: ContextVar[bool] = ContextVar("alflow_report_live", default=False)
"""True while a run renders its own report before it closes (its manifest still says running)."""


@dataclass(frozen=True)
class Table:
    """A table of already formatted cells; ``numeric`` marks right-aligned columns."""

    columns: Sequence[str]
    rows: Sequence[Sequence[str]]
    title: str = ""
    numeric: Sequence[bool] = ()

    def is_numeric(self, i: int) -> bool:
        """True when column ``i`` holds numbers (right-aligned)."""
        return i < len(self.numeric) and self.numeric[i]


@dataclass(frozen=True)
class Figure:
    """A rendered chart with its caption."""

    svg: Markup
    caption: str = ""


@dataclass
class Section:
    """One part of a report: paragraphs, figures, tables and bullet notes."""

    title: str
    paragraphs: list[str] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    status: str | None = None  # "pass", "fail" or "warn" marks the section heading


@dataclass
class Report:
    """A whole report: header facts, a verdict line where there is one, sections, configuration."""

    title: str
    simulated: bool
    facts: list[tuple[str, str]]
    sections: list[Section]
    verdict: str | None = None
    verdict_passed: bool | None = None
    config_json: str = ""
    warnings: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------------------------
# Formatting helpers


def fmt(value: object, digits: int = 2) -> str:
    """A number with ``digits`` decimals; ``-`` for missing or non-finite values; text as is."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.{digits}f}" if math.isfinite(value) else "-"
    return str(value)


def run_label(run: StoredRun) -> str:
    """A short label for comparisons: flow, framework (and metrics dialect where it differs), image, K, run id."""
    fw = framework(run) or "?"
    spoken = dialect(run)
    if spoken and spoken != fw:
        fw = f"{fw}/{spoken}"
    k = config_value(run, "k")
    parts = [run.manifest.flow, fw, image(run)[0], None if k is None else f"K={k}", run.manifest.run_id[:8]]
    return " ".join(p for p in parts if p)


def _facts(run: StoredRun) -> list[tuple[str, str]]:
    m = run.manifest
    prov = m.provenance
    img, digest = image(run)
    command = server_command(run)
    gpus = (prov.host.gpus if prov.host is not None else None) or []
    facts = [
        ("Flow", m.flow),
        ("Run id", m.run_id),
        ("Status", _status_text(run)),
        ("Started", m.started),
        ("Finished", m.finished or "-"),
        ("Model", model_id(run) or "-"),
        ("Framework", framework(run) or "-"),
        ("Image", img or "-"),
        ("Image digest", digest or "-"),
        ("Code version", prov.code_version or "-"),
        ("Host", (prov.host.host if prov.host is not None else None) or "-"),
        ("GPUs", ", ".join(str(g.get("name")) for g in gpus) or "-"),
        ("Prefect flow run", prov.flow_run_id or "-"),
        ("Run directory", redact_url(run.dir)),  # a storage URL without its credentials
    ]
    dataset = prov.dataset
    if isinstance(dataset, Mapping):
        facts.append(
            ("Dataset", " / ".join(str(dataset[k]) for k in ("dataset", "category") if dataset.get(k)))
        )
        if dataset.get("dataset_hash"):
            facts.append(("Dataset hash", str(dataset["dataset_hash"])))
    if command:
        facts.append(("Server command", command))
    return facts


def _status_text(run: StoredRun) -> str:
    if LIVE.get() and run.status == "incomplete":
        return "running (this report was written by the run before it closed)"
    error = run.manifest.error
    return run.status + (f" ({error})" if error else "")


def base_report(run: StoredRun, title: str) -> Report:
    """A report with the run's facts and warnings (simulated, incomplete, failed, partial) and no sections."""
    simulated = run.manifest.simulated
    warnings = []
    note = run.manifest.provenance.engine_note
    if note and not simulated:  # e.g. the tiny CPU engine: real numbers, but not a GPU server's
        warnings.append(note)
    if LIVE.get():
        pass  # the run renders its own report before it closes: "running" is expected
    elif run.status == "incomplete":
        warnings.append(
            "This run is INCOMPLETE: its manifest still says running (the process was killed). "
            "The report shows what it had written."
        )
    elif run.status == "failed":
        warnings.append(f"This run FAILED: {run.manifest.error or 'no error text recorded'}")
    server = run.manifest.provenance.server
    if server is not None:  # the release gates' warnings: an image or server whose version is unknown
        for warning in server.provenance.warnings:
            if " version unknown (" in str(warning):
                warnings.append(f"Release gate: {warning}")
            elif str(warning).startswith(("LOSSY verification", DRAWS_NOTE)):
                warnings.append(str(warning))
        # runtime-varying K is allowed with real acceptance: shown
        runtime_k = report_line(stored_knobs(server.provenance.runtime_k))
        if runtime_k is not None:
            warnings.append(runtime_k)
    stored = summary(run)
    if stored.get("partial"):
        why = "; ".join(str(f) for f in stored.get("failures") or []) or "a point stopped mid-way"
        warnings.append(f"PARTIAL results (what was measured before the failure is kept): {why}")
    facts = _facts(run)
    if note:  # the engine's label and the config's (``label``): with the facts, whatever the banner says
        facts.append(("Engine note", note))
    return Report(
        title=title,
        simulated=simulated,
        facts=facts,
        sections=[],
        config_json=jsonutil.dumps(run.manifest.config),
        warnings=warnings,
    )


def validity(point: M2Point) -> str:
    """An M2 point's "valid" cell: ``yes``, ``NO, partial`` (it stopped mid-way) or ``NO``."""
    return "yes" if point.valid else "NO, partial" if point.partial else "NO"


def svg_figure(chart: svg.Chart | svg.BarChart, caption: str = "") -> Figure:
    """Render a chart into a figure."""
    return Figure(svg.render(chart), caption)


def position_figure(
    title: str,
    y_label: str,
    curves: Sequence[tuple[str, Sequence[float]]],
    width: int = 680,
    height: int = 380,
) -> Figure:
    """Per-position acceptance rates p_1..p_K against the draft position, one named curve per rate list."""
    series = [svg.Series(name, list(enumerate(rates, start=1))) for name, rates in curves]
    ticks = list(range(1, max(len(rates) for _, rates in curves) + 1))
    chart = svg.Chart(title, "draft position i", y_label, series, x_ticks=ticks, y_zero=True)
    return svg_figure(replace(chart, width=width, height=height))


PER_REQUEST_NOTE = (
    "Each request's own AL, 1 + accepted drafts / verify steps, from the counts its response carried "
    "(vLLM's metrics.speculative_decoding, SGLang's sglext.spec_tokens_details), over the measured requests with at least one "
    "verify step; the pooled histogram counts verify steps by drafts accepted (the bonus token not counted)."
)


Column = tuple[str, bool, Callable[[Any], str]]
"""One column of :func:`column_table`: its heading, whether it holds numbers (right-aligned), its cell of an item."""


def column_table(columns: Sequence[Column], items: Iterable[Any], title: str = "") -> Table:
    """A table with one row per item, each cell the column's function of the item."""
    return Table(
        [c[0] for c in columns], [[c[2](i) for c in columns] for i in items], title, [c[1] for c in columns]
    )


def cells_table(rows: Sequence[Sequence[tuple[str, bool, str]]]) -> Table:
    """A table of rows of (heading, numeric, cell) triples, the headings and alignment the first row's."""
    return Table(
        [c[0] for c in rows[0]], [[c[2] for c in row] for row in rows], numeric=[c[1] for c in rows[0]]
    )


def label_table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> Table:
    """A table whose first column names its rows and whose other columns hold numbers (right-aligned)."""
    return Table(columns, rows, numeric=[False, *[True] * (len(columns) - 1)])


def per_request_section(items: Sequence[tuple[str, RequestAcceptance]]) -> Section:
    """Per-request AL percentiles (p10/p50/p90) and the pooled histogram, one row per point."""
    width = max((len(a.histogram) for _, a in items if a.histogram is not None), default=0)
    header = ["point", "requests", "p10 AL", "p50 AL", "p90 AL", "mean of requests' AL"]
    rows = []
    for name, a in items:
        hist = [fmt(c) for c in a.histogram] if a.histogram is not None else []
        als = [fmt(al, 4) for al in (a.p10_al, a.p50_al, a.p90_al, a.mean_al)]
        rows.append([name, fmt(a.requests), *als, *hist, *["-"] * (width - len(hist))])
    table = label_table([*header, *(f"{j} accepted" for j in range(width))], rows)
    return Section("Per-request acceptance", paragraphs=[PER_REQUEST_NOTE], tables=[table])
