"""Typed rows of stored runs: what one line of a run's tables holds.

The flows write these (``to_dict``) and :mod:`alflow.results.view` reads them back (``from_dict``),
so a report never guesses a key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any, Final

from alflow.results.store import StoreError


@dataclass(frozen=True)
class M2Point:
    """One concurrency of an M2 run: the audit and the client's headline numbers (a row of spec_stats)."""

    concurrency: int
    k: int
    framework: str
    target_al: float
    achieved_al: float | None
    valid: bool
    partial: bool
    audit: str
    num_drafts: int | None
    expected_al: float | None
    allowed_deviation: float | None
    completed: int | None
    failed: int | None
    output_throughput: float | None
    nodes: int
    num_gpus: int | None
    total_token_throughput: float | None
    output_throughput_per_gpu: float | None
    total_token_throughput_per_gpu: float | None
    median_interactivity_tokens_per_s: float | None
    median_tpot_ms: float | None
    median_ttft_ms: float | None
    p99_ttft_ms: float | None
    median_itl_ms: float | None
    tokens_per_chunk: float | None
    duration_s: float
    scheme: str | None = None
    """The synthetic scheme the audit tested against (its exact pmf at the target)."""
    al_source: str | None = None
    """Where the achieved AL's counts come from: ``per-request`` (the responses' own counts over exactly the
    measured requests) or ``counters`` (the server's metrics over the window)."""
    fit_p_value: float | None = None
    """The shape test: chi-square p of the accept-length histogram against the scheme's pmf (None: not tested)."""
    histogram_observed: tuple[int, ...] | None = None
    """Verify steps by accept length 1..K+1 (index 0 = length 1); None without a histogram."""
    histogram_expected: tuple[float, ...] | None = None
    """The scheme's expected steps by accept length at the target, same indexing."""
    repeat: int = 0
    """Which repeat of its (K, concurrency) this point is, 0-based (``BenchmarkParams.repeats``): each repeat is
    its own measurement window; rows written before repeats existed read as 0."""
    client_verdict: str | None = None
    """``client-bound`` when the load generator was the bottleneck at this point (its throughput measured the
    client, not the server), ``ok`` when not (:mod:`alflow.metrics.timing`); None in rows written before."""
    client_reasons: str | None = None
    """Why the point is client-bound (CPU share, loop lag, streams in flight); None when it is not."""
    itl_note: str | None = None
    """Why the ITL median and percentiles are not measurable at this point (None: they are)."""
    stamp_source: str | None = None
    """``kernel`` (kernel receive stamps), ``clock``, or ``mixed``: what dated the client's reads."""
    coalesced_share: float | None = None
    """Share of output chunks that arrived in one read with another chunk of the same request."""
    client_cpu_share: float | None = None
    """The client's CPU seconds per wall second per process over the measured phase."""
    loop_lag_p99_ms: float | None = None
    """The client's event-loop lag, p99 over 10 ms probes."""

    def to_dict(self) -> dict[str, Any]:
        """The row as stored (``spec_stats.parquet``, ``summary.json``'s points); sequences as lists."""
        row = asdict(self)
        for name in ("histogram_observed", "histogram_expected"):
            if row[name] is not None:
                row[name] = list(row[name])
        return row

    @classmethod
    def from_dict(cls, row: Mapping[str, Any]) -> M2Point:
        """The point a stored row holds (``spec_stats.parquet``, ``summary.json``, a flow's result).

        Rows written before a field existed read it as None (``partial`` as False, ``nodes`` as 1);
        keys this version does not know are ignored. A row without the identity of a point
        (concurrency, K, target AL) is refused, naming what it lacks.
        """
        missing = [name for name in _REQUIRED if row.get(name) is None]
        if missing:
            raise StoreError(f"an M2 point row lacks {', '.join(missing)}: {dict(row)!r:.200}")
        values: dict[str, Any] = {name: row.get(name) for name in _FIELDS}
        values["framework"] = str(row.get("framework") or "?")
        values["valid"] = bool(row.get("valid"))
        values["partial"] = bool(row.get("partial"))
        values["audit"] = str(row.get("audit") or "")
        values["nodes"] = int(row.get("nodes") or 1)
        values["duration_s"] = float(row.get("duration_s") or 0.0)
        values["repeat"] = int(row.get("repeat") or 0)
        for name, kind in (("histogram_observed", int), ("histogram_expected", float)):
            seq = row.get(name)
            values[name] = None if seq is None else tuple(kind(v) for v in seq)
        return cls(**values)


_FIELDS: Final = tuple(f.name for f in fields(M2Point))
_REQUIRED: Final = ("concurrency", "k", "target_al")
