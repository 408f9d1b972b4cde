"""How busy the client was while it measured: event-loop lag, CPU share, streams in flight.

A client that is not scheduled in time reads late: every event that waited in the socket meanwhile gets that
late read's time, so its gaps to the next event read 0 and the gap before it is too long
(:mod:`alflow.loadgen.rxstamp`, :mod:`alflow.loadgen.timing`). :class:`LoadMonitor` watches the measured phase
from inside the event loop:

- **loop lag**: a probe sleeps :data:`LAG_INTERVAL_S` and records how much later than asked it woke up (the
  time a ready read also waits before the loop reaches it);
- **CPU share**: the process's CPU time (user + system, every thread) over the phase's wall time, 1.0 being
  one core busy;
- **streams in flight**: the most sessions open at once and their time-weighted mean, against the
  configured concurrency (a client that cannot start sessions fast enough never reaches it).

It returns a :class:`ClientLoad`; :func:`alflow.loadgen.timing.client_verdict` judges it. No Prefect here.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import Final

LAG_INTERVAL_S: Final = 0.01
"""The lag probe's sleep: 100 wake-ups a second (a few microseconds of CPU each)."""
_MAX_LAG_SAMPLES: Final = 200_000
"""About 33 minutes of probes; later ones replace a random earlier one (reservoir), so memory stays bounded."""


@dataclass(frozen=True)
class ClientLoad:
    """The client's load over one measured phase (one process, or several merged by :meth:`merge`)."""

    wall_s: float
    cpu_s: float
    """CPU seconds (user + system) the client process(es) used over the phase."""
    lag_samples: int
    lag_p50_ms: float | None
    lag_p99_ms: float | None
    lag_max_ms: float | None
    concurrency: int
    """The configured number of sessions in flight (summed over processes)."""
    in_flight_max: int
    in_flight_mean: float
    """Time-weighted mean of sessions in flight over the phase."""
    processes: int = 1

    @property
    def cpu_share(self) -> float | None:
        """CPU seconds per wall second per process (1.0: each process kept one core busy); None for an empty phase."""
        if self.wall_s <= 0:
            return None
        return self.cpu_s / self.wall_s / self.processes

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form."""
        share = self.cpu_share
        return {
            "wall_s": round(self.wall_s, 3),
            "cpu_s": round(self.cpu_s, 3),
            "cpu_share": None if share is None else round(share, 4),
            "lag_samples": self.lag_samples,
            "lag_p50_ms": _round(self.lag_p50_ms),
            "lag_p99_ms": _round(self.lag_p99_ms),
            "lag_max_ms": _round(self.lag_max_ms),
            "concurrency": self.concurrency,
            "in_flight_max": self.in_flight_max,
            "in_flight_mean": round(self.in_flight_mean, 3),
            "processes": self.processes,
        }

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
            known = [v for v in values if v is not None]
            return max(known) if known else None

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
        )


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _percentile(ordered: list[float], q: float) -> float:
    """Nearest-rank style linear interpolation on sorted values (numpy's default method)."""
    pos = (len(ordered) - 1) * q
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


class LoadMonitor:
    """Watches one phase: call :meth:`start`, :meth:`opened`/:meth:`closed` per session, then :meth:`stop`."""

    def __init__(self, concurrency: int, *, interval_s: float = LAG_INTERVAL_S) -> None:
        self.concurrency = concurrency
        self.interval_s = interval_s
        self._lags: list[float] = []
        self._seen = 0
        self._probe: asyncio.Task[None] | None = None
        self._wall0 = 0.0
        self._cpu0 = 0.0
        self._open = 0
        self._max_open = 0
        self._area = 0.0
        self._since = 0.0
        self._rng_state = 0x2545F4914F6CDD1D

    def start(self) -> None:
        """Begin the phase (call from inside the running loop)."""
        self._wall0 = self._since = time.monotonic()
        self._cpu0 = time.process_time()
        self._probe = asyncio.get_running_loop().create_task(self._watch())

    def opened(self) -> None:
        """A session started."""
        self._account()
        self._open += 1
        self._max_open = max(self._max_open, self._open)

    def closed(self) -> None:
        """A session ended."""
        self._account()
        self._open -= 1

    def _account(self) -> None:
        now = time.monotonic()
        self._area += self._open * (now - self._since)
        self._since = now

    def _keep(self, lag_ms: float) -> None:
        self._seen += 1
        if len(self._lags) < _MAX_LAG_SAMPLES:
            self._lags.append(lag_ms)
            return
        # xorshift64: a reservoir slot without the random module's global state
        x = self._rng_state
        x ^= (x << 13) & 0xFFFFFFFFFFFFFFFF
        x ^= x >> 7
        x ^= (x << 17) & 0xFFFFFFFFFFFFFFFF
        self._rng_state = x
        slot = x % self._seen
        if slot < _MAX_LAG_SAMPLES:
            self._lags[slot] = lag_ms

    async def _watch(self) -> None:
        interval = self.interval_s
        while True:
            asked = time.monotonic()
            await asyncio.sleep(interval)
            self._keep(max(0.0, (time.monotonic() - asked - interval) * 1e3))

    def cancel(self) -> None:
        """Stop the lag probe without a result (an interrupted run)."""
        if self._probe is not None:
            self._probe.cancel()

    async def stop(self) -> ClientLoad:
        """End the phase and return what it saw."""
        if self._probe is not None:
            self._probe.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._probe
            self._probe = None
        self._account()
        wall = time.monotonic() - self._wall0
        cpu = time.process_time() - self._cpu0
        ordered = sorted(self._lags)
        return ClientLoad(
            wall_s=wall,
            cpu_s=cpu,
            lag_samples=self._seen,
            lag_p50_ms=_percentile(ordered, 0.5) if ordered else None,
            lag_p99_ms=_percentile(ordered, 0.99) if ordered else None,
            lag_max_ms=ordered[-1] if ordered else None,
            concurrency=self.concurrency,
            in_flight_max=self._max_open,
            in_flight_mean=self._area / wall if wall > 0 else 0.0,
        )
