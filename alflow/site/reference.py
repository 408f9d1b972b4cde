"""The reference page's data: reference tables found in the root, and each entry's history across calibrations.

Tables: every ``*.yaml``/``*.yml`` file at the top of the root or one folder down (``results/demo/reference-sim.yaml``),
in a local folder or under an fsspec URL (``s3://bucket/results/reference.yaml``), that loads as a reference table (:func:`alflow.reference.table.load_reference`); a YAML file that is not one is left
out, a reference table that does not validate is listed with the reason. History: the entries every M0 run measured
(:func:`alflow.results.view.m0_entries`), per key (model, method, thinking, K, drafter variant), oldest first; an AL
that moved beyond a confidence interval between two consecutive calibrations (the new AL outside the previous
interval, or the previous AL outside the new one) is marked ``moved``.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from alflow.errors import AlflowError
from alflow.reference.table import (
    Provenance,
    ReferenceEntry,
    ReferenceTable,
    load_reference,
    reference_of_bytes,
)
from alflow.results import view
from alflow.results.catalog import Catalog, CatalogEntry
from alflow.results.store import MANIFEST, open_run, storage_for
from alflow.util.fsutil import open_regular, read_at_most, unsafe_file
from alflow.util.yamlfile import MAX_FILE_BYTES

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EntryRow:
    """One reference value with its provenance, as the page shows it."""

    key: str
    model: str
    method: str
    thinking: str
    k: int
    variant: str
    al: float
    ci_low: float | None
    ci_high: float | None
    num_drafts: int | None
    framework: str | None
    framework_version: str | None
    image: str | None
    image_digest: str | None
    model_revision: str | None
    dataset: str | None
    dataset_hash: str | None
    prompt_count: int | None
    date: str | None
    code_version: str | None
    flow_run_id: str | None
    imported_from: str | None

    @classmethod
    def of(cls, e: ReferenceEntry) -> EntryRow:
        """The row of a validated entry."""
        p = e.provenance
        shown: dict[str, Any] = {
            f.name: getattr(p, f.name, None) for f in fields(cls) if f.name in Provenance.model_fields
        }
        shown["date"] = p.date.isoformat() if p else None
        return cls(
            key=e.label,
            model=e.model,
            method=e.method.value,
            thinking=e.thinking.value,
            k=e.k,
            variant=e.variant.label(),
            al=e.al,
            ci_low=e.ci_low,
            ci_high=e.ci_high,
            num_drafts=e.num_drafts,
            imported_from=e.imported_from.file if e.imported_from else None,
            **shown,
        )


@dataclass(frozen=True)
class TableView:
    """One reference table file in the root."""

    source: str
    """The file, relative to the root."""
    kind: str | None
    dataset: str | None
    category: str | None
    description: str
    entries: tuple[EntryRow, ...]
    problem: str | None


@dataclass(frozen=True)
class Calibration:
    """One M0 run's value of a key."""

    rel: str
    started: str
    al: float
    ci_low: float | None
    ci_high: float | None
    num_drafts: int | None
    moved: bool
    """The AL moved beyond a confidence interval since the previous calibration of the key."""


@dataclass(frozen=True)
class KeyHistory:
    """A key's values across M0 runs, oldest first."""

    key: str
    calibrations: tuple[Calibration, ...]
    moved: int


@dataclass(frozen=True)
class ReferencePage:
    """The reference tables in the root and the history of every key M0 runs measured."""

    tables: tuple[TableView, ...]
    histories: tuple[KeyHistory, ...]
    problems: tuple[str, ...]
    """M0 runs whose entries could not be read, one line each."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON API's answer (``/api/reference``)."""
        return asdict(self)


def _table_files(root: Path) -> list[Path]:
    found: list[Path] = []
    for folder in (root, *sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink())):
        found += sorted(p for p in folder.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
    return [p for p in found if not p.is_symlink()]


def _table(root: Path, path: Path) -> TableView | None:
    rel = path.relative_to(root).as_posix()
    try:
        table = load_reference(path)
    except AlflowError as exc:
        try:
            with open_regular(path) as f:
                head = f.read(100_000).decode(errors="replace")
        except OSError:
            head = "entries"  # cannot be read now: said as broken
        if "entries" not in head:
            return None  # a YAML file that is no reference table
        return _broken(rel, str(exc).replace(str(path), rel))  # named by its place in the root
    except OSError as exc:
        log.warning("reference table %s not read: %s", path, exc)
        return None
    return _view(rel, table)


def _view(rel: str, table: ReferenceTable) -> TableView:
    """The view of a table that validated, found at ``rel`` in the root."""
    rows = tuple(EntryRow.of(e) for e in table.entries)
    return TableView(rel, table.kind, table.dataset, table.category, table.description, rows, None)


def _broken(rel: str, problem: str) -> TableView:
    """The view of a reference table at ``rel`` that does not validate, with the reason on one line."""
    return TableView(rel, None, None, None, "", (), " ".join(problem.split()))


def _moved(prev: Calibration, al: float, low: float | None, high: float | None) -> bool:
    out_of_prev = (
        prev.ci_low is not None and prev.ci_high is not None and not prev.ci_low <= al <= prev.ci_high
    )
    out_of_new = low is not None and high is not None and not low <= prev.al <= high
    return out_of_prev or out_of_new


def _histories(root: str, m0_runs: list[CatalogEntry]) -> tuple[tuple[KeyHistory, ...], tuple[str, ...]]:
    per_key: dict[str, list[Calibration]] = {}
    problems: list[str] = []
    for entry in sorted(m0_runs, key=lambda e: e.started):
        unsafe = unsafe_file(root, entry.run_dir, (MANIFEST, *entry.files))
        if unsafe is not None:
            problems.append(f"{entry.rel}: {unsafe} is not a regular file inside the results root")
            continue
        try:
            entries, bad = view.m0_entries(open_run(entry.run_dir))
        except (AlflowError, OSError) as exc:  # named by its rel, not by the server's path
            problems.append(f"{entry.rel}: {' '.join(str(exc).replace(entry.run_dir, entry.rel).split())}")
            continue
        problems += [f"{entry.rel}: {b}" for b in bad]
        for e in entries:
            calibrations = per_key.setdefault(e.label, [])
            moved = bool(calibrations) and _moved(calibrations[-1], e.al, e.ci_low, e.ci_high)
            calibrations.append(
                Calibration(entry.rel, entry.started, e.al, e.ci_low, e.ci_high, e.num_drafts, moved)
            )
    histories = tuple(
        KeyHistory(key, tuple(c), sum(1 for x in c if x.moved)) for key, c in sorted(per_key.items())
    )
    return histories, tuple(problems)


def _bare(url: str) -> str:
    """A URL's path without its scheme and leading slashes (fsspec lists ``memory://x`` as ``/x``)."""
    return url.split("://", 1)[-1].lstrip("/")


def _url_tables(root: str) -> list[TableView]:
    """The reference tables of a root that is an fsspec URL: the same places and rules as a local folder's."""
    storage = storage_for(root)
    base = root.rstrip("/")
    files = [
        f
        for folder in (base, *storage.list_dirs(base))
        for f in storage.list_files(folder)
        if f.endswith((".yaml", ".yml"))
    ]
    out: list[TableView] = []
    for url in files:
        rel = _bare(url)[len(_bare(base)) :].lstrip("/")
        try:
            with storage.open_read(url) as f:
                raw = read_at_most(f, MAX_FILE_BYTES)
        except OSError as exc:
            log.warning("reference table %s not read: %s", rel, exc)
            continue
        try:
            table = reference_of_bytes(raw, rel)
        except AlflowError as exc:
            if b"entries" in raw[:100_000]:  # else a YAML file that is no reference table
                out.append(_broken(rel, str(exc)))
            continue
        out.append(_view(rel, table))
    return out


def reference_page(catalog: Catalog) -> ReferencePage:
    """The reference page of the catalogue's root: a local folder or an fsspec URL."""
    tables: list[TableView] = []
    root = Path(catalog.root)
    if "://" in catalog.root:
        tables = _url_tables(catalog.root)
    elif root.is_dir():
        tables = [view_ for path in _table_files(root) if (view_ := _table(root, path)) is not None]
    m0 = [e for e in catalog.entries() if e.flow == "m0" and e.status != "unreadable"]
    histories, problems = _histories(catalog.root, m0)
    return ReferencePage(tuple(tables), histories, problems)
