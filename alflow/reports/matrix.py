"""``alflow report matrix``: the AL / acceptance-rate / throughput matrix of M0 and M1 runs.

One column per dataset (a literature AL dataset: ``gsm8k``, ``math500``, ``mtbench``, ``humaneval``,
``mbpp``) or per SPEED-Bench category, one row per model configuration, and ``Overall``. The numbers
follow AIPerf's ``aiperf speed-bench-report`` (``src/aiperf/analysis/speed_bench_report.py`` of
ai-dynamo/aiperf), so the two agree on the same runs:

- **accept_length**: ``1 + accepted / steps`` from the counters over the run's window (AIPerf:
  ``AcceptanceTotals.value`` and ``extract_accept_length``'s vLLM counter branch,
  ``accepted / num_drafts + 1``); a cell without counts falls back to the stored AL.
- **accept_rate**: ``accepted / drafted`` draft tokens (AIPerf: ``AcceptanceTotals.value`` /
  ``extract_accept_rate``), a fraction in [0, 1].
- **throughput**: output tokens per second over the run (AIPerf: ``output_token_throughput.avg``;
  alflow: the client's ``output_throughput``, total output tokens / measured duration).
- **Overall**: the unweighted mean of the row's cells that have a value (AIPerf: ``_overall``, a
  macro-average with ``statistics.mean``). This differs from :func:`alflow.reports.exports.al_matrix`,
  whose Overall pools the counts (``1 + sum(accepted) / sum(steps)``).
- Column order: AIPerf's ``detect_columns``: the SPEED-Bench qualitative order, the entropy tiers or
  the literature order when every column belongs to one of those sets, else sorted.
- A configuration measured again in the same column: the run given later wins (AIPerf's
  ``model_data.update``); a note names the replaced run.

Rows are labelled ``<model> [<framework> <method> K=<k> thinking=<mode>]`` (as ``al_matrix``): AIPerf
keys rows by model name alone, which would merge the Ks of one M0 run into one cell.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import mean
from typing import Any, Final, Literal, get_args

from alflow.datasets.speed_bench import ENTROPY_TIERS, QUALITATIVE_CATEGORIES
from alflow.errors import InvalidInputError
from alflow.reference.table import ReferenceEntry
from alflow.reports.markdown import spreadsheet_safe
from alflow.reports.svg import finite
from alflow.results.audit import scrape_key
from alflow.results.store import StoredRun
from alflow.results.view import (
    framework,
    get_path,
    json_or_none,
    m0_entries,
    model_id,
    summary,
    table_or_none,
)
from alflow.util import jsonutil

Metric = Literal["accept_length", "accept_rate", "throughput"]
METRICS: Final[tuple[str, ...]] = get_args(Metric)
TITLES: Final[Mapping[str, str]] = {
    "accept_length": "Acceptance Length Report",
    "accept_rate": "Acceptance Rate Report",
    "throughput": "Throughput Report (tokens/sec)",
}
"""Table titles as AIPerf prints them (``print_table``)."""

LITERATURE_ORDER: Final = ("gsm8k", "math500", "mtbench", "humaneval", "mbpp")
"""AIPerf's ``SPEC_AL_BENCHMARKS`` column order (math -> chat -> code); the same names as
:data:`alflow.datasets.literature.LITERATURE_NAMES`."""


@dataclass(frozen=True, slots=True)
class Cell:
    """One measured value: its row, column and the run it comes from."""

    row: str
    column: str
    value: float | None
    run_id: str


@dataclass(frozen=True, slots=True)
class MatrixRow:
    """One model configuration: a value per column (None: not measured) and the Overall."""

    label: str
    values: tuple[float | None, ...]
    overall: float | None


@dataclass(frozen=True, slots=True)
class Matrix:
    """The assembled matrix and the notes that qualify its cells (subsets, replaced cells)."""

    metric: str
    columns: tuple[str, ...]
    rows: tuple[MatrixRow, ...]
    notes: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: each row's cells by column name, full precision."""
        return {
            "metric": self.metric,
            "columns": list(self.columns),
            "rows": [
                {
                    "model": r.label,
                    "values": dict(zip(self.columns, r.values, strict=True)),
                    "overall": r.overall,
                }
                for r in self.rows
            ],
            "notes": list(self.notes),
        }


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def acceptance_value(
    metric: str, *, al: object, steps: object, drafted: object, accepted: object, rate: object = None
) -> float | None:
    """AL or acceptance rate from the window's counters (AIPerf's ``AcceptanceTotals.value``)."""
    acc = _count(accepted)
    if metric == "accept_rate":
        d = _count(drafted)
        return acc / d if acc is not None and d else finite(rate)
    n = _count(steps)
    return 1.0 + acc / n if acc is not None and n else finite(al)


def run_column(run: StoredRun) -> str:
    """The column a run fills: its literature dataset's name, else its SPEED-Bench category."""
    workload = get_path(run.manifest.config, "workload")
    if get_path(workload, "kind") == "literature":
        return str(get_path(workload, "dataset"))
    return str(get_path(workload, "category") or "all")


def _dataset_note(run: StoredRun, column: str) -> str | None:
    """A note when the run's prompts are not the whole published dataset (a subset, or not the dataset)."""
    data = run.manifest.provenance.dataset or {}
    name = data.get("dataset")
    if data.get("subset") == "true":
        return f"{column}: {name} (run {run.manifest.run_id[:8]})"
    if isinstance(name, str) and name.startswith("alflow-"):
        return f"{column}: alflow's bundled prompts {name}, not SPEED-Bench (run {run.manifest.run_id[:8]})"
    return None


def m0_label(e: ReferenceEntry, fw: str) -> str:
    """An M0 entry's row: ``<model> [<framework> <method> K=<k> thinking=<mode>]`` (its own framework first)."""
    efw = e.provenance.framework if e.provenance is not None else fw
    return f"{e.model} [{efw} {e.method.value} K={e.k} thinking={e.thinking.value}]"


def m1_label(run: StoredRun) -> str:
    """An M1 run's row, labelled as :func:`m0_label` labels an entry."""
    config = run.manifest.config
    return (
        f"{model_id(run)} [{framework(run) or '?'} {config.get('method')} K={config.get('k')} "
        f"thinking={config.get('thinking')}]"
    )


def _m0_cells(run: StoredRun, metric: str, column: str) -> list[Cell]:
    points = get_path(json_or_none(run, "scrapes"), "points")
    fw = framework(run) or "?"
    cells = []
    entries, _problems = m0_entries(run)  # the run's own report names entries it cannot read
    for e in entries:
        label = m0_label(e, fw)
        if metric == "throughput":
            key = scrape_key(e.model, e.method.value, e.thinking.value, e.k)
            value = finite(get_path(points, key, "output_throughput"))
        else:
            value = acceptance_value(
                metric, al=e.al, steps=e.num_drafts, drafted=e.draft_tokens, accepted=e.accepted_tokens
            )
        cells.append(Cell(label, column, value, run.manifest.run_id))
    return cells


def _m1_cells(run: StoredRun, metric: str, column: str) -> list[Cell]:
    frame = table_or_none(run, "spec_stats")
    value = None
    if metric == "throughput":
        value = finite(get_path(summary(run), "client", "output_throughput"))
    elif frame is not None and frame.height:
        row = frame.row(0, named=True)
        value = acceptance_value(
            metric,
            al=row.get("al"),
            steps=row.get("num_drafts"),
            drafted=row.get("draft_tokens"),
            accepted=row.get("accepted_tokens"),
            rate=row.get("acceptance_rate"),
        )
    return [Cell(m1_label(run), column, value, run.manifest.run_id)]


def detect_columns(names: set[str]) -> list[str]:
    """AIPerf's ``detect_columns``: a known set keeps its published order, anything else is sorted."""
    for order in (QUALITATIVE_CATEGORIES, ENTROPY_TIERS, LITERATURE_ORDER):
        if names <= set(order):
            return [c for c in order if c in names]
    return sorted(names)


def build_matrix(runs: Sequence[StoredRun], metric: str = "accept_length") -> Matrix:
    """The matrix of ``runs`` (M0 and M1) for ``metric``; other flows are an error naming them."""
    if metric not in METRICS:
        raise InvalidInputError(f"unknown matrix metric {metric!r}; allowed: {', '.join(METRICS)}")
    others = sorted({f"{r.dir} ({r.manifest.flow})" for r in runs if r.manifest.flow not in ("m0", "m1")})
    if others:
        raise InvalidInputError(f"the matrix reads M0 and M1 runs; not: {', '.join(others)}")
    cells: dict[tuple[str, str], Cell] = {}
    notes: list[str] = []
    for run in runs:
        column = run_column(run)
        note = _dataset_note(run, column)
        if note is not None and note not in notes:
            notes.append(note)
        found = (
            _m0_cells(run, metric, column) if run.manifest.flow == "m0" else _m1_cells(run, metric, column)
        )
        for cell in found:
            key = (cell.row, cell.column)
            old = cells.get(key)
            if old is not None and old.run_id != cell.run_id:
                notes.append(
                    f"{cell.row} / {cell.column}: run {cell.run_id[:8]} replaces run {old.run_id[:8]} "
                    "(the later run given wins)"
                )
            cells[key] = cell
    columns = detect_columns({column for _, column in cells})
    rows = []
    for label in sorted({row for row, _ in cells}):
        values = tuple(cells[(label, c)].value if (label, c) in cells else None for c in columns)
        present = [v for v in values if v is not None]
        rows.append(MatrixRow(label, values, mean(present) if present else None))
    return Matrix(metric, tuple(columns), tuple(rows), tuple(notes))


def _fmt(value: float | None, digits: int, missing: str) -> str:
    return missing if value is None else f"{value:.{digits}f}"


def matrix_csv(matrix: Matrix, digits: int = 2) -> str:
    """AIPerf's CSV layout: ``Model,<columns>,Overall``, values with ``digits`` decimals, empty when absent."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["Model", *map(spreadsheet_safe, matrix.columns), "Overall"])
    for r in matrix.rows:
        writer.writerow([spreadsheet_safe(r.label), *(_fmt(v, digits, "") for v in (*r.values, r.overall))])
    return buf.getvalue()


def matrix_json(matrix: Matrix) -> str:
    """The matrix as JSON (full precision; non-finite numbers as null, :mod:`alflow.util.jsonutil`)."""
    return jsonutil.dumps(matrix.to_dict()) + "\n"


def matrix_table(matrix: Matrix, digits: int = 2) -> str:
    """A plain-text table (AIPerf's fallback layout: right-aligned, ``-`` where nothing was measured).

    Plain text, never console markup: a model label such as ``m [sim mtp K=3 thinking=off]`` is printed
    as it is. Control characters in labels are escaped.
    """
    header = ["Model", *matrix.columns, "Overall"]
    body = [
        [_printable(r.label), *(_fmt(v, digits, "-") for v in (*r.values, r.overall))] for r in matrix.rows
    ]
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    lines = [TITLES[matrix.metric], line(header), "  ".join("-" * w for w in widths), *map(line, body)]
    if not matrix.rows:
        lines.append("(no M0 or M1 measurements in these runs)")
    lines += [f"note: {_printable(n)}" for n in matrix.notes]
    return "\n".join(lines) + "\n"


def _printable(text: str) -> str:
    """``text`` with control characters escaped (a label cannot move the cursor or add lines)."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
