"""Audit a reference table against the raw data behind it.

Every measured (or simulated) entry names the flow run that wrote it; that run's directory keeps
the baseline and final metrics scrapes of every point (``scrapes.json``), its configuration and
dataset identity (``manifest.json``) and the entries as it wrote them (``summary.json``). The audit checks
every field of every entry against that data (:mod:`alflow.results.entry_audit`): AL, the counts, the
per-position rates and the CI bounds recomputed from the scrapes, the drafter variant, model revision,
sampling and framework from the configuration, the dataset hash from the run's record and the dataset
file, the rest from the run's provenance and summary. Each mismatch names the field, the table's value
and the expected one; a field that nothing stored could check is named as unchecked, never passed.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from pydantic import computed_field

from alflow.reference.table import load_reference
from alflow.results.entry_audit import SCRAPES, TOLERANCE, Mismatch, RunData, check_entry, scrape_key
from alflow.results.store import StoredRun, open_run

__all__ = ["SCRAPES", "TOLERANCE", "AuditReport", "AuditRow", "audit_reference", "scrape_key"]


@dataclass(frozen=True)
class AuditRow:
    """The audit of one entry."""

    entry: str
    status: Literal["ok", "mismatch", "unverified", "missing", "skipped"]
    """ok: every field checked and matched; mismatch: a field differs (or the data is damaged); unverified:
    no mismatch, but some field could not be checked; missing: the run that wrote it is not given."""
    problems: tuple[str, ...] = ()
    run_dir: str | None = None
    mismatches: tuple[Mismatch, ...] = ()
    """Each field that differs: its name, the table's value, the expected value and where that comes from."""
    unchecked: tuple[str, ...] = ()
    """``<field>: <why>`` for each field no stored data could check."""
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class AuditReport:
    """Every entry's audit; ``ok`` when no entry mismatched, lacked its run or had a field left unchecked.

    ``alflow reference audit --json`` prints it as pydantic serializes it (:func:`alflow.util.rows.dump_row`).
    """

    table: str
    rows: tuple[AuditRow, ...] = field(default_factory=tuple)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def ok(self) -> bool:
        """True when every audited entry matched its raw data."""
        return all(r.status in ("ok", "skipped") for r in self.rows) and any(
            r.status == "ok" for r in self.rows
        )


def _runs_by_flow_run(run_dirs: Sequence[str | os.PathLike[str]]) -> dict[str, StoredRun]:
    runs: dict[str, StoredRun] = {}
    for d in run_dirs:
        run = open_run(d)
        rid = run.manifest.provenance.flow_run_id
        if rid:
            runs[str(rid)] = run
    return runs


def audit_reference(
    table_path: str | os.PathLike[str], run_dirs: Sequence[str | os.PathLike[str]]
) -> AuditReport:
    """Check every field of every entry of a table against the stored data of the run it names."""
    table = load_reference(table_path)
    runs = _runs_by_flow_run(run_dirs)
    loaded: dict[str, RunData] = {}
    rows: list[AuditRow] = []
    for entry in table.entries:
        label = entry.label
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
            why = f"the run that wrote it (flow run {rid}) is not among the run directories"
            rows.append(
                AuditRow(label, "missing", (f"{why}: no field checked",), unchecked=(f"every field: {why}",))
            )
            continue
        if run.dir not in loaded:
            loaded[run.dir] = RunData.load(run)
        ec = check_entry(entry, loaded[run.dir], table.kind)
        problems = (*(m.text() for m in ec.mismatches), *ec.problems)
        unchecked = tuple(ec.unchecked)
        status: Literal["ok", "mismatch", "unverified"] = (
            "mismatch" if problems else "unverified" if unchecked else "ok"
        )
        rows.append(
            AuditRow(label, status, problems, run.dir, tuple(ec.mismatches), unchecked, tuple(ec.notes))
        )
    return AuditReport(str(table_path), tuple(rows))
