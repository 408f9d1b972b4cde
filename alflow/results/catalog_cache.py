"""The catalogue's disk cache: one JSON file of entries per results root, private to its user.

Usage::

    from alflow.results.catalog_cache import cache_file, load_rows, save_rows
    path = cache_file(default_cache_dir(), root_id)   # <dir>/<sha of the root>.json
    rows = load_rows(path, fmt, root)                 # None: no usable cache (absent, another format, another root)
    save_rows(path, fmt, root, rows)                  # 0600 in a 0700 folder

The cache holds what the catalogue read of each run (its entries are redacted as they are built,
:func:`alflow.results.catalog.redact_entry`), but still: a results root in a private bucket is copied onto a
local disk, so the file is the user's alone (0600) in a folder of the user's alone (0700). The root is stored
as its SHA-256, never as written (an fsspec URL may carry credentials).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import logging
import os
import stat
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, Final

import orjson
from pydantic import BaseModel

from alflow.util.fsutil import atomic_write_bytes
from alflow.util.redact import may_hold_credentials, redact_urls_in_text

log = logging.getLogger(__name__)

FILE_MODE: Final = 0o600
"""The cache file's mode: it copies what a run holds (a private bucket's) onto a local disk."""
DIR_MODE: Final = 0o700
"""The cache folder's mode (and of each folder above it the cache creates)."""


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/alflow/catalog`` (``~/.cache/alflow/catalog``): where catalogues keep their entries."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "alflow" / "catalog"


def root_digest(root: str) -> str:
    """The SHA-256 of a root as the cache names it (any bytes: a folder name need not be UTF-8)."""
    return hashlib.sha256(os.fsencode(root)).hexdigest()


def cache_file(cache_dir: str | os.PathLike[str], root_id: str) -> Path:
    """The cache file of the root ``root_id`` (its resolved folder or its URL) in ``cache_dir``."""
    return Path(cache_dir) / f"{root_digest(root_id)[:24]}.json"


def private_dir(path: Path) -> None:
    """Create ``path`` (and each missing folder above it) 0700; tighten it to 0700 where it is ours and looser.

    A folder above ``path`` that already exists is left as it is (``~/.cache`` is the user's own business).
    """
    missing: list[Path] = []
    at = path
    while not at.exists() and at != at.parent:
        missing.append(at)
        at = at.parent
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):
            folder.mkdir(mode=DIR_MODE)
    st = path.stat()
    if st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) & 0o077:
        path.chmod(stat.S_IMODE(st.st_mode) & ~0o077 | DIR_MODE)


def load_rows(path: Path | None, fmt: str, root: str) -> dict[str, Any] | None:
    """The stored rows (rel -> {"sig", "entry"}) of the cache at ``path``; None when it is absent or not usable."""
    if path is None or not path.exists():
        return None
    try:
        data = orjson.loads(path.read_bytes())
        if data.get("version") != fmt or data.get("root") != root_digest(root):
            return None
        return dict(data["runs"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        log.warning("catalogue cache %s not used: %s", path, exc)
        return None


def save_rows(path: Path, fmt: str, root: str, rows: dict[str, Any], fresh: list[str]) -> None:
    """Write ``rows`` to ``path`` (0600 in a 0700 folder); rows of ``fresh`` JSON cannot hold are left out.

    A cache that cannot be written only costs the next cold start: nothing is raised.
    """
    data = {"version": fmt, "root": root_digest(root), "runs": rows}
    try:
        blob = orjson.dumps(data)
    except TypeError:  # an integer beyond 64 bits: those rows are not cached (read again next time)
        for rel in fresh:
            try:
                orjson.dumps(rows[rel])
            except TypeError:
                del rows[rel]
        blob = orjson.dumps(data)
    with contextlib.suppress(OSError):
        private_dir(path.parent)
        atomic_write_bytes(path, blob, mode=FILE_MODE)  # a new file each time: never one of a looser mode


_SHORT: Final = 256
"""A text up to this long is judged once (:func:`_short_hint`): most of an entry's texts repeat over the runs."""


@functools.lru_cache(maxsize=1 << 16)
def _short_hint(text: str) -> bool:
    return may_hold_credentials(text)


def _hint(text: str) -> bool:
    return _short_hint(text) if len(text) <= _SHORT else may_hold_credentials(text)


_NO_TEXT: Final = frozenset({int, float, bool, type(None)})


def hinted(value: object, *, keep: Collection[str] = ()) -> bool:
    """Whether any text in ``value`` (a dataclass, a pydantic model, a tuple, list or mapping) may hold a credential.

    The fields named in ``keep`` of a dataclass are left out. Cheap where nothing does: no copy is made.
    """
    kind = type(value)
    if kind in _NO_TEXT:  # most values: numbers
        return False
    if kind is str:
        return _hint(value)  # type: ignore[arg-type]
    if isinstance(value, str):
        return _hint(value)
    if isinstance(value, tuple | list):
        return any(hinted(v) for v in value)
    if isinstance(value, Mapping):
        return any(hinted(k) or hinted(v) for k, v in value.items())
    if isinstance(value, BaseModel):  # its fields' values (pydantic keeps them in __dict__)
        return any(hinted(v) for v in vars(value).values())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return any(hinted(getattr(value, f.name)) for f in dataclasses.fields(value) if f.name not in keep)
    return False


def redacted_texts(data: Mapping[str, Any], *, keep: Collection[str] = ()) -> dict[str, Any] | None:
    """JSON-ready ``data`` with every string in it (keys of ``keep`` aside) through the site's URL and token redaction.

    None when no string holds a hint of a credential (:func:`~alflow.util.redact.may_hold_credentials`): the
    caller keeps what it has, at the cost of a scan.
    """
    hinted = False

    def each(value: object) -> object:
        nonlocal hinted
        if isinstance(value, str):
            if _hint(value):
                hinted = True
                return redact_urls_in_text(value)
            return value
        if isinstance(value, Mapping):
            return {k: each(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [each(v) for v in value]
        return value

    redacted = {k: v if k in keep else each(v) for k, v in data.items()}
    return redacted if hinted else None


def sig_from_json(raw: object) -> tuple[object, ...] | None:
    """A signature as read back from JSON (lists -> tuples, so it compares equal to a fresh one)."""
    if raw is not None and not isinstance(raw, list):
        raise TypeError(f"signature {raw!r:.80}: expected a list")
    return _tuples(raw)  # type: ignore[return-value]


def _tuples(value: object) -> object:
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value
