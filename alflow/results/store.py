"""The run store: one directory per run, with a manifest, parquet tables and a summary.

Layout (``root`` is a local path or an fsspec URL such as ``s3://bucket/alflow``)::

    <root>/<flow>/<YYYYmmddTHHMMSSZ>-<run id>/
        manifest.json          config, provenance, status (running | complete | failed), files
        requests.parquet       client records (one row per request)
        server_metrics.parquet scrape time series
        spec_stats.parquet     spec-decode statistics per measured point
        summary.json           the run's headline numbers

Every file carries the schema version (a ``schema_version`` key in JSON, parquet key-value
metadata ``alflow.schema_version``). Nothing stored carries credentials: every URL in the JSON
files, in text files and in the string columns of tables goes through :func:`alflow.util.redact.redact_url`
(userinfo and token-like query parameters become ``***``) on its way to storage. Local writes are atomic (temporary file in the same folder,
then rename); object stores write each object in one PUT. The manifest is written first with
status ``running`` and rewritten after every file, so a run killed mid-way leaves a readable
store whose manifest still says ``running``: readers report it as incomplete and keep what it had.
"""

from __future__ import annotations

import errno
import io
import json
import os
import re
import signal
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO, Final, Protocol, Self
from uuid import uuid4

import fsspec
import polars as pl
from pydantic import ValidationError

from alflow.errors import AlflowError, InvalidInputError
from alflow.results.manifest import SCHEMA_VERSION, FileEntry, RunManifest, RunProvenance, Status
from alflow.results.point_table import POINT_FLOWS, checked_point_table, dtype_fits
from alflow.results.rows import M2Point
from alflow.util.fsutil import (
    STORE_URLS,
    atomic_write_bytes,
    check_writable_dir,
    foreign_url,
    local_path_of,
    open_regular,
    read_at_most,
)
from alflow.util.jsonutil import dumps_bytes
from alflow.util.names import MAX_IDENTIFIER, shown
from alflow.util.pathnames import path_name_problem
from alflow.util.redact import redact_config, redact_data, redact_url, redact_urls_in_text

PARQUET_VERSION_KEY: Final = "alflow.schema_version"
MANIFEST: Final = "manifest.json"
SUMMARY: Final = "summary.json"
TABLES: Final = ("requests", "server_metrics", "spec_stats")
MAX_JSON_BYTES: Final = 64 << 20
"""The largest manifest, summary or regression file read (one of thousands of points is a few megabytes); other JSON
(M0's scrapes, which grow with its grid) is read up to :data:`MAX_READ_BYTES`."""
SMALL_JSON: Final = frozenset({"manifest.json", "summary.json", "regression.json"})
MAX_READ_BYTES: Final = 1 << 30
"""The largest file of a run read whole (1 GiB: a manifest or summary is kilobytes, a point's records tens of MB)."""
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class StoreError(AlflowError):
    """A run directory that cannot be written or read (the message names the path)."""


# --------------------------------------------------------------------------------------------
# Storage backends


class Storage(Protocol):
    """Where bytes go: a local folder (atomic rename) or an fsspec URL (one PUT per object)."""

    def write_bytes(self, path: str, data: bytes) -> None:
        """Write ``data`` to ``path`` so that readers see the old or the new content, never half."""

    def read_bytes(self, path: str) -> bytes: ...

    def open_read(self, path: str) -> BinaryIO:
        """Open an object for reading in parts (the caller closes it)."""

    def exists(self, path: str) -> bool: ...

    def list_dirs(self, path: str) -> list[str]:
        """Immediate sub-directories of ``path`` (full paths), empty when it does not exist."""

    def list_files(self, path: str) -> list[str]:
        """Files directly in ``path`` (full paths; locally plain files, no symlink), empty when it does not exist."""

    def join(self, *parts: str) -> str: ...


class LocalStorage:
    """A local folder; writes go to a temporary file in the same folder, then ``os.replace``."""

    def write_bytes(self, path: str, data: bytes) -> None:
        atomic_write_bytes(path, data)

    def read_bytes(self, path: str) -> bytes:
        with self.open_read(path) as f:
            if os.fstat(f.fileno()).st_size > MAX_READ_BYTES:
                raise OSError(errno.EFBIG, f"larger than the {MAX_READ_BYTES:,} bytes read whole", path)
            return f.read()

    def open_read(self, path: str) -> BinaryIO:
        """``path`` opened for reading when it is a regular file, else an ``OSError`` (:func:`open_regular`)."""
        return open_regular(path)

    def exists(self, path: str) -> bool:
        return Path(path).exists()

    def list_dirs(self, path: str) -> list[str]:
        return _children(path, Path.is_dir)

    def list_files(self, path: str) -> list[str]:
        return _children(path, lambda c: c.is_file() and not c.is_symlink())

    def join(self, *parts: str) -> str:
        return str(Path(*parts))


def _children(path: str, keep: Callable[[Path], bool]) -> list[str]:
    """The entries of the folder ``path`` that ``keep`` keeps, sorted; none when it is not a folder."""
    p = Path(path)
    try:  # a folder that cannot be listed (permissions, /proc's) holds no runs alflow can read
        return sorted(str(c) for c in p.iterdir() if keep(c)) if p.is_dir() else []
    except OSError:
        return []


class FsspecStorage:
    """An fsspec URL (``s3://``, ``gs://``, ``memory://``); each object is written in one PUT."""

    def __init__(self, url: str) -> None:
        try:
            self.fs, _ = fsspec.core.url_to_fs(url)
        except Exception as exc:  # a back-end connects as it is made (ftp, sftp): any of its errors, one line
            why = redact_urls_in_text(" ".join(str(exc).split()) or type(exc).__name__)
            raise StoreError(f"cannot open results root {redact_urls_in_text(url)!r}: {why}") from None
        self.protocol = url.split("://", 1)[0]

    def _url(self, path: str) -> str:
        return path if "://" in path else f"{self.protocol}://{path}"

    def write_bytes(self, path: str, data: bytes) -> None:
        self.fs.pipe_file(self._url(path), data)

    def read_bytes(self, path: str) -> bytes:
        data = self.fs.cat_file(self._url(path))
        return bytes(data)

    def open_read(self, path: str) -> BinaryIO:
        f: BinaryIO = self.fs.open(self._url(path), "rb")
        return f

    def exists(self, path: str) -> bool:
        return bool(self.fs.exists(self._url(path)))

    def _listed(self, path: str, kind: str) -> list[str]:
        """The entries of ``path`` whose fsspec type is ``kind`` (``directory``, ``file``), as full URLs."""
        url = self._url(path)
        if not self.fs.exists(url):
            return []
        entries = self.fs.ls(url, detail=True)
        return sorted(self._url(str(e["name"])) for e in entries if e.get("type") == kind)

    def list_dirs(self, path: str) -> list[str]:
        return self._listed(path, "directory")

    def list_files(self, path: str) -> list[str]:
        return self._listed(path, "file")

    def join(self, *parts: str) -> str:
        return "/".join(p.rstrip("/") for p in parts)


def chained_root_problem(root: str) -> str | None:
    """Why ``root`` is no results root when it chains file systems (fsspec's ``simplecache::file://...``).

    There a run folder named with ``#`` or ``?`` vanished without a word. None: not chained.
    """
    if "::" in root and local_path_of(root) is None:
        return (
            "a chained URL (a::b) is not a results root: give the folder, or one storage URL (s3://, gs://)"
        )
    return None


def check_results_root(root: str, *, name: str) -> str:
    """``root`` when it is a results root: a folder (its local path is returned) or a URL (returned as given).

    Else one line starting with ``name`` (the option or argument, e.g. ``ROOT``, ``--root``), the root shown with any
    credentials redacted: blank, chained (:func:`chained_root_problem`), a URL of no object store (``http://``,
    ``zip://``: :data:`~alflow.util.fsutil.STORE_SCHEMES`), or a local path that is not a folder (missing, a file,
    under a file, unreadable). ``alflow results serve`` and ``alflow report compare --root`` say the same.
    """
    if not root.strip():  # "" would be the working folder, as no one meant
        raise InvalidInputError(
            f"{name} {shown(root)} is empty; give a results root (the folder runs are stored in) or a URL"
        )
    chained = chained_root_problem(root)
    if chained:
        raise InvalidInputError(f"{name} {shown(redact_url(root))}: {chained}")
    if foreign_url(root):
        raise InvalidInputError(
            f"{name} {shown(redact_url(root))}: a URL of this scheme is not a results root; "
            f"allowed: a results root folder or an {STORE_URLS} URL"
        )
    local = local_path_of(root)
    if local is None:
        return root
    problem = path_name_problem(local)
    if problem is not None:
        raise InvalidInputError(f"{name} {shown(redact_url(root))} {problem}")
    path = Path(local)
    try:
        is_dir = path.is_dir()
    except OSError as exc:  # a name too long, a loop of links
        raise InvalidInputError(f"{name} {shown(redact_url(root))}: {exc.strerror or exc}") from None
    if not is_dir:
        raise InvalidInputError(
            f"{name} {shown(redact_url(root))}: not a folder; give a results root (the folder runs are stored in)"
        )
    return str(path)


def storage_for(root: str | os.PathLike[str]) -> Storage:
    """The storage backend for a root: local for a path, ``file://`` or ``local://``, else fsspec."""
    return LocalStorage() if local_path_of(root) is not None else FsspecStorage(os.fspath(root))


def _root_text(root: str | os.PathLike[str]) -> str:
    text = os.fspath(root)
    local = local_path_of(text)
    return text if local is None else local


# --------------------------------------------------------------------------------------------
# Writing a run


def _check_name(kind: str, value: str) -> str:
    if not _NAME.match(value):
        raise InvalidInputError(
            f"{kind} {value!r} is not a valid name: use letters, digits, '.', '_' or '-' (not starting with them)"
        )
    return value


def _now() -> datetime:
    return datetime.now(UTC)


def _json_bytes(data: Mapping[str, Any]) -> bytes:
    """Strict JSON of ``data`` with every URL's credentials stripped (:func:`alflow.util.redact.redact_data`).

    Non-finite numbers become null with a ``<field>_note`` (see :mod:`alflow.util.jsonutil`).
    """
    return dumps_bytes(redact_data(json.loads(json.dumps(data, default=str))))


def _plain(data: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` as plain JSON values (paths, dates and enums become strings)."""
    return dict(json.loads(json.dumps(data, default=str)))


def _provenance(data: Mapping[str, Any]) -> RunProvenance:
    try:
        return RunProvenance.model_validate(_plain(data))
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise StoreError(f"run provenance field {where}: {err['msg']} (got {err.get('input')!r})") from None


def _redact_frame(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with credentials stripped from URLs in its string columns (untouched when it has none)."""
    fixes = [
        pl.col(name).map_elements(redact_urls_in_text, return_dtype=pl.String)
        for name, dtype in frame.schema.items()
        if dtype == pl.String and bool(frame[name].str.contains("://", literal=True).any())
    ]
    return frame.with_columns(fixes) if fixes else frame


class RunWriter:
    """Writes one run's directory; use as a context manager so a failure marks the run failed."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        flow: str,
        *,
        run_id: str | None = None,
        config: Mapping[str, Any] | None = None,
        provenance: Mapping[str, Any] | None = None,
        simulated: bool = False,
        started: datetime | None = None,
    ) -> None:
        self.storage = storage_for(root)
        self.flow = _check_name("flow", flow)
        self.run_id = _check_name("run id", run_id or uuid4().hex[:12])
        self.started = started or _now()
        stamp = self.started.strftime("%Y%m%dT%H%M%SZ")
        self.dir = self.storage.join(_root_text(root), self.flow, f"{stamp}-{self.run_id}")
        if isinstance(self.storage, LocalStorage):  # before anything is measured: one line naming the root
            check_writable_dir(_root_text(root), what="results_root")
        if self.storage.exists(self.storage.join(self.dir, MANIFEST)):
            raise StoreError(f"run directory {self.dir} already holds a manifest; refusing to overwrite it")
        self.manifest = RunManifest(
            flow=self.flow,
            run_id=self.run_id,
            simulated=simulated,
            started=self.started.isoformat(),
            config=_plain(config or {}),
            provenance=_provenance(provenance or {}),
        )
        self._write_manifest()

    def _path(self, name: str) -> str:
        return self.storage.join(self.dir, name)

    def _write_manifest(self) -> None:
        self.storage.write_bytes(self._path(MANIFEST), _json_bytes(self.manifest.model_dump()))

    def update_provenance(self, **fields: Any) -> None:
        """Add provenance fields (e.g. the server's handle once it is up); known fields are validated."""
        self.manifest.provenance = _provenance({**self.manifest.provenance.model_dump(), **fields})
        self._write_manifest()

    def _put(self, filename: str, data: bytes, rows: int | None = None) -> str:
        """Write ``filename`` (atomic), list it in the manifest and rewrite the manifest."""
        self.storage.write_bytes(self._path(filename), data)
        self.manifest.files[filename] = FileEntry(rows=rows, written=_now().isoformat())
        self._write_manifest()
        return self._path(filename)

    def write_table(self, name: str, frame: pl.DataFrame) -> str:
        """Write ``<name>.parquet`` (atomic) with the schema version in its metadata."""
        _check_name("table", name)
        buf = io.BytesIO()
        frame = _redact_frame(frame)
        frame.write_parquet(buf, metadata={PARQUET_VERSION_KEY: str(SCHEMA_VERSION)})
        return self._put(f"{name}.parquet", buf.getvalue(), frame.height)

    def write_json(self, name: str, data: Mapping[str, Any]) -> str:
        """Write ``<name>.json`` (atomic) with a ``schema_version`` key."""
        _check_name("file", name)
        return self._put(f"{name}.json", _json_bytes({"schema_version": SCHEMA_VERSION, **data}))

    def write_text(self, filename: str, text: str) -> str:
        """Write a text file (e.g. ``report.md``) atomically and list it in the manifest."""
        _check_name("file", filename)
        return self._put(filename, redact_urls_in_text(text).encode())

    def write_summary(self, data: Mapping[str, Any]) -> str:
        """Write ``summary.json``."""
        return self.write_json("summary", data)

    def finish(self, status: Status = "complete", error: str | None = None) -> None:
        """Mark the run complete or failed (with the error text)."""
        self.manifest.status = status
        self.manifest.finished = _now().isoformat()
        self.manifest.error = error
        self._write_manifest()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.manifest.status != "running":
            return
        if exc is None:
            self.finish("complete")
        else:
            self.finish("failed", error_text(exc))


def error_text(exc: BaseException) -> str:
    """``Type: message`` of the error that failed a run.

    A signal's (Prefect's ``TerminationSignal(signal=15)``, Ctrl-C), which carries no message, says what stopped it.
    """
    name = type(exc).__name__
    number = getattr(exc, "signal", None)
    if isinstance(number, int) and not str(exc).strip():
        try:
            return f"{name}: the run was stopped by {signal.Signals(number).name} (signal {number})"
        except ValueError:
            return f"{name}: the run was stopped by signal {number}"
    return f"{name}: {str(exc).strip() or _QUIET.get(name, '(no message)')}"


_QUIET: Final = {
    "KeyboardInterrupt": "the run was stopped (Ctrl-C, SIGINT)",
    "CancelledError": "the run was cancelled",
}
"""What a failed run's error says for an exception that carries no message of its own."""


# --------------------------------------------------------------------------------------------
# Reading runs


@dataclass(frozen=True)
class StoredRun:
    """A run directory as read back: its manifest and where its files are."""

    dir: str
    manifest: RunManifest
    storage: Storage
    _json: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False, compare=False)
    """Each JSON file read once (a report asked summary.json again for every point: quadratic in the points)."""

    @property
    def status(self) -> str:
        """complete, failed, or incomplete (a manifest still saying running: the run was killed)."""
        status = self.manifest.status
        return "incomplete" if status == "running" else status

    @property
    def complete(self) -> bool:
        """True when the run finished normally."""
        return self.status == "complete"

    def has(self, filename: str) -> bool:
        """True when the run wrote ``filename``."""
        return filename in self.manifest.files

    def table(self, name: str) -> pl.DataFrame:
        """Read ``<name>.parquet``, checking its schema version (and a requests or points table, :func:`_checked`)."""
        path, frame = self._read_table(name)
        return _checked(path, frame, name, self.manifest.flow)

    def points(self) -> list[M2Point]:
        """An M2 or sweep run's points (``spec_stats.parquet``), the table read and each row checked once."""
        path, frame = self._read_table("spec_stats")
        try:
            return checked_point_table(path, frame, self.manifest.flow)[1]
        except AlflowError as exc:
            raise StoreError(str(exc)) from None

    def _read_table(self, name: str) -> tuple[str, pl.DataFrame]:
        filename = f"{name}.parquet"
        if not self.has(filename):
            raise StoreError(f"run {self.dir} has no {filename} (status {self.status})")
        path = self.storage.join(self.dir, filename)
        try:
            data = self.storage.read_bytes(path)
        except FileNotFoundError:
            raise StoreError(f"{path}: missing (manifest.json lists it; the run directory lost it)") from None
        except OSError as exc:
            raise StoreError(f"{path}: not readable ({exc.strerror or exc})") from None
        try:
            meta = pl.read_parquet_metadata(io.BytesIO(data))
            version = meta.get(PARQUET_VERSION_KEY)
            frame = pl.read_parquet(io.BytesIO(data)) if version == str(SCHEMA_VERSION) else None
        except Exception as exc:  # polars/arrow raise several types for a damaged file
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise StoreError(
                f"{path}: not a readable parquet file, truncated or damaged ({len(data)} bytes: {first})"
            ) from None
        if frame is None:
            raise StoreError(f"{path}: schema version {version!r}, this alflow reads {SCHEMA_VERSION}")
        return path, frame

    def damaged_tables(self) -> list[str]:
        """One line per parquet table the manifest lists that cannot be read: the file and what is wrong.

        Missing, truncated, garbage or of another schema version (each read as :meth:`table` reads it).
        """
        problems = []
        for filename in sorted(self.manifest.files):
            if filename.endswith(".parquet"):
                try:
                    self.table(filename.removesuffix(".parquet"))
                except StoreError as exc:
                    problems.append(str(exc))
        return problems

    def json(self, name: str) -> dict[str, Any]:
        """Read ``<name>.json``."""
        filename = f"{name}.json"
        if not self.has(filename):
            raise StoreError(f"run {self.dir} has no {filename} (status {self.status})")
        if name not in self._json:
            self._json[name] = _read_json(self.storage, self.storage.join(self.dir, filename))
        return self._json[name]


def _checked(path: str, frame: pl.DataFrame, name: str, flow: str) -> pl.DataFrame:
    """``frame`` as alflow wrote it, or one line naming ``path``, the column and what alflow writes there.

    The requests table (:func:`_checked_records`) and an M2 or sweep run's points table
    (:func:`alflow.results.point_table.checked_point_table`: kinds, bounds, one row per point) are checked; the
    other tables are read as they are.
    """
    if name == "requests":
        return _checked_records(path, frame)
    if name == "spec_stats" and flow in POINT_FLOWS:
        try:
            return checked_point_table(path, frame, flow)[0]
        except AlflowError as exc:
            raise StoreError(str(exc)) from None
    return frame


_RECORD_TAGS: Final = ("concurrency", "repeat")
"""Columns an M2 run adds to its requests (the point each request belongs to)."""


def _checked_records(path: str, frame: pl.DataFrame) -> pl.DataFrame:
    """The requests table with every column alflow writes, of alflow's type, one it lacks as nulls (older runs).

    One line naming the file and the column when a column is not of the type alflow writes: stamps stored as text once
    made every report and regression check of the root fail, a ``warmup`` of integers or a ``start_ns`` of booleans
    failed inside polars ("filter predicate must be of type Boolean") without naming either. An integer column of
    another width is read as alflow's (Int32 stamps as Int64), a value it cannot hold is refused.
    """
    from alflow.loadgen.frames import RECORD_SCHEMA, with_record_columns

    casts = []
    for column, expected in RECORD_SCHEMA.items():
        got = frame.schema.get(column)
        if got is None or got == expected:
            continue
        if not dtype_fits(got, expected):
            raise StoreError(
                f"{path}: column {column} holds {got}, alflow writes {expected}: not as alflow wrote it"
            )
        casts.append(pl.col(column).cast(expected, strict=True))
    for column in _RECORD_TAGS:  # an M2 run's tags of each request's point: read by the regression judge
        got = frame.schema.get(column)
        if got is not None and got != pl.Null and not got.is_integer():
            raise StoreError(
                f"{path}: column {column} holds {got}, alflow writes an integer: not as alflow wrote it"
            )
    if casts:
        try:
            frame = frame.with_columns(casts)
        except pl.exceptions.PolarsError:
            names = ", ".join(c.meta.output_name() for c in casts)
            raise StoreError(
                f"{path}: column(s) {names} hold integers beyond what alflow writes there: not as alflow wrote it"
            ) from None
    return with_record_columns(frame)


def _read_json(storage: Storage, path: str) -> dict[str, Any]:
    try:
        limit = MAX_JSON_BYTES if path.rsplit("/", 1)[-1] in SMALL_JSON else MAX_READ_BYTES
        with storage.open_read(path) as f:
            raw = read_at_most(f, limit)
        if len(raw) > limit:  # a manifest or summary is kilobytes: no file alflow wrote (a site died on one)
            raise StoreError(f"{path}: a JSON file over {limit:,} bytes, not read")
        data = json.loads(raw)
    except (FileNotFoundError, NotADirectoryError):  # NotADirectoryError: a path under a regular file
        raise StoreError(f"{path} does not exist") from None
    except (OSError, ValueError) as exc:
        raise StoreError(f"{path}: not readable JSON ({exc})") from None
    except RecursionError:
        raise StoreError(f"{path}: not readable JSON (nested deeper than Python's parser goes)") from None
    if not isinstance(data, dict):
        raise StoreError(f"{path}: expected a JSON object")
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise StoreError(f"{path}: schema version {version!r}, this alflow reads {SCHEMA_VERSION}")
    return data


_IDENTIFIERS: Final = (("model", "id"), ("server", "model"), ("server", "image"), ("server", "label"))
"""Where a run's configuration holds the identifiers its pages show (bounded at the configuration)."""


def _long_identifier(config: Mapping[str, Any]) -> str | None:
    """The first identifier of ``config`` longer than :data:`MAX_IDENTIFIER` characters, said with its length."""
    found = [(f"{a}.{b}", config[a].get(b)) for a, b in _IDENTIFIERS if isinstance(config.get(a), dict)]
    models = config.get("models")
    if isinstance(models, list):
        found += [(f"models[{i}].id", m.get("id")) for i, m in enumerate(models[:100]) if isinstance(m, dict)]
    for where, value in found:
        if isinstance(value, str) and len(value) > MAX_IDENTIFIER:
            return f"config.{where} is {len(value):,} characters long (at most {MAX_IDENTIFIER:,})"
    return None


def _read_manifest(storage: Storage, path: str) -> RunManifest:
    data = _read_json(storage, path)
    if isinstance(data.get("config"), dict):  # a secret a hand-written manifest holds is never read back
        if (
            too_long := _long_identifier(data["config"])
        ) is not None:  # a hand-made folder: its pages would be MBs
            raise StoreError(f"{path}: not a run manifest alflow writes: {too_long}")
        data["config"] = redact_config(data["config"])
    try:
        return RunManifest.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        raise StoreError(f"{path}: not a valid run manifest: {where}: {err['msg']}") from None


def open_run(run_dir: str | os.PathLike[str]) -> StoredRun:
    """Read a run directory's manifest (:class:`~alflow.results.manifest.RunManifest`)."""
    text = _root_text(run_dir)
    storage = storage_for(run_dir)
    if isinstance(storage, LocalStorage) and Path(text).exists() and not Path(text).is_dir():
        raise StoreError(f"{text} is not a run directory (not a folder; a run directory holds manifest.json)")
    return StoredRun(text, _read_manifest(storage, storage.join(text, MANIFEST)), storage)


def iter_runs(
    root: str | os.PathLike[str], flow: str | None = None, skipped: list[str] | None = None
) -> Iterator[StoredRun]:
    """Every run under ``root`` (optionally one flow), oldest first; unreadable folders are skipped.

    ``skipped``, when given, gets one line per run folder whose manifest cannot be read (the folder, the reason).
    """
    storage = storage_for(root)
    base = _root_text(root)
    flows = [storage.join(base, flow)] if flow else storage.list_dirs(base)
    for flow_dir in flows:
        for run_dir in storage.list_dirs(flow_dir):
            manifest = storage.join(run_dir, MANIFEST)
            if not storage.exists(manifest):
                continue
            try:
                yield StoredRun(run_dir, _read_manifest(storage, manifest), storage)
            except StoreError as exc:
                if skipped is not None:
                    skipped.append(f"{run_dir}: {exc}")
                continue


def run_id_of(flow_run_id: str) -> str:
    """The run id a flow run's directory carries: its Prefect flow run id without dashes, 12 characters."""
    return flow_run_id.replace("-", "")[:12]


def find_run(root: str | os.PathLike[str], flow: str, flow_run_id: str) -> StoredRun | None:
    """The run directory a Prefect flow run wrote under ``root`` (None when there is none)."""
    wanted = run_id_of(flow_run_id)
    found = [run for run in iter_runs(root, flow) if run.manifest.run_id == wanted]
    return found[-1] if found else None


def load_runs(
    root: str | os.PathLike[str],
    table: str = "spec_stats",
    *,
    flow: str | None = None,
    include_incomplete: bool = False,
) -> pl.DataFrame:
    """One frame of ``table`` across runs, with ``flow``, ``run_id``, ``run_status`` and ``run_started`` columns."""
    frames = []
    for run in iter_runs(root, flow):
        if not run.has(f"{table}.parquet") or (not run.complete and not include_incomplete):
            continue
        frames.append(
            run.table(table).with_columns(
                pl.lit(run.manifest.flow).alias("flow"),
                pl.lit(run.manifest.run_id).alias("run_id"),
                pl.lit(run.status).alias("run_status"),
                pl.lit(run.manifest.started).alias("run_started"),
            )
        )
    if not frames:
        return pl.DataFrame()
    return pl.concat(frames, how="diagonal_relaxed")
