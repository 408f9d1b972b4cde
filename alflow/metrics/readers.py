"""Which metrics reader for a server: every registered framework's (:func:`dialects`), by name, or detected.

The readers are the framework plugins' ``metrics`` (their protocol: :class:`alflow.metrics.dialects.Dialect`),
found through their specs (:func:`alflow.plugins.plugin_of`: this package never imports the registry).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol, cast

from alflow.errors import InvalidInputError
from alflow.metrics.dialects import Dialect, MissingMetricsError
from alflow.metrics.prometheus import Snapshot
from alflow.plugins import plugin_of, usable_names

if TYPE_CHECKING:
    from alflow.loadgen.counts import CountsReader

log = logging.getLogger(__name__)


def dialects() -> dict[str, Dialect]:
    """Every registered framework's metrics reader, by framework name (frameworks that have one)."""
    found = {name: cast(_Reads, plugin_of(name)).metrics for name in usable_names()}
    return {name: reader for name, reader in found.items() if reader is not None}


class _Reads(Protocol):
    """What this module reads of a framework's plugin (the registry's ``Framework`` is one)."""

    @property
    def metrics(self) -> Dialect | None: ...


def count_readers(dialect: Dialect | None) -> tuple[CountsReader, ...]:
    """How the client reads per-request counts: ``dialect``'s reader, or every dialect's when it is not known."""
    chosen = [dialect] if dialect is not None else list(dialects().values())
    # a plugin written before the attribute existed has no reader: its counts are not read, nothing breaks
    found = (getattr(d, "count_reader", None) for d in chosen)
    return tuple(dict.fromkeys(r for r in found if r is not None))


def get_dialect(name: str) -> Dialect:
    """The registered dialect ``name``; an unknown name lists the known ones."""
    known = dialects()
    try:
        return known[name]
    except KeyError:
        raise InvalidInputError(
            f"unknown metrics dialect {name!r}; known: {', '.join(known)}, auto"
        ) from None


def detect(snapshot: Snapshot) -> Dialect:
    """The dialect whose metrics ``snapshot`` holds; an error lists what was looked for."""
    known = dialects()
    found = [d for d in known.values() if _matches(d, snapshot)]
    if len(found) == 1:
        return found[0]
    if not found:
        raise MissingMetricsError(
            f"metrics at {snapshot.url or '<text>'} hold no metrics of a known framework "
            f"({', '.join(known)}): cannot detect the framework (give --dialect, or enable the server's metrics; "
            "alflow bench --help says how for each)"
        )
    raise MissingMetricsError(
        f"metrics at {snapshot.url or '<text>'} match several dialects ({', '.join(d.name for d in found)}): "
        "give --dialect"
    )


def _matches(dialect: Dialect, snapshot: Snapshot) -> bool:
    """Whether ``snapshot`` holds ``dialect``'s metrics; a reader that raises (a third party's) matches nothing."""
    try:
        return bool(dialect.matches(snapshot))
    except Exception as exc:
        log.warning("metrics reader %s left out of detection: %s: %s", dialect.name, type(exc).__name__, exc)
        return False


def candidate_metrics_urls(base_url: str, dialect: str = "auto") -> list[str]:
    """Metrics URLs to try for a server at ``base_url``: the dialect's path, or every known path."""
    base = base_url.rstrip("/")
    if base.endswith("/v1"):
        base = base[:-3]
    paths = (
        [get_dialect(dialect).metrics_path]
        if dialect != "auto"
        else [d.metrics_path for d in dialects().values()]
    )
    return [base + p for p in dict.fromkeys(paths)]
