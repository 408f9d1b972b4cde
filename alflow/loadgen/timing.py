"""Whether the client's timestamps can carry inter-token latencies, and whether the client was the bottleneck.

Two things spoil a stream's inter-chunk gaps when the client is late (:mod:`alflow.loadgen.rxstamp`):

- **coalescing**: events that queued in the socket arrive in one read and share its timestamp, so the gaps
  between them read 0 and the gap before them covers several tokens. It is read off the records: a chunk is
  *coalesced* when its timestamp equals a neighbour's in the same request, and a gap is *distorted* when it
  lies inside such a group or leads into one. Kernel stamps do not undo it (TCP merges queued segments and
  keeps the newest stamp).
- **lateness without coalescing**: a read of a single event dated by the process's clock is late by the
  loop's lag, which lengthens one gap and shortens the next. Kernel stamps undo exactly this.

The rules (constants below, each with its reason):

- ITL percentiles are *not measurable* when more than :data:`ITL_DISTORTED_MAX` of the gaps are distorted, or
  when the reads were dated by the clock while the event loop's p99 lag exceeded :data:`CLOCK_LAG_P99_MAX_MS`.
  The mean ITL stays (coalescing moves time between gaps but keeps their sum, ``e2el - ttft``) unless the
  first chunk itself came in a merged read in more than :data:`ITL_DISTORTED_MAX` of the requests: that read's
  time is late for the first chunk, the sum is short, and the mean is withheld as well.
- The client was the **bottleneck** (verdict ``client-bound``) when its process used at least
  :data:`CPU_SHARE_MAX` of a core, its loop's p99 lag reached :data:`LAG_P99_SATURATED_MS`, or, with every
  slot meant to be busy (no request rate), fewer than :data:`IN_FLIGHT_MIN_SHARE` of the configured streams
  were in flight on average while sessions waited to start.

No Prefect here; :func:`alflow.metrics.client.summarize` applies it and ``summary.json`` stores it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Final

from pydantic import Field, PlainSerializer, computed_field

if TYPE_CHECKING:  # the load generator imports this module: polars and numpy only where a frame is judged
    import polars as pl

ITL_DISTORTED_MAX: Final = 0.01
"""A p99 rests on the top 1% of gaps: with more than 1% of the gaps distorted, distorted gaps alone can be that
whole tail (and a median needs far fewer: 51-64% zero gaps were measured on a busy 2-core client, issue #34)."""
CLOCK_LAG_P99_MAX_MS: Final = 1.0
"""A clock-dated gap is off by the difference of two reads' lags: up to about 2x the lag. The timing target is a
p99 ITL error under 2 ms, so the loop's p99 lag must stay under 1 ms for clock-dated percentiles to be shown."""
CPU_SHARE_MAX: Final = 0.9
"""A single-threaded client at 90% of a core has no headroom: reads queue behind the loop's own work."""
LAG_P99_SATURATED_MS: Final = 10.0
"""One in a hundred wake-ups later than 10 ms: at a 10 ms ITL (fast decode) events start to queue in the
socket, which is coalescing."""
IN_FLIGHT_MIN_SHARE: Final = 0.95
"""Closed loop: a finished session's slot is refilled at once, so the mean in flight sits at the configured
concurrency; below 95% the client is slow to start sessions (aiperf kept 174 of 256 streams open, issue #34)."""


def _rounder(digits: int) -> PlainSerializer:
    """Stored ``summary.json`` figures: rounded to ``digits`` decimals (None stays None)."""
    return PlainSerializer(lambda v: None if v is None else round(v, digits))


_F3 = Annotated[float, _rounder(3)]
_F3_OR_NONE = Annotated[float | None, _rounder(3)]


@dataclass(frozen=True)
class ClientLoad:
    """The client's load over one measured phase (one process, or several merged by :meth:`merge`).

    Stored (``client_timing.client_load``) as pydantic serializes it: floats to 3 decimals, ``cpu_share`` to 4.
    """

    wall_s: _F3
    cpu_s: _F3
    """CPU seconds (user + system) the client process(es) used over the phase."""
    lag_samples: int
    lag_p50_ms: _F3_OR_NONE
    lag_p99_ms: _F3_OR_NONE
    lag_max_ms: _F3_OR_NONE
    concurrency: int
    """The configured number of sessions in flight (summed over processes)."""
    in_flight_max: int
    in_flight_mean: _F3
    """Time-weighted mean of sessions in flight while sessions still waited to start (the whole phase when
    the run never ran out of sessions to start; the tail, where fewer remain than slots, is left out)."""
    processes: int = 1
    closed_loop: bool = True
    """No request rate: every slot is meant to be busy, so fewer streams in flight means a slow client."""

    @computed_field(return_type=Annotated[float | None, _rounder(4)])  # type: ignore[prop-decorator]
    @property
    def cpu_share(self) -> float | None:
        """CPU seconds per wall second per process (1.0: each process kept one core busy); None for an empty phase."""
        if self.wall_s <= 0:
            return None
        return self.cpu_s / self.wall_s / self.processes

    @staticmethod
    def merge(parts: list[ClientLoad]) -> ClientLoad:
        """Several processes' loads as one: CPU, concurrency and streams summed; the worst lag of any process.

        Percentiles are not additive: the merged p50/p99 are the largest of the processes' (the verdict asks
        whether *any* process read late).
        """
        if not parts:
            raise ValueError("no client load to merge")
        if len(parts) == 1:
            return parts[0]

        def worst(values: list[float | None]) -> float | None:
            return max((v for v in values if v is not None), default=None)

        return ClientLoad(
            wall_s=max(p.wall_s for p in parts),
            cpu_s=sum(p.cpu_s for p in parts),
            lag_samples=sum(p.lag_samples for p in parts),
            lag_p50_ms=worst([p.lag_p50_ms for p in parts]),
            lag_p99_ms=worst([p.lag_p99_ms for p in parts]),
            lag_max_ms=worst([p.lag_max_ms for p in parts]),
            concurrency=sum(p.concurrency for p in parts),
            in_flight_max=sum(p.in_flight_max for p in parts),
            in_flight_mean=sum(p.in_flight_mean for p in parts),
            processes=sum(p.processes for p in parts),
            closed_loop=all(p.closed_loop for p in parts),
        )


@dataclass(frozen=True)
class ClientTiming:
    """The judgement of one measured phase's timestamps and client load.

    Stored (``summary.json``'s ``client_timing``) as pydantic serializes it: ``verdict`` in place of
    ``client_bound``, the shares to 6 decimals.
    """

    stamp_source: str
    """``kernel``, ``clock``, ``mixed`` (some of each) or ``none`` (no successful request)."""
    chunks: int
    coalesced_chunks: int
    gaps: int
    distorted_gaps: int
    client_load: ClientLoad | None
    client_bound: Annotated[bool, Field(exclude=True)]
    reasons: tuple[str, ...]
    """Why the client was the bottleneck (empty when it was not)."""
    itl_measurable: bool
    itl_note: str | None
    """Why ITL percentiles are not shown (None when they are)."""
    itl_mean_measurable: bool = True
    """False when the first chunk of more than :data:`ITL_DISTORTED_MAX` of the requests came in one read with later
    ones: the gaps' sum (last chunk minus first) is then short, so the mean is withheld too."""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def verdict(self) -> str:
        """``client-bound`` when the client was the bottleneck, else ``ok``."""
        return "client-bound" if self.client_bound else "ok"

    @computed_field(return_type=Annotated[float | None, _rounder(6)])  # type: ignore[prop-decorator]
    @property
    def coalesced_share(self) -> float | None:
        """Share of output chunks that arrived in a read with another chunk of the same request."""
        return self.coalesced_chunks / self.chunks if self.chunks else None

    @computed_field(return_type=Annotated[float | None, _rounder(6)])  # type: ignore[prop-decorator]
    @property
    def distorted_share(self) -> float | None:
        """Share of inter-chunk gaps inside or leading into a coalesced read."""
        return self.distorted_gaps / self.gaps if self.gaps else None


def coalescing(chunk_ns: pl.Series) -> tuple[int, int, int, int, int]:
    """Coalescing counts of a ``chunk_ns`` list column (one list per request).

    Returns (chunks, coalesced chunks, gaps, distorted gaps, requests whose first chunk was coalesced). A
    coalesced group is a run of two or more equal stamps in one request (chunks of one read); its chunks are
    coalesced, the zero gaps inside it and the gap leading into it are distorted. Computed on the flat stamps
    (a few bytes per chunk: a point of a million chunks needs tens of MB, not the half GB of a windowed frame).
    """
    import numpy as np

    lists = chunk_ns.list.drop_nulls()
    lengths = lists.list.len().fill_null(0).to_numpy()
    lengths = lengths[lengths > 0]
    flat = lists.explode().drop_nulls().to_numpy()
    chunks = int(flat.size)
    if chunks == 0:
        return 0, 0, 0, 0, 0
    starts = np.zeros(chunks, dtype=bool)
    starts[np.cumsum(lengths)[:-1]] = True
    starts[0] = True
    same_as_prev = np.zeros(chunks, dtype=bool)  # a zero gap from the chunk before, in the same request
    same_as_prev[1:] = flat[1:] == flat[:-1]
    same_as_prev &= ~starts
    same_as_next = np.zeros(chunks, dtype=bool)
    same_as_next[:-1] = same_as_prev[1:]
    coalesced = int(np.count_nonzero(same_as_prev | same_as_next))
    group_first = same_as_next & ~same_as_prev  # the first chunk of each coalesced group
    # a group with no gap before it: the stream's first read
    first = int(np.count_nonzero(group_first & starts))
    gaps = chunks - int(lengths.size)
    # distorted: each group's inner zero gaps (its size - 1) plus the gap leading into it, where there is one
    return chunks, coalesced, gaps, coalesced - first, first


def client_bound_reasons(load: ClientLoad) -> list[str]:
    """Why the client was the bottleneck over a phase (empty: it was not): CPU share, loop lag, streams in flight."""
    reasons: list[str] = []
    share = load.cpu_share
    if share is not None and share >= CPU_SHARE_MAX:
        reasons.append(f"the client used {share:.0%} of a core per process (at least {CPU_SHARE_MAX:.0%})")
    lag = load.lag_p99_ms
    if lag is not None and lag >= LAG_P99_SATURATED_MS:
        reasons.append(f"the event loop's p99 lag was {lag:.1f} ms (at least {LAG_P99_SATURATED_MS:g} ms)")
    if load.closed_loop and load.in_flight_mean < IN_FLIGHT_MIN_SHARE * load.concurrency:
        reasons.append(
            f"{load.in_flight_mean:.1f} of {load.concurrency} streams were in flight on average "
            f"(under {IN_FLIGHT_MIN_SHARE:.0%})"
        )
    return reasons


def client_timing(records: pl.DataFrame, load: ClientLoad | None) -> ClientTiming:
    """Judge the successful, measured requests of ``records`` (a records frame) and the client's ``load``."""
    import polars as pl

    ok = records.filter(pl.col("error").is_null() & ~pl.col("warmup").fill_null(value=False))
    stamps = (
        {"clock" if s is None else str(s) for s in ok["stamp_source"]}
        if "stamp_source" in ok.columns
        else {"clock"}
    )
    source = "none" if not stamps else stamps.pop() if len(stamps) == 1 else "mixed"
    chunks, coalesced, gaps, distorted, first = coalescing(ok["chunk_ns"])
    notes: list[str] = []
    mean_ok = not (ok.height and first / ok.height > ITL_DISTORTED_MAX)
    if not mean_ok:
        notes.append(
            f"in {first / ok.height:.1%} of requests the first chunk arrived in one read with later ones, so their "
            "time to the last chunk is short by an unknown amount and even the ITL mean is not measurable"
        )
    if gaps and distorted / gaps > ITL_DISTORTED_MAX:
        notes.append(
            f"{distorted / gaps:.1%} of inter-chunk gaps lie in or lead into reads that carried several chunks "
            f"(more than {ITL_DISTORTED_MAX:.0%})"
        )
    lag = None if load is None else load.lag_p99_ms
    if source != "kernel" and lag is not None and lag > CLOCK_LAG_P99_MAX_MS:
        notes.append(
            f"reads were dated by the process clock while the event loop's p99 lag was {lag:.1f} ms "
            f"(over {CLOCK_LAG_P99_MAX_MS:g} ms)"
        )
    reasons = [] if load is None else client_bound_reasons(load)
    return ClientTiming(
        stamp_source=source,
        chunks=chunks,
        coalesced_chunks=coalesced,
        gaps=gaps,
        distorted_gaps=distorted,
        client_load=load,
        client_bound=bool(reasons),
        reasons=tuple(reasons),
        itl_measurable=not notes,
        itl_mean_measurable=mean_ok,
        itl_note="; ".join(notes) if notes else None,
    )
