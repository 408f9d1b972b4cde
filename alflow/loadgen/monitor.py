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

It returns a :class:`~alflow.loadgen.timing.ClientLoad`; :func:`alflow.loadgen.timing.client_timing` judges it. No Prefect here.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Final

from alflow.loadgen.timing import ClientLoad

LAG_INTERVAL_S: Final = 0.01
"""The lag probe's sleep: 100 wake-ups a second (a few microseconds of CPU each)."""
_MAX_LAG_SAMPLES: Final = 200_000
"""About 33 minutes of probes; later ones replace a random earlier one (reservoir), so memory stays bounded."""


def _percentile(ordered: list[float], q: float) -> float:
    """Nearest-rank style linear interpolation on sorted values (numpy's default method)."""
    pos = (len(ordered) - 1) * q
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


class LoadMonitor:
    """Watches one phase: call :meth:`start`, :meth:`opened`/:meth:`closed` per session, then :meth:`stop`."""

    def __init__(
        self, concurrency: int, *, closed_loop: bool = True, interval_s: float = LAG_INTERVAL_S
    ) -> None:
        self.concurrency = concurrency
        self.closed_loop = closed_loop
        self._full_area: float | None = None
        self._full_s: float | None = None
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

    def all_started(self) -> None:
        """Every session of the phase has been started: the in-flight mean stops here (the tail drains)."""
        if self._full_area is None:
            self._account()
            self._full_area = self._area
            self._full_s = time.monotonic() - self._wall0

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
        area, span = (self._area, wall) if self._full_area is None else (self._full_area, self._full_s or 0.0)
        return ClientLoad(
            wall_s=wall,
            cpu_s=cpu,
            lag_samples=self._seen,
            lag_p50_ms=_percentile(ordered, 0.5) if ordered else None,
            lag_p99_ms=_percentile(ordered, 0.99) if ordered else None,
            lag_max_ms=ordered[-1] if ordered else None,
            concurrency=self.concurrency,
            in_flight_max=self._max_open,
            in_flight_mean=area / span if span > 0 else 0.0,
            closed_loop=self.closed_loop,
        )
