"""Audit a reference table against the raw data behind it.

Every measured (or simulated) entry names the flow run that wrote it; that run's directory keeps
the baseline and final metrics scrapes of every point (``scrapes.json``). The audit recomputes AL,
the counts and the per-position rates from those scrapes with the framework's metrics dialect and
reports any difference beyond rounding, naming the entry.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from alflow.errors import AlflowError
from alflow.metrics.dialects import get_dialect
from alflow.metrics.prometheus import Snapshot, SnapshotWindow
from alflow.reference import ReferenceEntry, load_reference
from alflow.results.store import StoredRun, StoreError, open_run

SCRAPES = "scrapes"
TOLERANCE = 1e-9


def scrape_key(model: str, method: str, thinking: str, k: int) -> str:
    """The key of one reference entry in a run's ``scrapes.json``."""
    return f"{model}|{method}|{thinking}|{k}"


def entry_label(entry: ReferenceEntry) -> str:
    """``model method thinking=... K=... [variant]``: how the audit names an entry."""
    return entry.label


@dataclass(frozen=True)
class AuditRow:
    """The audit of one entry."""

    entry: str
    status: Literal["ok", "mismatch", "missing", "skipped"]
    problems: tuple[str, ...] = ()
    run_dir: str | None = None

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form."""
        return {
            "entry": self.entry,
            "status": self.status,
            "problems": list(self.problems),
            "run_dir": self.run_dir,
        }


@dataclass(frozen=True)
class AuditReport:
    """Every entry's audit; ``ok`` when no entry mismatched or lacked its data."""

    table: str
    rows: tuple[AuditRow, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        """True when every audited entry matched its raw data."""
        return all(r.status in ("ok", "skipped") for r in self.rows) and any(
            r.status == "ok" for r in self.rows
        )

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form."""
        return {"table": self.table, "ok": self.ok, "rows": [r.to_dict() for r in self.rows]}


def _close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=TOLERANCE, abs_tol=TOLERANCE)


def _runs_by_flow_run(run_dirs: Sequence[str | os.PathLike[str]]) -> dict[str, StoredRun]:
    runs: dict[str, StoredRun] = {}
    for d in run_dirs:
        run = open_run(d)
        rid = run.manifest.provenance.flow_run_id
        if rid:
            runs[str(rid)] = run
    return runs


def _check(entry: ReferenceEntry, point: dict[str, Any]) -> list[str]:
    dialect = get_dialect(str(point["dialect"]))
    window = SnapshotWindow(Snapshot.from_dict(point["baseline"]), Snapshot.from_dict(point["final"]))
    stats = dialect.spec_stats(window, k=entry.k)
    problems = []
    if not _close(entry.al, stats.al):
        problems.append(f"al {entry.al!r} in the table, {stats.al!r} from the scrapes")
    if entry.num_drafts is not None and entry.num_drafts != stats.num_drafts:
        problems.append(f"num_drafts {entry.num_drafts} in the table, {stats.num_drafts} from the scrapes")
    if entry.accepted_tokens is not None and entry.accepted_tokens != stats.accepted_tokens:
        problems.append(
            f"accepted_tokens {entry.accepted_tokens} in the table, {stats.accepted_tokens} from the scrapes"
        )
    table_rates, raw_rates = entry.per_position_rates, stats.per_position_rates
    if table_rates is not None and raw_rates is not None:
        for i, (a, b) in enumerate(zip(table_rates, raw_rates, strict=False), start=1):
            if not _close(a, b):
                problems.append(f"per_position_rates p_{i} {a!r} in the table, {b!r} from the scrapes")
    return problems


def audit_reference(
    table_path: str | os.PathLike[str], run_dirs: Sequence[str | os.PathLike[str]]
) -> AuditReport:
    """Recompute every entry of a table from the stored scrapes of the runs it names."""
    table = load_reference(table_path)
    runs = _runs_by_flow_run(run_dirs)
    rows: list[AuditRow] = []
    for entry in table.entries:
        label = entry_label(entry)
        if entry.imported_from is not None:
            src = entry.imported_from
            why = f"imported from {src.source} {src.file}: not measured by alflow, no scrapes to audit"
            rows.append(AuditRow(label, "skipped", (why,)))
            continue
        if entry.provenance is None:
            rows.append(AuditRow(label, "skipped", ("no provenance: an example value, nothing to audit",)))
            continue
        rid = entry.provenance.flow_run_id
        run = runs.get(str(rid)) if rid else None
        if run is None:
            rows.append(
                AuditRow(
                    label,
                    "missing",
                    (f"the run that wrote it (flow run {rid}) is not among the run directories",),
                )
            )
            continue
        try:
            points = run.json(SCRAPES)["points"]
        except (StoreError, KeyError) as exc:
            rows.append(AuditRow(label, "missing", (f"{run.dir} keeps no scrapes ({exc})",), run.dir))
            continue
        point = points.get(scrape_key(entry.model, entry.method.value, entry.thinking.value, entry.k))
        if point is None:
            rows.append(AuditRow(label, "missing", (f"{run.dir} has no scrapes for this entry",), run.dir))
            continue
        try:
            problems = _check(entry, point)
        except (AlflowError, KeyError, TypeError, ValueError) as exc:
            rows.append(AuditRow(label, "mismatch", (f"cannot recompute from the scrapes: {exc}",), run.dir))
            continue
        rows.append(AuditRow(label, "mismatch" if problems else "ok", tuple(problems), run.dir))
    return AuditReport(str(table_path), tuple(rows))
