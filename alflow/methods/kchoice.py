"""K with its uncertainty: per concurrency, the K a sweep's repeated M2 points support, and vLLM's K schedule.

The rule is vLLM's offline tuner, ``vllm bench sweep tune_speculative_k`` (vLLM PR #49163,
``vllm/benchmarks/sweep/tune_speculative_k.py``, ``aggregate_measurements`` and
``select_k_by_batch_size``; documented in ``docs/features/speculative_decoding/dynamic_speculative_decoding.md``):

- per (concurrency, K) the repeats' objective gives a median and a MAD (median absolute deviation from
  the median); the candidate's **score** is ``max(median - PENALTY * MAD_TO_SIGMA * MAD, 0)``, a
  conservative figure that a noisy K pays for;
- candidates whose score is at least ``(1 - TIE_TOLERANCE)`` of the best score are **tied**, and the
  smallest tied K wins (the cheaper drafter, the smaller verify batch).

With one repeat per point the MAD is 0, the score is the measured figure, and the rule is the old
argmax (:func:`alflow.methods.points.best_k` before repeats) with one change: a smaller K within 1 % of the
best now wins instead of an exact tie only.

Both objectives alflow reports are maximised: output throughput per GPU and median interactivity
(tokens/s/user). Only valid points take part (audit passed, no failed request, not partial), as vLLM's
tuner refuses records with failed requests.

:func:`k_schedule` turns the choices into vLLM's ``num_speculative_tokens_per_batch_size``: a list of
inclusive ``[batch_start, batch_end, K]`` ranges, the first starting at 1 (``vllm/config/speculative.py``,
validated by ``validate_and_normalize_dynamic_sd_schedule`` in ``vllm/v1/spec_decode/dynamic/utils.py``).
The sweep's concurrency stands for the batch size, as ``max_concurrency`` does in vLLM's tuner: with
fixed-length requests and a saturated load, the decode batch is the concurrency.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, Final

from pydantic import Field, PlainSerializer, SerializerFunctionWrapHandler, computed_field, model_serializer

from alflow.errors import InvalidInputError
from alflow.frameworks.registry import repeated_draws
from alflow.metrics.point_metrics import INTERACTIVITY, OUTPUT_PER_GPU, PointMetric
from alflow.results.rows import M2Point
from alflow.results.store import StoredRun
from alflow.results.view import m2_points
from alflow.util.rows import dump_row

PENALTY: Final = 1.0
"""Weight of the MAD penalty: vLLM's ``--uncertainty-penalty`` default (``tune_speculative_k.py``, PR #49163)."""
MAD_TO_SIGMA: Final = 1.4826
"""MAD to standard deviation for a normal distribution; vLLM multiplies the penalty by it (same file)."""
TIE_TOLERANCE: Final = 0.01
"""Scores within 1 % of the best are ties, the smaller K wins: vLLM's ``--relative-tolerance`` default (same file)."""
MIN_RUNS: Final = 3
"""vLLM's ``--min-runs`` default: its tuner refuses fewer repeats; alflow warns (repeats=1 stays usable)."""
MAX_RELATIVE_MAD: Final = 0.1
"""vLLM's ``--max-objective-relative-mad`` default: its tuner refuses a noisier candidate; alflow flags it."""

RULE: Final = (
    f"score = median - {PENALTY:g} x {MAD_TO_SIGMA} x MAD over a K's valid repeats (floored at 0); K whose "
    f"score is within {TIE_TOLERANCE:.0%} of the best are ties and the smallest of them wins "
    "(vLLM's tune_speculative_k)"
)
"""The rule in one sentence, for reports."""


class Objective(StrEnum):
    """What the K choice maximises (both figures alflow reports per M2 point)."""

    throughput = "throughput"
    interactivity = "interactivity"


OBJECTIVE_METRICS: Final[Mapping[Objective, PointMetric]] = {
    Objective.throughput: OUTPUT_PER_GPU,
    Objective.interactivity: INTERACTIVITY,
}
"""The declared figure of a point each objective reads."""

OBJECTIVE_LABELS: Final[Mapping[Objective, str]] = {
    Objective.throughput: "output tok/s/GPU",
    Objective.interactivity: "median interactivity (tok/s/user)",
}


def spread(values: Sequence[float]) -> tuple[float, float]:
    """The median and the MAD (median absolute deviation from the median) of ``values`` (not empty)."""
    if not values:
        raise ValueError("spread of no values")
    median = statistics.median(values)
    return median, statistics.median(abs(v - median) for v in values)


_FINITE_OR_NONE = Annotated[float, PlainSerializer(lambda x: x if math.isfinite(x) else None)]
_FLAT: Any = Field(exclude=True)
"""A candidate :class:`KChoice` stores by its K and figures, not as a row of its own."""


@dataclass(frozen=True)
class Candidate:
    """One K at one concurrency: its repeats' objective values, their spread and the rule's score (stored with n)."""

    concurrency: int
    k: int
    values: tuple[float, ...]
    """The objective of each valid repeat, in repeat order (never averaged away)."""
    median: float
    mad: float
    low: float
    high: float
    score: float
    """``max(median - PENALTY * MAD_TO_SIGMA * mad, 0)``."""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def n(self) -> int:
        """How many repeats the candidate has."""
        return len(self.values)

    @computed_field(return_type=_FINITE_OR_NONE)  # type: ignore[prop-decorator]
    @property
    def relative_mad(self) -> float:
        """MAD over median (vLLM's stability measure); inf for a zero median with a spread."""
        if self.median != 0:
            return self.mad / abs(self.median)
        return 0.0 if self.mad == 0 else math.inf

    @property
    def unstable(self) -> bool:
        """Noisier than vLLM's tuner accepts (relative MAD above :data:`MAX_RELATIVE_MAD`)."""
        return self.relative_mad > MAX_RELATIVE_MAD


def candidate(concurrency: int, k: int, values: Iterable[float]) -> Candidate:
    """A candidate from its repeats' values (finite, at least one)."""
    vals = tuple(float(v) for v in values)
    if not vals or not all(math.isfinite(v) for v in vals):
        raise ValueError(f"K={k} at concurrency {concurrency}: need finite objective values, got {vals}")
    median, mad = spread(vals)
    score = max(median - PENALTY * MAD_TO_SIGMA * mad, 0.0)
    return Candidate(concurrency, k, vals, median, mad, min(vals), max(vals), score)


@dataclass(frozen=True)
class KChoice:
    """At one concurrency, for one objective: the chosen K, the best-scoring K, the ties and the runner-up.

    Stored (the sweep's ``k_choice``) as pydantic serializes it, the chosen, best and runner-up candidates by their
    K and figures (``chosen_k``, ``best_score``...) beside every candidate's row.
    """

    concurrency: int
    objective: Objective
    chosen: Annotated[Candidate, _FLAT]
    best: Annotated[Candidate, _FLAT]
    """The highest score (the chosen K is the smallest K within :data:`TIE_TOLERANCE` of it)."""
    ties: tuple[int, ...]
    """Every K whose score is within the tolerance of the best, the chosen one included, ascending."""
    runner_up: Annotated[Candidate | None, _FLAT]
    """The best-scoring candidate other than the chosen one (None: only one K was measured)."""
    candidates: tuple[Candidate, ...]
    """Every K measured here, ascending."""

    @model_serializer(mode="wrap")
    def _stored(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        up = self.runner_up
        return {
            **handler(self),
            "chosen_k": self.chosen.k, "chosen_score": self.chosen.score, "chosen_median": self.chosen.median,
            "chosen_mad": self.chosen.mad, "best_score_k": self.best.k, "best_score": self.best.score,
            "runner_up_k": None if up is None else up.k, "runner_up_score": None if up is None else up.score,
        }  # fmt: skip


def choose(candidates: Sequence[Candidate], objective: Objective) -> KChoice | None:
    """The rule of vLLM's tuner over one concurrency's candidates; None when none has a positive score.

    vLLM's tuner refuses a batch size without a positive conservative objective; here that
    concurrency simply gets no choice (the caller says so).
    """
    if not candidates:
        return None
    concs = {c.concurrency for c in candidates}
    if len(concs) != 1:
        raise ValueError(f"candidates of several concurrencies {sorted(concs)}")
    ordered = tuple(sorted(candidates, key=lambda c: c.k))
    best = max(ordered, key=lambda c: (c.score, -c.k))
    if best.score <= 0:
        return None
    tied = [c for c in ordered if c.score >= (1.0 - TIE_TOLERANCE) * best.score]
    chosen = tied[0]
    others = [c for c in ordered if c.k != chosen.k]
    runner_up = max(others, key=lambda c: (c.score, -c.k)) if others else None
    return KChoice(
        concurrency=chosen.concurrency,
        objective=objective,
        chosen=chosen,
        best=best,
        ties=tuple(c.k for c in tied),
        runner_up=runner_up,
        candidates=ordered,
    )


def candidates_of(points: Iterable[M2Point], objective: Objective) -> dict[int, list[Candidate]]:
    """Per concurrency, one candidate per K from the valid points' repeats (a repeat lacking the figure is left out)."""
    metric = OBJECTIVE_METRICS[objective]
    grouped: dict[tuple[int, int], list[float]] = {}
    for p in points:
        value = p.value(metric)
        if not p.valid or value is None or not math.isfinite(value):
            continue
        grouped.setdefault((p.concurrency, p.k), []).append(float(value))
    out: dict[int, list[Candidate]] = {}
    for (conc, k), values in sorted(grouped.items()):
        out.setdefault(conc, []).append(candidate(conc, k, values))
    return out


def choose_k(points: Iterable[M2Point], objective: Objective) -> list[KChoice]:
    """Per concurrency (ascending), the K chosen by :func:`choose` from the valid points' repeats.

    A concurrency where no K has a positive score is left out.
    """
    choices = (choose(cands, objective) for _, cands in sorted(candidates_of(points, objective).items()))
    return [choice for choice in choices if choice is not None]


def all_choices(points: Sequence[M2Point]) -> list[KChoice]:
    """The choices of every objective (throughput first), each per concurrency ascending."""
    return [choice for objective in Objective for choice in choose_k(points, objective)]


def spread_rows(points: Sequence[M2Point]) -> list[dict[str, Any]]:
    """Per (concurrency, K) over the valid repeats: n, and each objective's median, MAD, min and max.

    ``repeats`` counts every stored repeat of the pair, ``n`` the valid ones, ``draws`` the independent synthetic
    draws among them (1 for a framework whose repeats repeat one draw, :func:`alflow.frameworks.registry.repeated_draws`:
    their spread is the timing's, not the acceptance's); a pair without a valid repeat still has its row (its
    figures None), so a report shows what was measured and dropped.
    """
    stored = Counter((p.concurrency, p.k) for p in points)
    valid = Counter((p.concurrency, p.k) for p in points if p.valid)
    one_draw = {(p.concurrency, p.k) for p in points if repeated_draws(p.framework) is not None}
    by_objective = {
        objective: {(c.concurrency, c.k): c for cs in candidates_of(points, objective).values() for c in cs}
        for objective in Objective
    }
    rows = []
    for conc, k in sorted(stored):
        row: dict[str, Any] = {
            "concurrency": conc,
            "k": k,
            "repeats": stored[(conc, k)],
            "n": valid[(conc, k)],
            "draws": min(valid[(conc, k)], 1) if (conc, k) in one_draw else valid[(conc, k)],
        }
        for objective, cands in by_objective.items():
            c = cands.get((conc, k))
            for column, attr in (
                ("median", "median"),
                ("mad", "mad"),
                ("min", "low"),
                ("max", "high"),
                ("score", "score"),
            ):
                row[f"{objective.value}_{column}"] = None if c is None else getattr(c, attr)
        rows.append(row)
    return rows


@dataclass(frozen=True)
class KSchedule:
    """vLLM's ``num_speculative_tokens_per_batch_size`` from a sweep's choices, and what to know about it."""

    objective: Objective
    ranges: tuple[tuple[int, int, int], ...]
    """Inclusive ``(batch_start, batch_end, K)``, starting at 1, adjacent equal K merged."""
    choices: tuple[KChoice, ...]
    warnings: tuple[str, ...]

    @property
    def max_k(self) -> int:
        """The largest K of the schedule: the speculative config's ``num_speculative_tokens`` must be at least this."""
        return max(k for _, _, k in self.ranges)

    def speculative_config(self) -> dict[str, Any]:
        """The fragment to merge into vLLM's ``--speculative-config`` (method and drafter are the user's)."""
        return {
            "num_speculative_tokens": self.max_k,
            "num_speculative_tokens_per_batch_size": [list(r) for r in self.ranges],
        }

    def to_dict(self) -> dict[str, Any]:
        """The schedule with its decisions and warnings (``--json``)."""
        return {
            **self.speculative_config(),
            "objective": self.objective.value,
            "penalty": PENALTY,
            "mad_to_sigma": MAD_TO_SIGMA,
            "tie_tolerance": TIE_TOLERANCE,
            "decisions": [dump_row(c) for c in self.choices],
            "warnings": list(self.warnings),
        }


def k_schedule(points: Sequence[M2Point], objective: Objective) -> KSchedule:
    """The K schedule of vLLM from a sweep's points: each measured concurrency's K up to the next one.

    The ranges follow ``build_schedule`` of vLLM's tuner: a measured concurrency c_i starts a range
    that ends at c_{i+1} - 1; the last ends at the largest measured concurrency (vLLM's lookup keeps
    the last K above it); adjacent ranges with the same K merge. vLLM's config wants the first range to
    start at 1: when the sweep did not measure concurrency 1, the smallest measured concurrency's K is
    stretched down to 1 and a warning says so (vLLM's tuner refuses instead). Raises
    :class:`InvalidInputError` when no concurrency has a choice.
    """
    choices = choose_k(points, objective)
    if not choices:
        raise InvalidInputError(
            f"no valid M2 point with a positive {OBJECTIVE_LABELS[objective]}: nothing to build a K schedule from"
        )
    warnings: list[str] = []
    anchors = [c.concurrency for c in choices]
    measured = sorted({p.concurrency for p in points if p.valid})
    missing = [c for c in measured if c not in anchors]
    if missing:
        warnings.append(f"concurrency {missing}: no K with a positive score, left to the neighbouring range")
    if anchors[0] != 1:
        warnings.append(
            f"concurrency 1 was not measured: batch sizes 1..{anchors[0] - 1} use the K of concurrency "
            f"{anchors[0]} (vLLM's tuner would refuse this; sweep concurrency 1 to measure it)"
        )
    ks = sorted({c.k for c in choices[0].candidates})
    for choice in choices[1:]:
        here = sorted(c.k for c in choice.candidates)
        if here != ks:
            warnings.append(
                f"concurrency {choice.concurrency} has K candidates {here}, concurrency {anchors[0]} has {ks}"
            )
    fewest = min(c.n for choice in choices for c in choice.candidates)
    if fewest < MIN_RUNS:
        warnings.append(
            f"only {fewest} repeat(s) for some (K, concurrency): the MAD penalty needs repeats; vLLM's tuner "
            f"asks for at least {MIN_RUNS} (set repeats in the benchmark parameters)"
        )
    for choice in choices:
        for c in choice.candidates:
            if c.unstable:
                warnings.append(
                    f"K={c.k} at concurrency {c.concurrency}: relative MAD {c.relative_mad:.3f} exceeds "
                    f"{MAX_RELATIVE_MAD} (vLLM's tuner would refuse this candidate as unstable)"
                )
    ranges: list[list[int]] = []
    for i, choice in enumerate(choices):
        start = 1 if i == 0 else choice.concurrency
        end = choices[i + 1].concurrency - 1 if i + 1 < len(choices) else choice.concurrency
        if ranges and ranges[-1][2] == choice.chosen.k:
            ranges[-1][1] = end
        else:
            ranges.append([start, end, choice.chosen.k])
    return KSchedule(
        objective=objective,
        ranges=tuple((a, b, k) for a, b, k in ranges),
        choices=tuple(choices),
        warnings=tuple(warnings),
    )


def run_k_schedule(run: StoredRun, objective: Objective) -> KSchedule:
    """The K schedule of a stored sweep run (its ``spec_stats`` points, every repeat).

    Raises :class:`InvalidInputError` for a run that is not a sweep or has no point with a choice.
    """
    flow = run.manifest.flow
    if flow != "sweep":
        raise InvalidInputError(
            f"run {run.dir}: flow {flow!r} is not a sweep; k-schedule reads a K sweep run (alflow run sweep)"
        )
    points = m2_points(run)
    if not any(p.valid for p in points):
        raise InvalidInputError(
            f"run {run.dir}: no valid M2 point ({len(points)} stored); a K schedule needs valid points"
        )
    return k_schedule(points, objective)


def describe(schedule: KSchedule) -> list[str]:
    """One line per concurrency: the chosen K, its score, the ties and the runner-up."""
    lines = []
    for c in schedule.choices:
        runner = "none" if c.runner_up is None else f"K={c.runner_up.k} score {c.runner_up.score:.1f}"
        lines.append(
            f"concurrency {c.concurrency}: K={c.chosen.k} score {c.chosen.score:.1f} "
            f"(median {c.chosen.median:.1f}, MAD {c.chosen.mad:.1f}, n={c.chosen.n}); "
            f"ties {list(c.ties)}; runner-up {runner}"
        )
    return lines
