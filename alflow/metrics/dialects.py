"""Framework metrics dialects: two scrapes (or a Prometheus window) -> :class:`SpecStats`.

A ``Protocol`` and the helpers readers share; each framework plugin's ``metrics`` is its reader, in its folder
(``alflow/frameworks/<name>/metrics.py``), found through the registry by :mod:`alflow.metrics.readers`. The
simulated engine speaks each real framework's dialect, so it needs no reader of its own: ``readers.detect``
recognises whichever it exposes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import aiohttp

from alflow.acceptance.stats import CI_LEVEL, SpecStats
from alflow.errors import AlflowError, InvalidInputError
from alflow.metrics.prometheus import CounterWindow, Snapshot

if TYPE_CHECKING:
    from alflow.loadgen.counts import CountsReader


@dataclass(frozen=True)
class SpeculativeInfo:
    """What a server states of its speculative configuration in its metrics (None: not stated)."""

    enabled: bool | None = None
    method: str | None = None
    num_tokens: int | None = None


class MissingMetricsError(AlflowError):
    """The server does not expose the counters a dialect needs (the message says how to enable them)."""


class Dialect(Protocol):
    """How one framework exposes spec-decode counters."""

    name: str
    metrics_path: str
    request_counts: str | None
    """Where this framework's responses carry per-request speculative counts (the records' ``spec_*``
    columns), as notes name it; None: none known (notes then say "per-request counts")."""
    request_fields: Mapping[str, object]
    """Fields every measured request's body carries so that the response holds those counts (SGLang's
    ``return_spec_tokens_details: true``); empty where a server flag does it (vLLM) or nothing does."""
    count_reader: CountsReader | None
    """How the client reads those counts from a response (:mod:`alflow.loadgen.counts`); None: none known."""

    @property
    def snapshot_lag_s(self) -> float:
        """How old a scrape can be: 0 for live counters; more for a server that serves a periodic snapshot.

        The measurement waits that long, with the server idle, before each scrape that bounds a window (ATOM).
        """
        ...

    def matches(self, snapshot: Snapshot) -> bool:
        """True when ``snapshot`` looks like this framework's metrics."""
        ...

    def spec_stats(
        self, window: CounterWindow, *, k: int | None = None, level: float = CI_LEVEL
    ) -> SpecStats:
        """Spec-decode statistics over ``window``, with a ``level`` confidence interval of AL."""
        ...

    def speculative_info(self, snapshot: Snapshot) -> SpeculativeInfo | None:
        """The speculative configuration the server states in ``snapshot`` (None where it states none)."""
        ...

    async def server_info(
        self, base_url: str, *, session: aiohttp.ClientSession, headers: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        """What the server says about its speculation beyond the counters, for the run's summary.

        Keys are prefixed with the framework's name; a server that answers nothing useful gives ``{}``
        (a cross-check never fails a run).
        """
        ...


def need_counter(window: CounterWindow, name: str, hint: str) -> float:
    """The increase of counter ``name`` over ``window``; a missing counter is an error carrying ``hint``."""
    value = window.increase(name)
    if value is None:
        raise MissingMetricsError(f"metric {name} is not exposed: {hint}")
    return value


def positions_in_order(by_pos: dict[str, float]) -> list[float]:
    """Per-position values ordered by their integer position label (a non-integer label is an error)."""
    try:
        keys = sorted(by_pos, key=int)
    except ValueError as exc:
        raise InvalidInputError(f"non-integer position labels {sorted(by_pos)}") from exc
    return [by_pos[k] for k in keys]


def join_notes(*notes: str) -> str:
    """The non-empty notes joined with ``; ``."""
    return "; ".join(n for n in notes if n)


class NoSpeculativeInfo:
    """A dialect whose metrics state no speculative configuration (and whose counters are live)."""

    snapshot_lag_s: float = 0.0

    def speculative_info(self, snapshot: Snapshot) -> SpeculativeInfo | None:
        del snapshot
        return None


class CountersOnly(NoSpeculativeInfo):
    """A dialect whose server says nothing about speculation beyond its counters."""

    async def server_info(
        self, base_url: str, *, session: aiohttp.ClientSession, headers: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        del base_url, session, headers
        return {}
