"""The catalogue of a results root: every stored run as one typed entry, its M2 points as trend series.

Usage::

    from alflow.results.catalog import Catalog
    catalog = Catalog("results/demo")                # reads every run once (or takes it from the disk cache)
    catalog.refresh()                                # later: re-reads only runs whose files changed
    for entry in catalog.entries():                  # newest first
        for key, point in entry.series():            # (framework, image, model, K, c, thinking, target) -> point
            ...
    catalog.history(key, before=entry.started, n=5)  # the last good runs of a series before a date

Runs are read through :mod:`alflow.results.store` and :mod:`alflow.results.view` (the one reader), so a
model, framework or point means here what it means in a report. A run directory that cannot be read (no
manifest, bad JSON, a manifest of another schema) is an entry with status ``unreadable`` and the reason in
:attr:`CatalogEntry.problem`; it never stops the catalogue. A run's ``regression.json`` is read tolerantly (its
verdicts), and when it is no regression report that is the entry's problem too.

Freshness: :meth:`Catalog.refresh` lists the root, compares each run's signature (the ``mtime`` and size of
each file its entry is built from, :data:`ENTRY_FILES`: ``os.stat`` locally, ``fs.info`` on an fsspec URL, re-read
where neither says) with what it read before, and re-reads only the changed ones; new and removed run
directories are picked up. With ``cache_dir`` the entries are also kept in one JSON file there (never in the
results root, which the catalogue only reads), so a cold start over thousands of runs reads only what changed.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import math
import os
import re
import threading
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import orjson

from alflow.errors import AlflowError, InvalidInputError
from alflow.metrics.point_metrics import POINT_METRICS
from alflow.results import catalog_cache as cached
from alflow.results import view
from alflow.results.catalog_dates import EARLIEST, possible_start, timestamp_of
from alflow.results.point_table import POINT_FLOWS
from alflow.results.regression import parse_report
from alflow.results.rows import M2Point
from alflow.results.series import SeriesKey, split_image, target_text
from alflow.results.store import MANIFEST, SUMMARY, StoredRun, open_run, storage_for
from alflow.util.fsutil import local_path_of, unsafe_file
from alflow.util.rows import dump_row, load_checked

log = logging.getLogger(__name__)

REGRESSION: Final = "regression.json"
"""The regression verdicts of a run's points (written beside the run by the regression check)."""
VERDICT_ORDER: Final = ("regressed", "moved", "improved", "unchanged", "not enough history", "not compared")
"""Regression outcomes, worst first: a run's verdict is the worst of its points' (``moved``: a reference entry's AL
left its interval, :mod:`alflow.results.regression`; ``not compared``: a point that could not be judged)."""
RUN_DIR: Final = re.compile(r"^(\d{8}T\d{6}Z)-[A-Za-z0-9][A-Za-z0-9_.-]*$")
"""A run directory's name: ``<YYYYmmddTHHMMSSZ>-<run id>`` (:class:`alflow.results.store.RunWriter`)."""
CACHE_VERSION: Final = 9
"""2: series keys hold the target AL and the scheme; 3: and the workload; 4: starts in UTC, impossible ones unreadable;
5: a regression.json that is no regression report is the entry's problem; 6: and no verdict of it; an identifier
longer than 1,024 characters is unreadable; 7: a reference report's verdicts are judged again from their ALs; 8: points
alflow never wrote (K=0, a negative throughput, a point twice: :mod:`alflow.results.point_table`) are unreadable; 9: entries redacted, signed by every file they are built from."""
READ_THREADS: Final = 4
"""Threads that read runs at once on a cold start (parquet decoding runs outside the GIL)."""
_GOOD_CLIENT: Final = "client-bound"


# --------------------------------------------------------------------------------------------
# Entries


@dataclass(frozen=True)
class CatalogEntry:
    """One stored run as the catalogue lists it."""

    rel: str
    """``<flow>/<run dir name>``, relative to the root (the URL path on the site)."""
    run_dir: str
    """Full path or URL (``open_run(run_dir)`` opens it)."""
    flow: str
    run_id: str
    started: str
    status: str
    """complete, failed, incomplete (:attr:`StoredRun.status`) or unreadable (see :attr:`problem`)."""
    outcome: str
    """passed, failed, partial, running, or unreadable."""
    flow_run_id: str | None = None
    finished: str | None = None
    model: str | None = None
    framework: str | None = None
    image: str | None = None
    image_tag: str | None = None
    served: str | None = None
    """What served a run without an image (``vllm 0.32.0 (process)``, :func:`alflow.results.view.served_by`)."""
    ks: tuple[int, ...] = ()
    thinking: str | None = None
    workload: str = ""  # what an M2 run measured under (view.workload), "" for other flows
    simulated: bool = False
    points: tuple[M2Point, ...] = ()
    verdict: str | None = None
    """The worst outcome in the run's ``regression.json`` (:data:`VERDICT_ORDER`), None without one."""
    point_verdicts: tuple[tuple[SeriesKey, str], ...] = ()
    """The outcome of each series ``regression.json`` judged."""
    files: tuple[str, ...] = ()
    """The files the manifest lists (the only ones the site serves)."""
    error: str | None = None
    """The manifest's error text (a failed run)."""
    problem: str | None = None
    """Why the run cannot be read (status ``unreadable``), None otherwise."""

    def series(self) -> list[tuple[SeriesKey, M2Point]]:
        """Each M2 point with the trend line it belongs to."""
        return list(self._series)

    @functools.cached_property
    def _series(self) -> tuple[tuple[SeriesKey, M2Point], ...]:
        repo = split_image(self.image)[0]
        return tuple(
            (
                SeriesKey(
                    framework=self.framework or p.framework,
                    image=repo,
                    model=self.model or "",
                    k=p.k,
                    concurrency=p.concurrency,
                    thinking=self.thinking or "",
                    target_al=target_text(p.target_al),
                    scheme=p.scheme or "",
                    workload=self.workload,
                ),
                p,
            )
            for p in self.points
        )

    @functools.cached_property
    def measured(self) -> str:
        """What the run measured, signed: its start, end and points. A copy under another run id signs the same."""
        points = [p.model_dump_json(exclude={"framework"}) for p in self.points]
        signed = orjson.dumps([self.started, self.finished, points])
        return hashlib.sha256(signed).hexdigest()

    def verdict_of(self, key: SeriesKey) -> str | None:
        """The regression outcome ``regression.json`` gave the series ``key`` (None: not judged)."""
        return next((v for k, v in self.point_verdicts if k == key), None)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the disk cache and the site's API)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["ks"] = list(self.ks)
        out["points"] = [p.model_dump() for p in self.points]
        out["point_verdicts"] = [{"series": dump_row(k), "outcome": v} for k, v in self.point_verdicts]
        out["files"] = list(self.files)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CatalogEntry:
        """The entry :meth:`to_dict` wrote (raises ``AlflowError``, ``KeyError`` or ``TypeError`` on bad data)."""
        values = {f.name: data[f.name] for f in fields(cls)}
        values["ks"] = tuple(int(k) for k in data["ks"])
        values["points"] = tuple(M2Point.model_validate(p) for p in data["points"])
        values["point_verdicts"] = tuple(
            (load_checked(SeriesKey, v["series"], "series"), str(v["outcome"]))
            for v in data["point_verdicts"]
        )
        values["files"] = tuple(str(f) for f in data["files"])
        return cls(**values)


def _stamp_iso(name: str) -> str:
    """The start time a run directory's name carries, ISO 8601 UTC (``""`` when it has none)."""
    m = RUN_DIR.match(name)
    if not m:
        return ""
    try:
        return datetime.strptime(m.group(1), "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC).isoformat()
    except ValueError:  # a name of the right shape with an impossible date (month 13, hour 25)
        return ""


def unreadable_entry(rel: str, run_dir: str, problem: str) -> CatalogEntry:
    """The entry of a run directory that cannot be read: where it is, when its name says it started, why."""
    flow, _, name = rel.partition("/")
    return CatalogEntry(
        rel=rel, run_dir=run_dir, flow=flow, run_id=name.partition("-")[2], started=_stamp_iso(name),
        status="unreadable", outcome="unreadable", problem=" ".join(problem.split()),
    )  # fmt: skip


def _ks(run: StoredRun) -> tuple[int, ...]:
    k = view.config_value(run, "k")
    ks = view.config_value(run, "ks")
    raw = [k] if k is not None else (ks if isinstance(ks, list) else [])
    return tuple(sorted({int(v) for v in raw if isinstance(v, int) and not isinstance(v, bool)}))


def _thinking(run: StoredRun) -> str | None:
    value = view.config_value(run, "thinking")
    if isinstance(value, list):
        return ",".join(str(v) for v in value) or None
    return None if value is None else str(value)


def outcome_of(run: StoredRun, summary: Mapping[str, Any], points: Iterable[M2Point]) -> str:
    """passed, failed, partial or running: the run's status, then its summary's verdicts and its points."""
    if run.status == "incomplete":
        return "running"
    if run.status == "failed" or summary.get("passed") is False:
        return "failed"
    pts = list(points)
    if any(not p.valid and not p.partial for p in pts):
        return "failed"
    if summary.get("partial") is True or any(p.partial for p in pts):
        return "partial"
    return "passed"


def read_verdicts(data: object) -> tuple[str | None, tuple[tuple[SeriesKey, str], ...]]:
    """A ``regression.json``'s worst outcome and the outcome of each series it names (tolerant: bad rows are skipped).

    A row without a series (a reference entry's verdict) counts for the worst only; a row whose series is not a
    :class:`SeriesKey` is skipped; a ``series`` without ``concurrency`` takes the row's.
    """
    rows = data.get("points") if isinstance(data, Mapping) else None
    outcomes: list[str] = []
    found: list[tuple[SeriesKey, str]] = []
    for row in rows if isinstance(rows, list) else []:
        if not isinstance(row, Mapping) or row.get("outcome") not in VERDICT_ORDER:
            continue
        series = row.get("series")
        if not series:  # a verdict of no series (a reference entry's): the run's verdict only
            outcomes.append(str(row["outcome"]))
            continue
        if isinstance(series, Mapping) and "concurrency" not in series:
            series = {**series, "concurrency": row.get("concurrency")}
        try:
            key = load_checked(SeriesKey, series, "series")
        except InvalidInputError:
            continue
        outcomes.append(str(row["outcome"]))
        found.append((key, str(row["outcome"])))
    worst = min((VERDICT_ORDER.index(v) for v in outcomes), default=None)
    return (None if worst is None else VERDICT_ORDER[worst]), tuple(found)


def _regression(run: StoredRun) -> tuple[object, str | None]:
    """The run's ``regression.json`` as parsed JSON (None when it has none or it is not JSON), and what is wrong with it.

    A report ``alflow report`` refuses (not JSON, not a regression report, a verdict its numbers do not make: the
    field and why) gives no verdict: its problem is the entry's, shown on the site beside the run.
    """
    path = run.storage.join(run.dir, REGRESSION)
    try:
        data = orjson.loads(run.storage.read_bytes(path))
    except FileNotFoundError:
        return None, None
    except (OSError, orjson.JSONDecodeError) as exc:
        return None, f"{REGRESSION}: not read ({' '.join(str(exc).split())[:200]})"
    try:
        parse_report(data, REGRESSION)
    except (
        AlflowError
    ) as exc:  # no verdict of a report the check itself would not have written (badges, trends)
        return None, " ".join(str(exc).split())[:300]
    return data, None


ENTRY_FILES: Final = (MANIFEST, SUMMARY, REGRESSION, "spec_stats.parquet")
"""The files of a run the catalogue reads: its entry is built from these alone, and each is in its signature."""


def read_entry(rel: str, run_dir: str) -> CatalogEntry:
    """The catalogue entry of one run directory; never raises: an ``unreadable`` entry with the reason instead.

    A manifest nested 100,000 deep, a number beyond 64 bits, bytes that are not JSON: that run is unreadable, never
    the catalogue. On a local root a run whose files the catalogue reads are not regular files inside the root (a
    symlink out of it, a FIFO, a device) is not read at all (it would leave the root or block).
    """
    local = local_path_of(run_dir)
    why: str | None = None
    if local is not None:
        if Path(local).is_symlink():
            why = f"{rel}: a symlink, not a folder of the results root: not followed"
        elif "\\x" in rel and not os.path.lexists(local):  # the lister's text of a byte name
            why = f"{rel}: its folder name is not UTF-8 text (bytes shown as \\xNN)"
        elif (odd := unsafe_file(str(Path(local).parents[1]), local, ENTRY_FILES)) is not None:
            why = f"{rel}/{odd}: not a regular file inside the results root"
    if why is not None:
        return redact_entry(unreadable_entry(rel, run_dir, why))
    try:
        entry = _read_entry(rel, run_dir)
        listed = unsafe_file(str(Path(local).parents[1]), local, entry.files) if local is not None else None
        if listed is None:
            return redact_entry(entry)
        why = f"{rel}/{listed}: not a regular file inside the results root (its page is not rendered)"
        return redact_entry(replace(entry, problem=why))
    except AlflowError as exc:  # the reason names the run by its rel: the server's own path stays private
        why = str(exc)
    except OSError as exc:
        why = f"{rel}: {exc.strerror or exc}"
    except Exception as exc:  # anything else a hostile folder provokes (RecursionError...): that run only
        why = f"{rel}: cannot be read ({type(exc).__name__}: {' '.join(str(exc).split())[:300]})"
    return redact_entry(unreadable_entry(rel, run_dir, why.replace(run_dir, rel)))


_WHERE: Final = frozenset({"rel", "run_dir"})
"""An entry's fields that say where the run is (to open it): never redacted, never shown (the site names a run by
its ``rel``, a folder name of :data:`RUN_DIR`'s characters, and puts it through redaction on the way out)."""


def redact_entry(entry: CatalogEntry) -> CatalogEntry:
    """``entry`` with every text it holds (its error, model, problem, points, series...) through the site's redaction.

    Done as an entry is read, so the catalogue holds, the disk cache stores and the pages show the same redacted
    texts, and a series key means the same from memory, from the cache and from :func:`read_entry` (the regression
    check). An entry with no hint of a credential is returned as it is.
    """
    data = cached.redacted_texts(entry.to_dict(), keep=_WHERE) if cached.hinted(entry, keep=_WHERE) else None
    return entry if data is None else CatalogEntry.from_dict(data)


def _read_entry(rel: str, run_dir: str) -> CatalogEntry:
    run = open_run(run_dir)
    summary = view.summary(run)
    # points alflow never wrote raise (the run is unreadable); a sweep's are its M2 children's, trended there
    points = tuple(view.m2_points(run)) if run.manifest.flow in POINT_FLOWS else ()
    points = points if run.manifest.flow == "m2" else ()
    img, _digest = view.image(run)
    regression, problem = _regression(run)
    verdict, per_series = read_verdicts(regression)
    return CatalogEntry(
        rel=rel,
        run_dir=run_dir,
        flow=run.manifest.flow,
        run_id=run.manifest.run_id,
        flow_run_id=run.manifest.provenance.flow_run_id,
        started=possible_start(rel, run.manifest.started, run.manifest.finished),
        finished=run.manifest.finished,
        status=run.status,
        outcome=outcome_of(run, summary, points),
        model=view.model_id(run),
        framework=view.framework(run),
        image=img,
        image_tag=split_image(img)[1] or None,
        served=view.served_by(run),
        ks=_ks(run),
        thinking=_thinking(run),
        workload=view.workload(run) if points else "",
        simulated=run.manifest.simulated,
        points=points,
        verdict=verdict,
        point_verdicts=per_series,
        files=tuple(sorted(run.manifest.files)),
        error=run.manifest.error,
        problem=None if problem is None else f"{rel}/{problem}",
    )


# --------------------------------------------------------------------------------------------
# Listing and signatures


Signature = tuple[object, ...] | None
"""What says a run changed: (mtime, size) of each file its entry is built from (:data:`ENTRY_FILES`); None: unknown."""


class _Lister:
    """Lists run directories under a root and signs them, locally (``os.scandir``) or through fsspec."""

    def __init__(self, root: str) -> None:
        local = local_path_of(root)
        self.root = root if local is None else local
        self.storage = storage_for(self.root)
        self.local = local is not None

    def runs(self) -> list[tuple[str, str]]:
        """(rel, full path) of every directory ``<flow>/<run dir name>`` under the root."""
        out: list[tuple[str, str]] = []
        if self.local:
            for flow in _scan_dirs(self.root):
                for name in _scan_dirs(f"{self.root}{os.sep}{flow}"):
                    rel = f"{flow}/{name}"
                    if RUN_DIR.match(text_of(name)) and text_of(rel) == rel:
                        out.append((rel, f"{self.root}{os.sep}{flow}{os.sep}{name}"))
                    elif _STAMPED.match(text_of(name)):  # bytes no page can show: unreadable (read_entry)
                        out.append((text_of(rel), f"{self.root}{os.sep}{text_of(rel)}"))
                for name in _scan_dirs(f"{self.root}{os.sep}{flow}", links=True):  # listed, never followed
                    if _STAMPED.match(text_of(name)):
                        out.append((text_of(f"{flow}/{name}"), f"{self.root}{os.sep}{flow}{os.sep}{name}"))
            return out
        for flow_dir in self.storage.list_dirs(self.root):
            flow = flow_dir.rstrip("/").rsplit("/", 1)[-1]
            for run_dir in self.storage.list_dirs(flow_dir):
                name = run_dir.rstrip("/").rsplit("/", 1)[-1]
                if RUN_DIR.match(name):
                    out.append((f"{flow}/{name}", run_dir))
        return out

    def signature(self, run_dir: str) -> Signature:
        """The run's signature, None when the storage cannot say (the run is then read again)."""
        if self.local:
            return tuple(_stat(f"{run_dir}{os.sep}{name}") for name in ENTRY_FILES)
        fs = getattr(self.storage, "fs", None)
        if fs is None or not hasattr(fs, "info"):
            return None
        parts: list[object] = []
        for name in ENTRY_FILES:
            try:
                info = fs.info(self.storage.join(run_dir, name))
            except (OSError, ValueError):
                parts.append(None)
                continue
            stamp = next(
                (info[k] for k in ("mtime", "LastModified", "updated", "created", "ETag") if k in info), None
            )
            if stamp is None:
                return None
            parts.append((str(stamp), info.get("size")))
        return tuple(parts)


_STAMPED: Final = re.compile(r"^\d{8}T\d{6}Z-")


def text_of(name: str) -> str:
    r"""A folder name as text: bytes that are not UTF-8 (read as surrogates) written as ``\xNN``."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return name


def _scan_dirs(path: str, *, links: bool = False) -> list[str]:
    """The folders in ``path`` (``links``: the symlinks instead, which are never followed)."""
    try:
        with os.scandir(path) as it:
            return sorted(
                e.name for e in it if (e.is_symlink() if links else e.is_dir(follow_symlinks=False))
            )
    except OSError:
        return []


def _stat(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)  # noqa: PTH116 - thousands of stats per refresh; no Path objects
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size)


# --------------------------------------------------------------------------------------------
# The catalogue


@dataclass(frozen=True)
class _State:
    """One consistent view of the root (swapped whole by :meth:`Catalog.refresh`)."""

    entries: tuple[CatalogEntry, ...] = ()
    by_rel: Mapping[str, CatalogEntry] = field(default_factory=dict)
    signatures: Mapping[str, Signature] = field(default_factory=dict)
    points: Mapping[SeriesKey, tuple[tuple[float, CatalogEntry, M2Point], ...]] = field(default_factory=dict)
    """Every point of each series with its run's start (epoch seconds), newest first."""


def _good(entry: CatalogEntry, point: M2Point) -> bool:
    """A point history may use: run complete, point valid, not partial nor client-bound, its AL in [1, K+1].

    And possible: a start after :data:`EARLIEST` and no later than its end, some request completed.
    """
    al = point.achieved_al  # a "valid" point of AL 99 or NaN is damaged, not history
    if al is not None and not (math.isfinite(al) and 1.0 <= al <= point.k + 1):
        return False
    started = timestamp_of(entry.started)
    if started < EARLIEST or (entry.finished is not None and timestamp_of(entry.finished) < started):
        return False
    if point.completed is not None and point.completed <= 0:
        return False
    bound = point.client_verdict == _GOOD_CLIENT
    return entry.status == "complete" and point.valid and not point.partial and not bound


def _build_state(by_rel: dict[str, CatalogEntry], signatures: dict[str, Signature]) -> _State:
    stamps = {rel: timestamp_of(e.started) for rel, e in by_rel.items()}
    ordered = tuple(sorted(by_rel.values(), key=lambda e: (stamps[e.rel], e.rel), reverse=True))
    points: dict[SeriesKey, list[tuple[float, CatalogEntry, M2Point]]] = {}
    for entry in ordered:  # newest first, so every series' list is too
        for key, point in entry.series():
            points.setdefault(key, []).append((stamps[entry.rel], entry, point))
    return _State(ordered, by_rel, signatures, {k: tuple(v) for k, v in points.items()})


_CACHE_FORMAT: Final = (
    f"{CACHE_VERSION}:"
    + hashlib.sha256(
        " ".join(
            [
                *(f.name for cls in (CatalogEntry, SeriesKey) for f in fields(cls)),
                *M2Point.model_fields,
                *(m.name for m in POINT_METRICS),
            ]
        ).encode()
    ).hexdigest()[:12]
)
"""The cache's format: its version and the fields of what it stores (a cache of other fields is not used)."""


class Catalog:
    """Every run under a results root (a folder or an fsspec URL), kept fresh by :meth:`refresh`."""

    def __init__(
        self, root: str, *, min_refresh_s: float = 2.0, cache_dir: str | os.PathLike[str] | None = None
    ) -> None:
        local = local_path_of(root)
        self.root = str(root) if local is None else local  # file:// and local:// roots are local folders
        self.min_refresh_s = min_refresh_s
        self._lister = _Lister(self.root)
        self._cache_file = self._cache_path(cache_dir)
        self._lock = threading.Lock()
        self._state = _State()
        self._rows: dict[str, Any] | None = None
        """The disk cache's rows (rel -> stored entry and signature), once loaded."""
        self._last = float("-inf")
        self.generation = 0
        """Counts the changes the catalogue saw: derived data (a page's choices) may be cached by it."""
        self.reads = 0
        """Run directories read so far (not taken from memory or the disk cache): what a refresh cost."""
        self.refresh(force=True)

    def _cache_path(self, cache_dir: str | os.PathLike[str] | None) -> Path | None:
        if cache_dir is None:
            return None
        root_id = self.root if not self._lister.local else str(Path(self.root).resolve())
        return cached.cache_file(cache_dir, root_id)

    def refresh(self, *, force: bool = False) -> None:
        """Re-read runs whose signature changed, add new ones, drop removed ones (at most every ``min_refresh_s``)."""
        with self._lock:
            now = time.monotonic()
            if not force and now - self._last < self.min_refresh_s:
                return
            self._last = now
            old = self._state
            known, known_sigs = dict(old.by_rel), dict(old.signatures)
            if self._rows is None:  # the first refresh starts from the disk cache
                known, known_sigs, self._rows = self._load_cache()
            listed = [(rel, run_dir, self._lister.signature(run_dir)) for rel, run_dir in self._lister.runs()]
            stale = [
                (rel, run_dir)
                for rel, run_dir, sig in listed
                if sig is None or rel not in known or known_sigs.get(rel) != sig
            ]
            fresh = _read_all(stale)
            self.reads += len(fresh)
            by_rel = {rel: fresh[rel] if rel in fresh else _placed(known[rel], d) for rel, d, _ in listed}
            sigs = {rel: sig for rel, _, sig in listed}
            if fresh or by_rel.keys() != old.by_rel.keys() or not old.by_rel:
                self._state = _build_state(by_rel, sigs)
                self.generation += 1
            if fresh or by_rel.keys() != known.keys():
                self._save_cache(by_rel, sigs, fresh)

    def entries(self) -> tuple[CatalogEntry, ...]:
        """Every run, newest first (by start time, then by directory)."""
        return self._state.entries

    def get(self, rel: str) -> CatalogEntry | None:
        """The run at ``<flow>/<run dir name>``, None when there is none."""
        return self._state.by_rel.get(rel)

    def series_keys(self) -> list[SeriesKey]:
        """Every trend line (series with at least one point), sorted."""
        return sorted(self._state.points)

    def history(
        self, key: SeriesKey, *, before: str, n: int, exclude_rel: str | None = None
    ) -> list[tuple[CatalogEntry, M2Point]]:
        """The good points of the last ``n`` good runs of ``key`` started before ``before`` (ISO), newest first.

        Good: the run complete, the point valid, not partial and not client-bound. A run with several repeats of
        the point gives each of them (one run, several pairs); ``exclude_rel`` leaves one run out (the run judged).
        Copies of a run (its run id in several folders, or its measurement under another run id: the same start,
        end and points) count once, and not at all when they copy the judged run.
        """
        limit = timestamp_of(before)
        if not limit and not before.startswith("1970-01-01"):
            raise InvalidInputError(
                f"before {before!r:.60}: not an ISO 8601 time (e.g. 2026-01-31T00:00:00+00:00)"
            )
        out: list[tuple[CatalogEntry, M2Point]] = []
        runs: list[str] = []
        judged = self.get(exclude_rel) if exclude_rel is not None else None
        # run id, measurement -> the folder standing for it
        ids = {} if judged is None else {judged.run_id: judged.rel, judged.measured: judged.rel}
        for stamp, entry, point in self._state.points.get(key, ()):
            skip = stamp >= limit or entry.rel == exclude_rel or not _good(entry, point)
            if skip or any(ids.setdefault(i, entry.rel) != entry.rel for i in (entry.run_id, entry.measured)):
                continue
            if entry.rel not in runs:
                if len(runs) >= n:
                    break
                runs.append(entry.rel)
            out.append((entry, point))
        return out

    def all_points(self, key: SeriesKey) -> list[tuple[CatalogEntry, M2Point]]:
        """Every point of ``key`` in the root (good or not), oldest first: a trend line as drawn."""
        return [(e, p) for _, e, p in reversed(self._state.points.get(key, ()))]

    # -- the disk cache ---------------------------------------------------------------------

    def _load_cache(self) -> tuple[dict[str, CatalogEntry], dict[str, Signature], dict[str, Any]]:
        """Entries, signatures and stored rows of the disk cache (all empty without a usable one)."""
        rows = cached.load_rows(self._cache_file, _CACHE_FORMAT, self.root)
        if not rows:
            return {}, {}, {}
        try:
            entries = {rel: CatalogEntry.from_dict(row["entry"]) for rel, row in rows.items()}
            sigs = {rel: cached.sig_from_json(row["sig"]) for rel, row in rows.items()}
        except (ValueError, AlflowError, KeyError, TypeError, AttributeError) as exc:
            log.warning("catalogue cache %s not used: %s", self._cache_file, exc)
            return {}, {}, {}
        return entries, sigs, rows

    def _save_cache(
        self,
        by_rel: Mapping[str, CatalogEntry],
        sigs: Mapping[str, Signature],
        fresh: Mapping[str, CatalogEntry],
    ) -> None:
        """Write the cache: the rows of runs read now are serialized, the others kept as they were stored."""
        if self._cache_file is None:
            return
        rows = self._rows if self._rows is not None else {}
        for rel in list(rows):
            if rel not in by_rel:
                del rows[rel]
        for rel, entry in fresh.items():
            # redacted as read (redact_entry); no run_dir: the listing's (a URL root's may hold credentials)
            rows[rel] = {"sig": sigs.get(rel), "entry": {**entry.to_dict(), "run_dir": ""}}
        cached.save_rows(self._cache_file, _CACHE_FORMAT, self.root, rows, list(fresh))


def _placed(entry: CatalogEntry, run_dir: str) -> CatalogEntry:
    """A known entry at the folder listed now (one from the disk cache has no ``run_dir``)."""
    return entry if entry.run_dir == run_dir else replace(entry, run_dir=run_dir)


def _read_all(todo: list[tuple[str, str]]) -> dict[str, CatalogEntry]:
    """:func:`read_entry` of each (rel, run dir); many at once in a few threads (parquet reads release the GIL)."""
    if len(todo) < 16:
        return {rel: read_entry(rel, run_dir) for rel, run_dir in todo}
    with ThreadPoolExecutor(max_workers=READ_THREADS, thread_name_prefix="alflow-catalog") as pool:
        return dict(zip((rel for rel, _ in todo), pool.map(lambda t: read_entry(*t), todo), strict=True))
