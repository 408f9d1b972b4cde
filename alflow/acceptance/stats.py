"""Acceptance-length statistics from server counters, pooled per-request histograms or per-step accept counts.

Formulas (DOMAIN.md section 2), over a measured window (always deltas, never lifetime totals):

- ``AL = 1 + accepted_tokens / num_drafts`` where ``num_drafts`` counts (request, step) pairs that
  carried drafts;
- draft acceptance rate ``= accepted_tokens / draft_tokens``;
- unconditional per-position rate ``p_i = accepted_at_position[i-1] / num_drafts``;
- conditional rate ``c_i = p_i / p_{i-1}`` with ``p_0 = 1``;
- histogram: steps that accepted exactly j drafts (emitted j + 1 tokens) are
  ``accepted_at_position[j-1] - accepted_at_position[j]``; conversely, from a dense histogram ``h`` of
  steps by accepted drafts (vLLM's per-request ``acceptance_histogram``, pooled),
  ``accepted_at_position[i] = sum_{j > i} h[j]`` (:func:`from_histogram`).

Confidence intervals for AL (normal approximation, default 95%):

- ``per-step-clustered``: per-step accept counts grouped by request; the ratio estimator's
  cluster-robust variance, so correlation within a request (or within a batch) is not hidden;
- ``per-step-iid``: per-step accept counts with no grouping; steps assumed independent;
- ``histogram-iid``: only counters, but per-position counters give the exact histogram; steps
  assumed independent (an approximation: real steps of one request are correlated);
- ``variance-bound``: only totals; the Bhatia-Davis bound ``var <= mu (K - mu)`` on accepted drafts
  per step gives a conservative interval (an approximation that is never too narrow under
  independence).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from statistics import NormalDist
from typing import Annotated, Literal

from pydantic import PlainSerializer, computed_field

from alflow.acceptance.synthetic import conditional_from_unconditional
from alflow.errors import AlflowError, InvalidInputError

CIMethod = Literal["per-step-clustered", "per-step-iid", "histogram-iid", "variance-bound"]

NO_STEPS_NOTE = "no speculative steps observed in the window (zero drafts): AL is undefined"
CI_LEVEL = 0.95
"""The default confidence level of the AL interval (M1 takes ``GateTolerances.confidence``)."""


def _r(x: float) -> float:
    return round(x, 12) + 0.0


R12 = Annotated[float, PlainSerializer(_r)]
"""A float stored rounded to 12 digits (and -0.0 as 0.0)."""


class CounterResetError(AlflowError):
    """A counter went backwards inside the measured window: the server restarted or reset."""


@dataclass(frozen=True)
class ConfidenceInterval:
    """A two-sided confidence interval for AL and how it was obtained."""

    low: float
    high: float
    level: float
    method: CIMethod
    note: str = ""


@dataclass(frozen=True)
class SpecStats:
    """Speculative-decoding statistics over one measured window (DESIGN.md section 2).

    Stored by pydantic (:func:`alflow.util.rows.dump_row`): AL and rates rounded to 12 digits, histograms keyed by strings.

    When ``observed`` is False no step carried drafts: the derived fields are None and ``note``
    says so; nothing divides by zero.
    """

    num_drafts: int
    draft_tokens: int | None
    accepted_tokens: int
    accepted_per_position: tuple[int, ...] | None
    k: int | None
    al: R12 | None
    acceptance_rate: R12 | None
    per_position_rates: tuple[R12, ...] | None
    conditional_rates: tuple[R12 | None, ...] | None
    histogram: dict[int, int] | None
    ci: ConfidenceInterval | None
    note: str = ""
    truncated_requests: int | None = None
    """Requests whose last verify step the counters count only up to the request's limit (SGLang counts
    ``len(output_ids)``, cut at ``max_tokens`` or EOS): the AL is low by their cut tokens / ``num_drafts``.
    None: the counters count every accepted draft (vLLM, TensorRT-LLM)."""
    source: str = "counters"
    """Where the counts come from: ``counters`` (the server's metrics over the window), ``per-request`` (the
    responses' own counts over exactly the measured requests), ``steps`` (per-step data)."""
    full_k_histogram: dict[int, int] | None = None
    """Like :attr:`histogram` (accept length -> steps) over only the steps that carried all K drafts, where the
    server says each step's draft count (vLLM ``detailed``); None: not known. The shape test judges these."""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def observed(self) -> bool:
        """True when at least one speculative step was observed."""
        return self.num_drafts > 0


# --------------------------------------------------------------------------------------------
# Counters


def as_count(name: str, value: float) -> int:
    """A counter value or delta as a non-negative integer; raise naming ``name`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidInputError(f"{name}={value!r} is not a finite number")
    if value < 0:
        raise CounterResetError(
            f"{name} went backwards by {-value:g} inside the measured window: the server restarted "
            "or its counters were reset; measure the window again"
        )
    rounded = round(value)
    if abs(value - rounded) > 1e-6 * max(1.0, abs(value)):
        raise InvalidInputError(f"{name}={value!r} is not a whole number of tokens or steps")
    return int(rounded)


def counter_delta(name: str, before: float, after: float) -> int:
    """``after - before`` for a counter, as an integer; a negative delta is a counter reset."""
    return as_count(name, after - before)


def from_counters(
    num_drafts: float,
    accepted_tokens: float,
    *,
    draft_tokens: float | None = None,
    accepted_per_position: Sequence[float] | None = None,
    k: int | None = None,
    level: float = CI_LEVEL,
    note: str = "",
) -> SpecStats:
    """Spec-decode statistics from counter deltas over the measured window.

    ``num_drafts`` is the number of (request, step) pairs that carried drafts; for a framework
    that only counts verify steps and emitted tokens, pass steps and ``tokens - steps``.
    ``k`` is inferred as ``draft_tokens / num_drafts`` when not given and that ratio is whole.
    """
    n = as_count("num_drafts", num_drafts)
    accepted = as_count("accepted_tokens", accepted_tokens)
    drafts = None if draft_tokens is None else as_count("draft_tokens", draft_tokens)
    per_pos = (
        None
        if accepted_per_position is None
        else tuple(as_count(f"accepted_per_position[{i}]", v) for i, v in enumerate(accepted_per_position))
    )
    if k is None and drafts is not None and n > 0 and drafts % n == 0:
        k = drafts // n
    if k is None and per_pos is not None and per_pos:
        k = len(per_pos)
    if n == 0:
        if accepted or (drafts or 0) or any(per_pos or ()):
            raise InvalidInputError(
                f"counters are inconsistent: num_drafts=0 but accepted_tokens={accepted}, "
                f"draft_tokens={drafts}, accepted_per_position={per_pos}"
            )
        return SpecStats(
            0, drafts, 0, per_pos, k, None, None, None, None, None, None, _join(NO_STEPS_NOTE, note)
        )
    if k is not None and accepted > n * k:
        raise InvalidInputError(
            f"counters are inconsistent: accepted_tokens={accepted} exceeds num_drafts x K = {n} x {k}"
        )
    al = 1.0 + accepted / n
    rate = None if not drafts else accepted / drafts
    rates: tuple[float, ...] | None = None
    conditional: tuple[float | None, ...] | None = None
    histogram: dict[int, int] | None = None
    notes = [note] if note else []
    if per_pos is not None:
        for i, count in enumerate(per_pos):
            prev = n if i == 0 else per_pos[i - 1]
            if count > prev:
                what = "num_drafts" if i == 0 else f"accepted_per_position[{i - 1}]={prev}"
                raise InvalidInputError(
                    f"counters are inconsistent: accepted_per_position[{i}]={count} exceeds {what} "
                    "(a draft can only be accepted when every draft before it was)"
                )
        if sum(per_pos) != accepted:
            notes.append(
                f"per-position counts sum to {sum(per_pos)}, accepted_tokens is {accepted} "
                "(scrape not atomic?): AL uses accepted_tokens"
            )
        rates = tuple(c / n for c in per_pos)
        conditional = conditional_from_unconditional(rates)
        full = [n, *per_pos, 0]  # steps by tokens emitted (1..K+1)
        histogram = {j + 1: full[j] - full[j + 1] for j in range(len(per_pos) + 1)}
        ci = _ci_from_histogram(histogram, level)
    elif k is not None:
        ci = _ci_from_bound(n, accepted, k, level)
    else:
        ci = None
        notes.append("no confidence interval: K unknown and no per-position counters")
    return SpecStats(
        n, drafts, accepted, per_pos, k, al, rate, rates, conditional, histogram, ci, _join(*notes)
    )


def from_histogram(
    steps_by_accepted: Sequence[int],
    *,
    draft_tokens: float | None = None,
    k: int | None = None,
    level: float = CI_LEVEL,
    note: str = "",
) -> SpecStats:
    """Statistics from a dense histogram of verify steps by accepted drafts (index ``j``: steps that accepted ``j``).

    This is vLLM's per-request ``acceptance_histogram`` (``vllm/v1/metrics/stats.py``,
    ``RequestSpecDecodeMetrics``), pooled over requests. With ``h`` the histogram:

    - ``num_drafts = sum_j h[j]``, ``accepted_tokens = sum_j j * h[j]``;
    - ``accepted_at_position[i] = sum_{j > i} h[j]`` (a step that accepted ``j`` drafts accepted positions
      ``0..j-1``), so :attr:`SpecStats.histogram` is ``{j + 1: h[j]}`` (accept length -> steps) and the CI is
      ``histogram-iid``.

    ``k`` defaults to ``len(h) - 1``; a histogram of another length than ``k + 1`` is an error, as is a
    negative or fractional bucket (raises :class:`InvalidInputError`).
    """
    counts = tuple(as_count(f"histogram[{j}]", c) for j, c in enumerate(steps_by_accepted))
    if not counts:
        raise InvalidInputError(
            "an acceptance histogram needs at least one bucket (index 0: no draft accepted)"
        )
    k = len(counts) - 1 if k is None else k
    if len(counts) != k + 1:
        raise InvalidInputError(f"the acceptance histogram has {len(counts)} buckets, not K + 1 = {k + 1}")
    per_position = [sum(counts[i + 1 :]) for i in range(k)]
    return from_counters(
        sum(counts),
        sum(j * c for j, c in enumerate(counts)),
        draft_tokens=draft_tokens,
        accepted_per_position=per_position,
        k=k,
        level=level,
        note=note,
    )


# --------------------------------------------------------------------------------------------
# Per-step data


def from_steps(
    accepted: Sequence[int],
    k: int,
    *,
    request_ids: Sequence[object] | None = None,
    level: float = CI_LEVEL,
) -> SpecStats:
    """Statistics from per-step accepted-draft counts (0..K), optionally grouped by request.

    With ``request_ids`` (one per step) the interval is cluster-robust over requests.
    """
    if request_ids is not None and len(request_ids) != len(accepted):
        raise InvalidInputError(
            f"request_ids has {len(request_ids)} entries but accepted has {len(accepted)}; give one per step"
        )
    per_pos = [0] * k
    for i, a in enumerate(accepted):
        if isinstance(a, bool) or not isinstance(a, int) or not 0 <= a <= k:
            raise InvalidInputError(f"accepted[{i}]={a!r} is not an integer in [0, {k}]")
        for pos in range(a):
            per_pos[pos] += 1
    n = len(accepted)
    base = from_counters(
        n, sum(accepted), draft_tokens=n * k, accepted_per_position=per_pos, k=k, level=level
    )
    if n == 0:
        return base
    ci = _ci_clustered(accepted, request_ids, level) if request_ids is not None else _ci_iid(accepted, level)
    return replace(base, ci=ci, source="steps")


# --------------------------------------------------------------------------------------------
# Confidence intervals


def _interval(mean_al: float, se: float, level: float, method: CIMethod, note: str) -> ConfidenceInterval:
    if not 0.0 < level < 1.0:
        raise InvalidInputError(f"confidence level {level!r} must be in (0, 1)")
    half = NormalDist().inv_cdf(0.5 + level / 2) * se
    return ConfidenceInterval(mean_al - half, mean_al + half, level, method, note)


def _ci_from_histogram(histogram: Mapping[int, int], level: float) -> ConfidenceInterval:
    n = sum(histogram.values())
    mean = sum(j * c for j, c in histogram.items()) / n
    var = sum(c * (j - mean) ** 2 for j, c in histogram.items()) / max(1, n - 1)
    return _interval(
        mean,
        math.sqrt(var / n),
        level,
        "histogram-iid",
        "approximation: exact per-step variance from per-position counters, steps assumed independent",
    )


def _ci_from_bound(n: int, accepted: int, k: int, level: float) -> ConfidenceInterval:
    mu = accepted / n
    var = max(0.0, mu * (k - mu))
    return _interval(
        1.0 + mu,
        math.sqrt(var / n),
        level,
        "variance-bound",
        "approximation: only totals available; Bhatia-Davis bound var <= mu(K - mu), steps assumed independent",
    )


def _ci_iid(accepted: Sequence[int], level: float) -> ConfidenceInterval:
    n = len(accepted)
    mean = sum(accepted) / n
    var = sum((a - mean) ** 2 for a in accepted) / max(1, n - 1)
    return _interval(
        1.0 + mean, math.sqrt(var / n), level, "per-step-iid", "per-step data, steps assumed independent"
    )


def _ci_clustered(accepted: Sequence[int], request_ids: Sequence[object], level: float) -> ConfidenceInterval:
    sums: dict[object, list[int]] = {}
    for a, rid in zip(accepted, request_ids, strict=True):
        cell = sums.setdefault(rid, [0, 0])
        cell[0] += a
        cell[1] += 1
    n = len(accepted)
    mean = sum(accepted) / n
    g = len(sums)
    if g < 2:
        ci = _ci_iid(accepted, level)
        return ConfidenceInterval(
            ci.low, ci.high, level, "per-step-iid", "one request only: steps assumed independent"
        )
    resid = sum((s - mean * m) ** 2 for s, m in sums.values())
    var = resid / n**2 * g / (g - 1)
    return _interval(
        1.0 + mean,
        math.sqrt(var),
        level,
        "per-step-clustered",
        f"per-step data clustered by request ({g} requests): robust to correlation within a request",
    )


# --------------------------------------------------------------------------------------------
# Goodness of fit (used to check samplers and to audit synthetic runs against their scheme)


def chi_square_sf(x: float, dof: int) -> float:
    """Survival function of the chi-square distribution: ``P(X >= x)`` for ``dof`` degrees of freedom."""
    if dof < 1:
        raise InvalidInputError(f"degrees of freedom {dof} must be at least 1")
    if x <= 0:
        return 1.0
    return _gamma_q(dof / 2.0, x / 2.0)


def _gamma_q(a: float, x: float) -> float:
    """Regularized upper incomplete gamma ``Q(a, x)`` (series below a+1, continued fraction above)."""
    log_prefix = -x + a * math.log(x) - math.lgamma(a)
    if x < a + 1.0:
        term = total = 1.0 / a
        ap = a
        for _ in range(10_000):
            ap += 1.0
            term *= x / ap
            total += term
            if abs(term) < abs(total) * 1e-15:
                break
        return max(0.0, 1.0 - total * math.exp(log_prefix))
    tiny = 1e-300
    b = x + 1.0 - a
    c = 1.0 / tiny
    d = 1.0 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return min(1.0, math.exp(log_prefix) * h)


@dataclass(frozen=True)
class FitResult:
    """Pearson chi-square test of observed accept-length counts against an expected pmf."""

    statistic: float
    dof: int
    p_value: float
    observed: dict[int, int]
    expected: dict[int, float]


def goodness_of_fit(observed: Mapping[int, int], pmf: Sequence[float]) -> FitResult:
    """Chi-square test of step counts by accept length (1..K+1) against ``pmf``.

    Lengths with zero expected probability must have zero observations (else p = 0); cells with
    small expected counts are merged into their neighbour so the chi-square approximation holds.
    """
    n = sum(observed.values())
    if n == 0:
        raise InvalidInputError("no steps observed: nothing to test")
    expected = {j: p * n for j, p in enumerate(pmf, start=1)}
    obs = {j: observed.get(j, 0) for j in expected}
    stray = {j: c for j, c in observed.items() if j not in expected and c}
    if stray or any(obs[j] and expected[j] == 0.0 for j in expected):
        return FitResult(math.inf, 0, 0.0, dict(observed), expected)
    cells: list[list[float]] = []
    for j in sorted(expected):
        if expected[j] == 0.0:
            continue
        if cells and cells[-1][1] < 5.0:
            cells[-1][0] += obs[j]
            cells[-1][1] += expected[j]
        else:
            cells.append([float(obs[j]), expected[j]])
    if len(cells) > 1 and cells[-1][1] < 5.0:
        last = cells.pop()
        cells[-1][0] += last[0]
        cells[-1][1] += last[1]
    if len(cells) < 2:
        return FitResult(0.0, 0, 1.0, dict(observed), expected)
    stat = sum((o - e) ** 2 / e for o, e in cells)
    dof = len(cells) - 1
    return FitResult(stat, dof, chi_square_sf(stat, dof), dict(observed), expected)


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)
