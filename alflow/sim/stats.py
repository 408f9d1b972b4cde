"""The simulated engine's counters and histograms: what its metrics dialects expose (:mod:`alflow.sim.dialects`).

Plain numbers, cheap to bump from the engine's step loop (:mod:`alflow.sim.engine`); each framework's emitter
(``alflow/frameworks/<name>/sim.py``) names and labels them as that framework does.
"""

from __future__ import annotations

import bisect
import collections
import time
from dataclasses import dataclass, field

TTFT_BUCKETS_S = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
ITL_BUCKETS_S = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
E2E_BUCKETS_S = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)


class Histogram:
    """A cheap fixed-bucket histogram (bucket counts, sum); exposition is the dialect's job."""

    __slots__ = ("bounds", "count", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        """Add one observation."""
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def cumulative(self) -> list[tuple[str, int]]:
        """``(le, cumulative count)`` pairs ending with ``+Inf``."""
        out: list[tuple[str, int]] = []
        total = 0
        for bound, n in zip(self.bounds, self.counts, strict=False):
            total += n
            out.append((repr(float(bound)), total))
        out.append(("+Inf", total + self.counts[-1]))
        return out


@dataclass
class EngineStats:
    """Counters and gauges of the engine since start (plain numbers: cheap to bump)."""

    k: int
    created_s: float = field(default_factory=time.time)
    num_drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    verify_tokens: int = 0
    verify_steps: int = 0
    accept_hist: list[int] = field(default_factory=list)
    prompt_tokens: int = 0
    generation_tokens: int = 0
    requests_finished: dict[str, int] = field(default_factory=lambda: {"stop": 0, "length": 0, "abort": 0})
    requests_received: int = 0
    num_running: int = 0
    num_waiting: int = 0
    ttft: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS_S))
    itl: Histogram = field(default_factory=lambda: Histogram(ITL_BUCKETS_S))
    e2e: Histogram = field(default_factory=lambda: Histogram(E2E_BUCKETS_S))
    window_al: float = 0.0
    window_rate: float = 0.0
    last_step_al: float = 0.0
    window_drafts: int = 0
    window_tokens: int = 0
    iterations: collections.deque[dict[str, object]] = field(
        default_factory=lambda: collections.deque(maxlen=1000)
    )
    finished_requests: int = 0
    """Requests that finished (any reason): what request-level counters count (SGLang, TensorRT-LLM)."""
    finished_output_tokens: int = 0
    """Output tokens of finished requests as served (first token from prefill included, cut at the limit)."""
    finished_hist: list[int] = field(default_factory=list)
    """The accept-length histogram of finished requests' verify steps (moves when a request finishes)."""

    def __post_init__(self) -> None:
        if not self.accept_hist:
            self.accept_hist = [0] * (self.k + 1)
        if not self.finished_hist:
            self.finished_hist = [0] * (self.k + 1)

    def accepted_per_position(self) -> list[int]:
        """Requests-steps that accepted the draft at position i (0-based): ``sum_{a > i} hist[a]``."""
        return _tail_sums(self.accept_hist, self.k)

    def finished_accepted_per_position(self) -> list[int]:
        """As :meth:`accepted_per_position`, over the verify steps of finished requests only."""
        return _tail_sums(self.finished_hist, self.k)

    @property
    def finished_verify_steps(self) -> int:
        """Verify steps of finished requests (SGLang's ``spec_verify_ct`` summed at finish)."""
        return sum(self.finished_hist)


def _tail_sums(hist: list[int], k: int) -> list[int]:
    """``[sum_{a > i} hist[a] for i in 0..K-1]``: steps that accepted the draft at position i."""
    out: list[int] = []
    tail = 0
    for a in range(k, 0, -1):
        tail += hist[a]
        out.append(tail)
    return out[::-1]
