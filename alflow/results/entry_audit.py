"""Every field of one reference entry, checked against the stored data of the run that wrote it.

:func:`alflow.results.audit.audit_reference` calls :func:`check_entry` for each entry whose run it has.
Each field is recomputed from the rawest stored data that decides it, with the code the calibration used:

- ``al``, ``num_drafts``, ``accepted_tokens``, ``draft_tokens``, ``per_position_rates``, ``ci_low`` and
  ``ci_high``: from the point's baseline and final scrapes in ``scrapes.json`` through the framework's
  metrics dialect (:meth:`~alflow.metrics.dialects.Dialect.spec_stats`, the CI of
  :mod:`alflow.acceptance.stats` at the calibration's level), or, where the entry holds the responses' own
  counts, from the pooled per-request histogram stored beside them
  (:func:`~alflow.acceptance.stats.from_histogram`, as :func:`alflow.measure.window_stats` computes them);
- ``model``, ``method``, ``thinking``, ``k``: the point must be one the run measured (its scrape key and the
  run's configuration);
- the drafter variant (``draft_model``, sample methods, ``concurrency``, ``prefix_caching``), the model
  revision, the sampling (temperature, top_p, top_k, ... one by one) and the framework: from the run's stored
  configuration (``manifest.json``), with :func:`alflow.reference.table.m0_variant` and
  :meth:`~alflow.config.ModelSpec.sampling` as the calibration builds them;
- ``dataset`` and ``dataset_hash``: against the dataset identity the run recorded, and against the dataset
  file itself when it is on this machine (then ``prompt_count`` is recounted from it too);
- ``code_version`` and ``host``: against the run's provenance; the table's ``kind`` against whether the run
  was simulated;
- every field, the launch facts above included (``framework_version``, ``image``, ``command``, ``date``,
  ``note``, ...): against the entry as the run itself recorded it in ``summary.json``.

A field no source could check is listed as unchecked with the reason, never passed silently.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from alflow.acceptance.stats import SpecStats, from_histogram
from alflow.config import CalibrateParams, ThinkingMode
from alflow.errors import AlflowError
from alflow.measure import stored_acceptance
from alflow.metrics.prometheus import Snapshot, SnapshotWindow
from alflow.metrics.readers import get_dialect
from alflow.reference.table import Provenance, ReferenceEntry, Variant, m0_variant, upgrade_entry_v1
from alflow.results.store import StoredRun, StoreError
from alflow.util.rows import load_row

SCRAPES = "scrapes"
SUMMARY = "summary"
TOLERANCE = 1e-9
"""Relative and absolute tolerance of a recomputed figure (stored figures are rounded to 12 digits)."""

STATS_FIELDS = (
    "al",
    "num_drafts",
    "accepted_tokens",
    "draft_tokens",
    "per_position_rates",
    "ci_low",
    "ci_high",
)
KEY_FIELDS = ("model", "method", "thinking", "k")
VARIANT_FIELDS = tuple(f.name for f in fields(Variant))
PROVENANCE_FIELDS = tuple(Provenance.model_fields)
ALL_FIELDS = (
    *KEY_FIELDS,
    *VARIANT_FIELDS,
    *STATS_FIELDS,
    *(f"provenance.{name}" for name in PROVENANCE_FIELDS),
    "note",
)
"""Every field of a measured entry (``imported_from`` is never set on one)."""


def scrape_key(model: str, method: str, thinking: str, k: int) -> str:
    """The key of one reference entry in a run's ``scrapes.json``."""
    return f"{model}|{method}|{thinking}|{k}"


def close(a: object, b: object) -> bool:
    """Equal, numbers within :data:`TOLERANCE` (never a bool against a number)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return math.isclose(a, b, rel_tol=TOLERANCE, abs_tol=TOLERANCE)
    return a == b


@dataclass(frozen=True)
class Mismatch:
    """One field whose value in the table is not what the stored data gives."""

    field: str
    """Dotted path, e.g. ``ci_low``, ``provenance.sampling.temperature``, ``per_position_rates.p_2``."""
    table: object
    expected: object
    source: str
    """Where the expected value comes from, e.g. ``the scrapes' counters``, ``the run's configuration``."""

    def text(self) -> str:
        """``<field> <table value> in the table, <expected> from <source>``."""
        return f"{self.field} {self.table!r} in the table, {self.expected!r} from {self.source}"


@dataclass
class EntryCheck:
    """What :func:`check_entry` found for one entry."""

    mismatches: list[Mismatch] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    """Failures that are not one field's value (damaged data, a partial point); each fails the entry."""
    checked: set[str] = field(default_factory=set)
    """Top-level fields (:data:`ALL_FIELDS`) that at least one source checked."""
    why_not: dict[str, list[str]] = field(default_factory=dict)
    """For a field a source could not check: why."""
    notes: list[str] = field(default_factory=list)

    def mismatch(self, name: str, table: object, expected: object, source: str) -> None:
        """Record a mismatch unless the same field already has one."""
        if not any(m.field == name for m in self.mismatches):
            self.mismatches.append(Mismatch(name, table, expected, source))

    def compare(
        self, name: str, table: object, expected: object, source: str, top: str | None = None
    ) -> None:
        """Check one value; ``top`` is the top-level field it belongs to (default: ``name``)."""
        self.checked.add(top or name)
        if not close(table, expected):
            self.mismatch(name, table, expected, source)

    def cannot(self, fields: Iterable[str], why: str) -> None:
        """Say why a source could not check ``fields``."""
        for name in fields:
            self.why_not.setdefault(name, []).append(why)

    @property
    def unchecked_fields(self) -> list[str]:
        """The fields of :data:`ALL_FIELDS` no source checked."""
        return [name for name in ALL_FIELDS if name not in self.checked]

    @property
    def unchecked(self) -> list[str]:
        """``<field>, <field>: <why>`` for the fields no source checked, grouped by the reason."""
        groups: dict[str, list[str]] = {}
        for name in self.unchecked_fields:
            why = "; ".join(self.why_not.get(name) or ["no stored data decides it"])
            groups.setdefault(why, []).append(name)
        return [f"{', '.join(names)}: {why}" for why, names in groups.items()]


@dataclass
class RunData:
    """One run's stored data, read once for every entry that cites it; each part or why it is missing."""

    run: StoredRun
    points: dict[str, Any] | None = None
    points_error: str | None = None
    summary_entries: list[Mapping[str, Any]] | None = None
    summary_error: str | None = None
    reference_updated: bool | None = None
    params: CalibrateParams | None = None
    params_error: str | None = None
    file_hashes: dict[str, str | None] = field(default_factory=dict)
    prompt_counts: dict[str, int | str] = field(default_factory=dict)

    @classmethod
    def load(cls, run: StoredRun) -> RunData:
        """Read the run's scrapes, summary and configuration (what cannot be read is said, not raised)."""
        data = cls(run)
        try:
            points = run.json(SCRAPES).get("points")
            if not isinstance(points, dict):
                raise StoreError("scrapes.json has no points")
            data.points = points
        except StoreError as exc:
            data.points_error = f"{run.dir} keeps no scrapes ({exc})"
        try:
            summary = run.json(SUMMARY)
            entries = summary.get("entries")
            if not isinstance(entries, list):
                raise StoreError("summary.json lists no entries")
            data.summary_entries = [e for e in entries if isinstance(e, Mapping)]
            updated = summary.get("reference_updated")
            data.reference_updated = updated if isinstance(updated, bool) else None
        except StoreError as exc:
            data.summary_error = f"{run.dir} keeps no summary of its entries ({exc})"
        if run.manifest.flow != "m0":
            data.params_error = f"{run.dir} is a {run.manifest.flow} run, not an M0 calibration"
        else:
            try:
                data.params = CalibrateParams.model_validate(run.manifest.config)
            except ValidationError as exc:
                err = exc.errors()[0]
                where = ".".join(str(p) for p in err["loc"]) or "(top level)"
                data.params_error = (
                    f"{run.dir}'s configuration does not load as M0 parameters ({where}: {err['msg']})"
                )
        return data

    def file_hash(self, path: str) -> str | None:
        """``sha256:<hex>`` of a local file (None when it is not on this machine), computed once."""
        if path not in self.file_hashes:
            from alflow.workloads import file_sha256

            p = Path(path)
            try:
                self.file_hashes[path] = file_sha256(p) if p.is_file() else None
            except OSError:
                self.file_hashes[path] = None
        return self.file_hashes[path]

    def prompt_count(self, params: CalibrateParams) -> int | str:
        """The prompts the run's workload sends, counted from the local dataset file (or why not)."""
        key = "workload"
        if key not in self.prompt_counts:
            from alflow.workloads import al_workload_sessions

            try:
                self.prompt_counts[key] = len(al_workload_sessions(params.workload))
            except (AlflowError, OSError, ValueError) as exc:
                self.prompt_counts[key] = f"the dataset file does not load here ({exc})"
        return self.prompt_counts[key]


def _split_key(key: str) -> tuple[str, str, str, str] | None:
    parts = key.rsplit("|", 3)
    return (parts[0], parts[1], parts[2], parts[3]) if len(parts) == 4 else None


def _absent_point(entry: ReferenceEntry, points: Mapping[str, Any], ec: EntryCheck, where: str) -> None:
    """Name the key field(s) in which the entry differs from a point the run measured."""
    mine = (entry.model, entry.method.value, entry.thinking.value, str(entry.k))
    keys = [split for key in points if (split := _split_key(str(key))) is not None]
    named = False
    for i, name in enumerate(KEY_FIELDS):
        others = sorted(
            {k[i] for k in keys if k[i] != mine[i] and all(k[j] == mine[j] for j in range(4) if j != i)},
            key=lambda v: (len(v), v),
        )
        if not others:
            continue
        values: list[object] = [int(v) if name == "k" and v.isdigit() else v for v in others]
        table: object = entry.k if name == "k" else mine[i]
        ec.mismatch(name, table, values[0] if len(values) == 1 else values, where)
        named = True
    if not named:
        measured = ", ".join(sorted(str(k) for k in points)) or "nothing"
        ec.problems.append(
            f"the run measured no point {scrape_key(*mine[:3], entry.k)} (it measured: {measured})"
        )
    ec.checked.update(KEY_FIELDS)


def _stats_candidates(point: Mapping[str, Any], k: int) -> list[tuple[str, SpecStats]]:
    """The statistics the calibration may have stored: the responses' own counts, then the counters."""
    out: list[tuple[str, SpecStats]] = []
    raw = point.get("per_request")
    requests = stored_acceptance(raw)
    if requests is not None and requests.histogram is not None and len(requests.histogram) == k + 1:
        with contextlib.suppress(AlflowError):  # histograms the calibration refuses fall back to the counters
            stats = from_histogram(requests.histogram, k=k)
            out.append(("the run's per-request acceptance histogram", stats))
    dialect = get_dialect(str(point["dialect"]))
    window = SnapshotWindow(load_row(Snapshot, point["baseline"]), load_row(Snapshot, point["final"]))
    out.append(("the run's scrapes", dialect.spec_stats(window, k=k)))
    return out


def _check_stats(entry: ReferenceEntry, point: Mapping[str, Any], ec: EntryCheck) -> None:
    """AL, counts, rates and CI bounds recomputed from the point's stored scrapes (or per-request histogram)."""
    if point.get("partial"):
        ec.problems.append("the run's point is partial (aborted mid-way): it never belongs in a table")
    try:
        stored_k = int(point.get("k", entry.k))
        candidates = _stats_candidates(point, stored_k)
    except (AlflowError, KeyError, TypeError, ValueError) as exc:
        ec.problems.append(f"cannot recompute from the scrapes: {exc}")
        ec.cannot(STATS_FIELDS, "the stored scrapes do not recompute")
        return
    if stored_k != entry.k:
        ec.mismatch("k", entry.k, stored_k, "the run's scrapes")
    ec.checked.add("k")
    # the source whose counts the entry holds (the calibration takes the responses' counts when every request
    # carried them, else the counters); when neither matches, the first one (the calibration's preference)
    source, stats = next(
        (
            (name, s)
            for name, s in candidates
            if (s.num_drafts, s.accepted_tokens) == (entry.num_drafts, entry.accepted_tokens)
        ),
        candidates[0],
    )
    ec.compare("al", entry.al, stats.al, source)
    ec.compare("num_drafts", entry.num_drafts, stats.num_drafts, source)
    ec.compare("accepted_tokens", entry.accepted_tokens, stats.accepted_tokens, source)
    if source == "the run's scrapes":
        ec.compare("draft_tokens", entry.draft_tokens, stats.draft_tokens, source)
    else:
        ec.cannot(
            ("draft_tokens",), "the run keeps the per-request histogram, not the requests' draft counts"
        )
    table_rates, raw_rates = entry.per_position_rates, stats.per_position_rates
    ec.checked.add("per_position_rates")
    if table_rates is None or raw_rates is None or len(table_rates) != len(raw_rates):
        ec.compare("per_position_rates", table_rates, raw_rates, source)
    else:
        for i, (a, b) in enumerate(zip(table_rates, raw_rates, strict=True), start=1):
            ec.compare(f"per_position_rates.p_{i}", a, b, source, top="per_position_rates")
    ci = stats.ci
    ci_source = source if ci is None else f"{source} ({ci.method} {ci.level:.0%} CI)"
    ec.compare("ci_low", entry.ci_low, None if ci is None else ci.low, ci_source)
    ec.compare("ci_high", entry.ci_high, None if ci is None else ci.high, ci_source)


def _check_config(entry: ReferenceEntry, params: CalibrateParams, ec: EntryCheck) -> None:
    """Key, drafter variant, model revision, sampling and framework from the run's stored configuration."""
    where = "the run's configuration"
    prov = entry.provenance
    assert prov is not None
    ec.compare("method", entry.method.value, params.method.value, where)
    ec.checked.add("k")
    if entry.k not in params.ks:
        ec.mismatch("k", entry.k, list(params.ks), where)
    models = {m.id: m for m in params.models}
    model = models.get(entry.model)
    ec.checked.add("model")
    if model is None:
        ec.mismatch("model", entry.model, sorted(models), where)
        ec.cannot(
            ("thinking", "provenance.model_revision", "provenance.sampling"),
            f"{where} has no model {entry.model!r}",
        )
    else:
        modes = [m for m in params.thinking if model.reasoning or m is ThinkingMode.OFF] or [ThinkingMode.OFF]
        ec.checked.add("thinking")
        if entry.thinking not in modes:
            ec.mismatch("thinking", entry.thinking.value, [m.value for m in modes], where)
        ec.compare("provenance.model_revision", prov.model_revision, model.revision, where)
        expected = model.sampling(entry.thinking).model_dump(mode="json")
        actual = prov.sampling.model_dump(mode="json")
        for name in sorted(set(expected) | set(actual)):
            ec.compare(
                f"provenance.sampling.{name}",
                actual.get(name),
                expected.get(name),
                f"{where} (models[{entry.model}] thinking={entry.thinking.value})",
                top="provenance.sampling",
            )
    variant = m0_variant(params)
    for name in VARIANT_FIELDS:
        ec.compare(name, getattr(entry.variant, name), getattr(variant, name), where)
    ec.compare("provenance.framework", prov.framework, params.server.framework, where)


def _check_dataset(entry: ReferenceEntry, data: RunData, ec: EntryCheck) -> None:
    """Dataset name and hash against the run's recorded dataset, and the local dataset file where present."""
    prov = entry.provenance
    assert prov is not None
    recorded = data.run.manifest.provenance.dataset
    where = "the run's recorded dataset (manifest.json)"
    if not isinstance(recorded, Mapping) or not recorded.get("dataset_hash"):
        ec.cannot(("provenance.dataset", "provenance.dataset_hash"), f"{data.run.dir} recorded no dataset")
        return
    ec.compare("provenance.dataset", prov.dataset, recorded.get("dataset"), where)
    ec.compare("provenance.dataset_hash", prov.dataset_hash, recorded["dataset_hash"], where)
    count = recorded.get("prompts")
    if count is not None and str(count).isdigit():
        ec.compare("provenance.prompt_count", prov.prompt_count, int(str(count)), where)
    file = recorded.get("file")
    if not isinstance(file, str) or not file:
        ec.notes.append("the run recorded no dataset file: dataset_hash checked against its record only")
        return
    local = data.file_hash(file)
    if local is None:
        ec.notes.append(
            f"dataset file {file} is not on this machine: dataset_hash checked against the run's record only"
        )
        return
    ec.compare("provenance.dataset_hash", prov.dataset_hash, local, f"the dataset file {file}")
    if local != recorded["dataset_hash"]:
        ec.problems.append(
            f"the dataset file {file} hashes to {local}, the run recorded {recorded['dataset_hash']}: "
            "the file changed since the run"
        )
    elif data.params is not None:
        counted = data.prompt_count(data.params)
        if isinstance(counted, int):
            ec.compare("provenance.prompt_count", prov.prompt_count, counted, f"the dataset file {file}")
        else:
            ec.notes.append(f"prompt_count not recounted: {counted}")


def _check_run_provenance(entry: ReferenceEntry, data: RunData, table_kind: str, ec: EntryCheck) -> None:
    """Code version, host and flow run id from the run's provenance; the table's kind from the run's."""
    prov = entry.provenance
    assert prov is not None
    run_prov = data.run.manifest.provenance
    where = "the run's provenance (manifest.json)"
    if run_prov.code_version is not None:
        ec.compare("provenance.code_version", prov.code_version, run_prov.code_version, where)
    else:
        ec.cannot(("provenance.code_version",), f"{data.run.dir} recorded no code version")
    if run_prov.host is not None:
        ec.compare("provenance.host", prov.host, run_prov.host.host, where)
    else:
        ec.cannot(("provenance.host",), f"{data.run.dir} recorded no host")
    ec.compare("provenance.flow_run_id", prov.flow_run_id, run_prov.flow_run_id, where)
    if table_kind in ("measured", "simulated"):
        kind = "simulated" if data.run.manifest.simulated else "measured"
        if kind != table_kind:
            ec.mismatch("kind", table_kind, kind, f"the run (simulated={data.run.manifest.simulated})")
    if data.reference_updated is False:
        ec.problems.append(
            "the run failed and left the reference table as it was: its entries belong in no table"
        )


def _flatten(value: object, prefix: str, out: dict[str, object]) -> dict[str, object]:
    if isinstance(value, Mapping):
        for key, item in value.items():
            _flatten(item, f"{prefix}.{key}" if prefix else str(key), out)
    else:
        out[prefix] = value
    return out


def _top(name: str) -> str:
    parts = name.split(".")
    return ".".join(parts[:2]) if parts[0] == "provenance" else parts[0]


def _check_summary(entry: ReferenceEntry, data: RunData, ec: EntryCheck) -> None:
    """Every field against the entry as the run recorded it in its summary (launch facts included)."""
    if data.summary_entries is None:
        ec.cannot(ALL_FIELDS, data.summary_error or "no summary")
        return
    point = (entry.model, entry.method.value, entry.thinking.value, entry.k)
    found = [
        e
        for e in data.summary_entries
        if (e.get("model"), e.get("method"), e.get("thinking"), e.get("k")) == point
    ]
    if not found:
        ec.cannot(ALL_FIELDS, f"{data.run.dir}'s summary.json has no entry for this point")
        return
    raw = found[0]
    try:
        recorded: Mapping[str, Any] = ReferenceEntry.model_validate(upgrade_entry_v1(raw)).model_dump(
            mode="json"
        )
    except ValidationError:
        recorded = raw
    mine = _flatten(entry.model_dump(mode="json"), "", {})
    theirs = _flatten(recorded, "", {})
    where = "the run's summary.json"
    for name in sorted(set(mine) | set(theirs)):
        if name == "imported_from":
            continue
        a, b = mine.get(name), theirs.get(name)
        if name == "per_position_rates" and isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            for i, (x, y) in enumerate(zip(a, b, strict=True), start=1):
                ec.compare(f"per_position_rates.p_{i}", x, y, where, top="per_position_rates")
            continue
        ec.compare(name, a, b, where, top=_top(name))


def check_entry(entry: ReferenceEntry, data: RunData, table_kind: str) -> EntryCheck:
    """Check every field of a measured entry against the stored data of the run ``data`` (see the module doc)."""
    ec = EntryCheck()
    # the rawest sources first: a field's first mismatch is the one reported
    if data.points is None:
        ec.cannot((*STATS_FIELDS, *KEY_FIELDS), data.points_error or "no scrapes")
    else:
        point = data.points.get(scrape_key(entry.model, entry.method.value, entry.thinking.value, entry.k))
        if isinstance(point, Mapping):
            ec.checked.update(KEY_FIELDS)
            _check_stats(entry, point, ec)
        else:
            _absent_point(entry, data.points, ec, "the run's scrapes (the points it measured)")
            ec.cannot(STATS_FIELDS, "the run has no scrapes for this point")
    if data.params is not None:
        _check_config(entry, data.params, ec)
    else:
        ec.cannot(
            (*VARIANT_FIELDS, "provenance.model_revision", "provenance.sampling", "provenance.framework"),
            data.params_error or "no configuration",
        )
    _check_dataset(entry, data, ec)
    _check_run_provenance(entry, data, table_kind, ec)
    _check_summary(entry, data, ec)
    return ec
