"""What a load is and what it returns: the target, the load's specification, progress, the result and its errors.

The data the schedulers of :mod:`alflow.loadgen.runner` and the client processes of :mod:`alflow.loadgen.multiproc`
share (apart from either, so neither imports the other for its types).
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from alflow.datasets.types import Session
from alflow.errors import AlflowError, InvalidInputError
from alflow.loadgen.client import Clock, auth_headers
from alflow.loadgen.counts import CountsReader
from alflow.loadgen.endpoints import Sampling, get_endpoint
from alflow.loadgen.records import RequestRecord
from alflow.loadgen.timing import ClientLoad

Arrival = Literal["poisson", "constant"]
REJECTIONS_BEFORE_ABORT = 5


@dataclass(frozen=True, slots=True)
class Target:
    """Where requests go: server base URL, endpoint name, served model name, sampling options.

    ``api_key`` (never shown in a repr, never stored) is sent as ``Authorization: Bearer <key>``.
    """

    base_url: str
    model: str
    endpoint: str = "chat"
    sampling: Sampling = field(default_factory=Sampling)
    api_key: str | None = field(default=None, repr=False)
    counts: tuple[CountsReader, ...] = ()
    """Readers of per-request speculative counts in the responses (the run's dialect's; none: not read)."""

    @property
    def headers(self) -> dict[str, str]:
        """Headers every request to this server carries (the API key's ``Authorization``)."""
        return auth_headers(self.api_key)

    @property
    def url(self) -> str:
        """The full URL of the endpoint."""
        return self.base_url.rstrip("/") + get_endpoint(self.endpoint).path


MIN_PROCESSES = 1
MAX_PROCESSES = 64
"""The range of :attr:`LoadSpec.processes` (client processes sharing one point's load)."""

DEFAULT_STALL_TIMEOUT_S = 120.0
"""Seconds without a byte on any open stream after which a run counts as stalled (flows and ``alflow bench``)."""

MAX_SECONDS = (2**63 - 1) // 10**9
"""The longest timeout or duration (s, about 292 years): the run's clock counts signed 64-bit nanoseconds, and a
longer time (1e300) cannot be counted on it at all (it used to fail with an OverflowError mid-run)."""
MAX_REQUEST_RATE = 1e9
"""The highest request rate (sessions/s): arrivals are scheduled in whole nanoseconds, so a faster rate cannot be
told apart from one start per nanosecond (leave the rate unset for 'as fast as the concurrency allows')."""
MIN_REQUEST_RATE = 1e-6
"""Requests a second at the least (one in about 12 days): a rate of 1e-300 overflowed the first gap."""


@dataclass(frozen=True, slots=True)
class LoadSpec:
    """How the load is offered.

    ``concurrency`` caps sessions in flight; ``request_rate`` (sessions/s, None = as fast as the
    cap allows) spaces starts by ``arrival``; the measured phase stops after ``num_prompts``
    sessions or once ``duration_s`` has passed (in-flight sessions finish); ``warmup`` sessions
    run first and are flagged ``warmup``. ``timeout_s`` bounds each request; ``stall_timeout_s``
    (None: off) aborts the run when the server sends nothing on any open stream for that long
    (a hung server fails its point within the stall timeout, not after every request's timeout).
    """

    concurrency: int = 1
    request_rate: float | None = None
    arrival: Arrival = "poisson"
    num_prompts: int | None = None
    duration_s: float | None = None
    warmup: int = 0
    timeout_s: float | None = 600.0
    stall_timeout_s: float | None = None
    seed: int = 0
    keep_text: bool = True
    transport: Literal["fast", "aiohttp"] = "fast"
    processes: int = 1
    """Client processes that share the load (:mod:`alflow.loadgen.multiproc`; Linux only above 1)."""
    auto_processes: bool = False
    """Choose the processes from the warm-up: it runs in this process with the load monitor, and when it shows
    the client as the bottleneck (:func:`alflow.loadgen.timing.client_bound_reasons`) the measured phase is split
    over as many processes as the machine has cores (at most ``concurrency``); needs ``warmup`` > 0."""

    def check(self) -> None:
        """Raise :class:`InvalidInputError` naming the first invalid field."""
        if self.concurrency < 1:
            raise InvalidInputError(f"concurrency={self.concurrency} must be at least 1")
        if self.request_rate is not None and not MIN_REQUEST_RATE <= self.request_rate <= MAX_REQUEST_RATE:
            raise InvalidInputError(
                f"request_rate={self.request_rate} must be in [{MIN_REQUEST_RATE:g}, {MAX_REQUEST_RATE:.0e}] sessions/s "
                "(None = unlimited)"
            )
        if self.num_prompts is not None and self.num_prompts < 1:
            raise InvalidInputError(f"num_prompts={self.num_prompts} must be at least 1")
        if self.warmup < 0:
            raise InvalidInputError(f"warmup={self.warmup} must not be negative")
        for name in ("duration_s", "timeout_s", "stall_timeout_s"):
            value = getattr(self, name)
            if value is not None and not 0 < value <= MAX_SECONDS:  # NaN fails both comparisons
                raise InvalidInputError(
                    f"{name}={value} must be a number of seconds in (0, {MAX_SECONDS:,}] (None = no limit)"
                )
        if not MIN_PROCESSES <= self.processes <= MAX_PROCESSES:
            raise InvalidInputError(
                f"processes={self.processes} must be an integer in [{MIN_PROCESSES}, {MAX_PROCESSES}]"
            )
        if self.processes > self.concurrency:
            raise InvalidInputError(
                f"processes={self.processes} must not exceed concurrency={self.concurrency} "
                "(each client process keeps at least one session in flight)"
            )
        if self.auto_processes and (self.processes != 1 or self.warmup < 1):
            raise InvalidInputError(
                f"auto_processes needs processes=1 and a warm-up to judge the client by (processes="
                f"{self.processes}, warmup={self.warmup})"
            )
        if self.processes > 1 and not sys.platform.startswith("linux"):
            raise InvalidInputError(
                f"processes={self.processes} needs Linux (one monotonic clock shared by every process); "
                f"this is {sys.platform}: use processes=1"
            )


def arrival_offsets_ns(spec: LoadSpec) -> Iterator[int]:
    """When each measured session may start, in ns after the phase starts (``spec.request_rate`` set).

    The first starts at once; then gaps of ``1 / rate`` (constant) or exponential gaps of mean ``1 / rate``
    drawn from ``random.Random(spec.seed)`` (poisson; the first draw is skipped), so a seed fixes the
    whole schedule. A session also waits for a free concurrency slot, so it may start later, never earlier.
    """
    if spec.request_rate is None:
        raise InvalidInputError("arrival offsets need a request rate")
    rate, rng, at = spec.request_rate, random.Random(spec.seed), 0
    if spec.arrival == "poisson":
        rng.expovariate(rate)  # the first draw is skipped
    while True:
        yield at
        at += int((rng.expovariate(rate) if spec.arrival == "poisson" else 1.0 / rate) * 1e9)


class Progress(Protocol):
    """Progress sink (the CLI's rich bar); library and Prefect runs pass none."""

    def start(self, total: int | None, description: str) -> None:
        """A phase begins with ``total`` sessions (None when the run is time-bound)."""
        ...

    def advance(self) -> None:
        """One session finished."""
        ...


@dataclass(slots=True)
class LoadResult:
    """Every record of a run, plus the measured window on the client clock (ns)."""

    records: list[RequestRecord]
    measure_start_ns: int
    measure_end_ns: int
    wall_start_s: float
    wall_end_s: float
    client_load: ClientLoad | None = None
    """How busy the client was over the measured phase (:mod:`alflow.loadgen.monitor`); None before it began."""

    @property
    def duration_s(self) -> float:
        """Seconds from the measured phase's start to the last measured stream's end."""
        return max(0, self.measure_end_ns - self.measure_start_ns) / 1e9


@dataclass(frozen=True, slots=True)
class LoadCall:
    """One load as ``run_load`` was asked for it: the workload, where it goes, how, and the caller's hooks.

    What ``run_load`` hands on whole to the load's runners (one process, several, or the automatic choice).
    """

    sessions: Sequence[Session]
    target: Target
    spec: LoadSpec
    clock: Clock = time.perf_counter_ns
    on_measure_start: Callable[[], Awaitable[None]] | None = None
    progress: Progress | None = None
    warmup_sessions: Sequence[Session] | None = None
    sink: list[RequestRecord] | None = None


class LoadAbortedError(AlflowError):
    """A fatal error stopped the run; ``result`` holds the records gathered so far."""

    def __init__(self, message: str, result: LoadResult) -> None:
        super().__init__(message)
        self.result = result


class StalledServerError(AlflowError):
    """The server sent nothing on any open stream for the stall timeout."""
