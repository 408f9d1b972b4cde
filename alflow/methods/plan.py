"""Which points a concurrency sweep measures, in which order, with how many prompts: a plan object.

M2 measures each configured concurrency ``repeats`` times; every repeat is its own point with its own warm-up,
window and prompts (seeded apart, so a repeat is not the same prompts again). The plan owns that arithmetic so
it is tested on its own. The procedure asks the plan for each next point with the points measured so far
(:meth:`ConcurrencyPlan.next_point`): another plan (an adaptive search for the highest concurrency that meets a
latency target, say, as guidellm's sweep strategies do) decides from them, and the procedure is unchanged.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from alflow.results.rows import M2Point

WARMUP_SEED_SHIFT = 500
"""The warm-up prompts' seed offset over the point's own: disjoint from every point's for up to 500 repeats."""
POINT_SEED_STRIDE = 1000
"""Seed offsets of consecutive concurrencies lie this far apart (room for the repeats and their warm-ups)."""


@dataclass(frozen=True)
class PlannedPoint:
    """One point to measure: its concurrency and repeat, its prompt counts and seeds."""

    index: int
    """Position of the concurrency in the sweep (0-based)."""
    concurrency: int
    repeat: int
    """0-based repeat of this concurrency."""
    repeats: int
    prompts: int
    warmup: int
    seed_offset: int
    """Seed offset of the measured prompts."""
    warmup_seed_offset: int

    @property
    def label(self) -> str:
        """``concurrency C`` and, with several repeats, ``repeat R/N``: how failures and logs name the point."""
        text = f"concurrency {self.concurrency}"
        return text + (f" repeat {self.repeat + 1}/{self.repeats}" if self.repeats > 1 else "")

    @property
    def progress_key(self) -> str:
        """The key of the point's live progress artifact (one per point)."""
        return f"m2-progress-c{self.concurrency}" + (f"-r{self.repeat}" if self.repeats > 1 else "")


class ConcurrencyPlan(Protocol):
    """The points of a sweep, one at a time, each decided with the points measured before it."""

    def next_point(self, measured: Sequence[M2Point]) -> PlannedPoint | None:
        """The next point to measure after ``measured`` (in the order measured); None: the sweep is done."""
        ...


@dataclass(frozen=True)
class FixedConcurrencies:
    """The configured concurrencies, in order, each ``repeats`` times, with prompts per concurrency slot."""

    concurrencies: Sequence[int]
    prompts_per_concurrency: int
    warmup_per_concurrency: int
    repeats: int = 1

    def __post_init__(self) -> None:
        if not self.concurrencies:
            raise ValueError("a concurrency plan needs at least one concurrency")
        if any(c < 1 for c in self.concurrencies):
            raise ValueError(f"concurrencies must be at least 1: {list(self.concurrencies)}")
        if self.repeats < 1 or self.prompts_per_concurrency < 1 or self.warmup_per_concurrency < 0:
            raise ValueError("repeats and prompts per concurrency must be at least 1, warm-up at least 0")

    def next_point(self, measured: Sequence[M2Point]) -> PlannedPoint | None:
        """The point after the ``len(measured)`` measured: a fixed plan reads nothing else of them."""
        return next(itertools.islice(self.points(), len(measured), None), None)

    def points(self) -> Iterator[PlannedPoint]:
        """Concurrency by concurrency, each repeat in turn."""
        for index, conc in enumerate(self.concurrencies):
            for rep in range(self.repeats):
                base = POINT_SEED_STRIDE * index + rep
                yield PlannedPoint(
                    index=index,
                    concurrency=conc,
                    repeat=rep,
                    repeats=self.repeats,
                    prompts=self.prompts_per_concurrency * conc,
                    warmup=self.warmup_per_concurrency * conc,
                    seed_offset=base,
                    warmup_seed_offset=base + WARMUP_SEED_SHIFT,
                )
