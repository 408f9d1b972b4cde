"""Synthetic-acceptance schemes: exact accept-length distributions and seeded samplers.

Vocabulary (DOMAIN.md section 2): one verify step of one request proposes K drafts, accepts the first
``a`` of them (``a`` in 0..K) and emits ``a + 1`` tokens. The *accept length* of the step is ``a + 1``
(tokens emitted, bonus included); acceptance length AL is its mean, in ``[1, K + 1]``.

A *scheme* is the rule a framework uses to force the accept decision when synthetic acceptance is
on. For a requested target (an AL ``L``, or explicit unconditional per-position rates) a scheme
yields an exact distribution over accept lengths 1..K+1 and a sampler that reproduces it:

================================  ==========================================================  =========
scheme                            rule                                                        draw
================================  ==========================================================  =========
``vllm``                          rates ``p = [1]*floor(L-1) + [frac(L-1)] + [0]*rest``       per request
                                  (minimum variance), or explicit rates; Bernoulli with the
                                  conditional rate ``p_i / p_{i-1}`` at each position
``sglang-match-expected``         ``floor(L)`` or ``ceil(L)`` with weights giving mean L       per batch
``sglang-multinomial``            ``round(clamp(Normal(L, 1), 1, K+1))`` (biased near bounds)  per batch
``trtllm``                        value ``v = L - 1``: ``floor(v)`` drafts plus one more with   per request
                                  probability ``frac(v)``, clamped at K
``constant-conditional``          one conditional rate ``p`` with ``p + p^2 + ... + p^K = L-1``  per request
================================  ==========================================================  =========

"Per batch" means one draw per verify step shared by every request in that step (SGLang): the
marginal distribution is the same as a per-request draw, but the batch mean does not average out.
Same mean does not mean same distribution: :func:`compare_schemes` puts them side by side.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Annotated, Literal, Protocol

from pydantic import PlainSerializer, computed_field

from alflow.errors import InvalidInputError


def _r(x: float) -> float:
    """Round to 12 digits so that float noise (2.49 - 1 = 1.4900000000000002) does not show."""
    return round(x, 12) + 0.0


def _fmt(x: float) -> str:
    """Shortest readable form of a number: 1.78, 3, 0.49."""
    return f"{x:.12g}"


_R12 = Annotated[float, PlainSerializer(_r)]
"""A figure as stored (:func:`alflow.util.rows.dump_row`): rounded to 12 digits."""
_AS_TEXT = PlainSerializer(lambda target: target.describe())
"""A :class:`SyntheticTarget` as stored: its description."""

Granularity = Literal["per-request", "per-batch"]

K_MIN = 1
K_MAX = 16
_EPS = 1e-12


class SyntheticAcceptanceError(InvalidInputError):
    """A synthetic-acceptance request that no scheme can honour (the message names the value)."""


# --------------------------------------------------------------------------------------------
# Validation of targets


def validate_k(k: int) -> int:
    """Return ``k`` if it is an allowed number of speculative tokens (1..16), else raise."""
    if isinstance(k, bool) or not isinstance(k, int) or not K_MIN <= k <= K_MAX:
        raise SyntheticAcceptanceError(
            f"K={k!r} is not allowed: the number of speculative tokens must be an integer in "
            f"[{K_MIN}, {K_MAX}]"
        )
    return k


def validate_al(al: float, k: int) -> float:
    """Return ``al`` if ``1 <= al <= K + 1`` (AL counts the bonus token), else raise."""
    validate_k(k)
    if isinstance(al, bool) or not isinstance(al, int | float) or not math.isfinite(al):
        raise SyntheticAcceptanceError(f"target AL {al!r} is not a finite number")
    if not 1.0 - _EPS <= al <= k + 1 + _EPS:
        raise SyntheticAcceptanceError(
            f"target AL {al!r} is outside the allowed range [1, {k + 1}] for K={k} "
            "(AL counts the bonus token: 1 <= AL <= K+1)"
        )
    return min(max(float(al), 1.0), float(k + 1))


def validate_rates(rates: Sequence[float], k: int) -> tuple[float, ...]:
    """Return unconditional per-position rates as a tuple if they are valid for K, else raise.

    Valid rates have exactly K values in [0, 1] and are non-increasing: ``p_i`` is the probability
    that the first i drafts are all accepted.
    """
    validate_k(k)
    values = tuple(rates)
    if len(values) != k:
        raise SyntheticAcceptanceError(
            f"rates has {len(values)} value(s); K={k} needs exactly {k} (one unconditional rate "
            "per draft position)"
        )
    out: list[float] = []
    for i, rate in enumerate(values, start=1):
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not math.isfinite(rate):
            raise SyntheticAcceptanceError(f"rate p_{i}={rate!r} is not a finite number")
        if not -_EPS <= rate <= 1 + _EPS:
            raise SyntheticAcceptanceError(f"rate p_{i}={rate!r} is outside the allowed range [0, 1]")
        if out and rate > out[-1] + _EPS:
            raise SyntheticAcceptanceError(
                f"rates must be non-increasing: p_{i}={rate!r} > p_{i - 1}={out[-1]!r} "
                "(p_i is the probability that the first i drafts are all accepted)"
            )
        out.append(min(max(float(rate), 0.0), out[-1] if out else 1.0))
    return tuple(out)


@dataclass(frozen=True)
class SyntheticTarget:
    """What the user asked for: a target AL, or explicit unconditional per-position rates.

    Exactly one of ``al`` and ``rates`` is set. Use :meth:`of` to build a validated target.
    """

    k: int
    al: float | None = None
    rates: tuple[float, ...] | None = None

    @classmethod
    def of(cls, k: int, al: float | None = None, rates: Sequence[float] | None = None) -> SyntheticTarget:
        """Validate and build a target for K drafts from an AL or from explicit rates."""
        validate_k(k)
        if (al is None) == (rates is None):
            raise SyntheticAcceptanceError(
                "give exactly one of a target AL or explicit per-position rates "
                f"(got al={al!r}, rates={None if rates is None else list(rates)!r})"
            )
        if al is not None:
            return cls(k=k, al=validate_al(al, k))
        assert rates is not None
        return cls(k=k, rates=validate_rates(rates, k))

    @property
    def mean_al(self) -> float:
        """The AL this target asks for: ``L``, or ``1 + sum(rates)`` for explicit rates."""
        if self.al is not None:
            return self.al
        assert self.rates is not None
        return 1.0 + math.fsum(self.rates)

    def describe(self) -> str:
        """Short human text: ``AL 2.49`` or ``rates [1, 0.49, 0]``."""
        if self.al is not None:
            return f"AL {_fmt(self.al)}"
        assert self.rates is not None
        return "rates [" + ", ".join(_fmt(r) for r in self.rates) + "]"


# --------------------------------------------------------------------------------------------
# Distributions


class _OfTarget:
    """K and the target AL of a stored figure with a ``target``, computed from it (stored by pydantic)."""

    target: SyntheticTarget

    @computed_field  # type: ignore[prop-decorator]
    @property
    def k(self) -> int:
        """Number of speculative tokens."""
        return self.target.k

    @computed_field(return_type=_R12)  # type: ignore[prop-decorator]
    @property
    def target_al(self) -> float:
        """The AL asked for."""
        return self.target.mean_al


@dataclass(frozen=True)
class AcceptanceDistribution(_OfTarget):
    """The exact distribution of accept length (tokens emitted per step, 1..K+1) of one scheme.

    ``pmf[j - 1]`` is ``P(accept length = j)``. Mean, variance and rates follow from it:
    ``p_i = P(length >= i + 1)``, ``c_i = p_i / p_{i-1}``, ``AL = 1 + sum_i p_i``. Stored as pydantic serializes it
    (:func:`alflow.util.rows.dump_row`): the figures rounded to 12 digits to hide float noise, the pmf keyed by length.
    """

    scheme: str
    target: Annotated[SyntheticTarget, _AS_TEXT]
    pmf: Annotated[
        tuple[float, ...], PlainSerializer(lambda pmf: {str(j): _r(p) for j, p in enumerate(pmf, 1)})
    ]
    granularity: Granularity

    @property
    def mean(self) -> float:
        """Expected accept length ``sum_j j * P(j)`` (the AL this scheme realises)."""
        return math.fsum(j * p for j, p in enumerate(self.pmf, start=1))

    @computed_field(return_type=_R12)  # type: ignore[prop-decorator]
    @property
    def mean_al(self) -> float:
        """:attr:`mean` under its stored name."""
        return self.mean

    @computed_field(return_type=_R12)  # type: ignore[prop-decorator]
    @property
    def variance(self) -> float:
        """Variance of the accept length of one step of one request."""
        mean = self.mean
        return max(0.0, math.fsum(p * (j - mean) ** 2 for j, p in enumerate(self.pmf, start=1)))

    @computed_field(return_type=_R12)  # type: ignore[prop-decorator]
    @property
    def std(self) -> float:
        """Standard deviation of the accept length of one step of one request."""
        return math.sqrt(self.variance)

    @property
    def mean_overshoot(self) -> float:
        """Expected tokens a request's last step accepts past a fixed length: ``(E[L^2] - E[L]) / (2 E[L])``.

        The stationary overshoot of a renewal process with integer steps ``L`` (``P(cut = j) =
        P(L > j) / E[L]``, j = 0..K): what a server that cuts the last step at the limit (SGLang's
        ``output_ids``) drops per request, on average, once the output is long against K.
        """
        mean = self.mean
        second = math.fsum(j * j * p for j, p in enumerate(self.pmf, start=1))
        return (second - mean) / (2.0 * mean)

    @computed_field(return_type=_R12)  # type: ignore[prop-decorator]
    @property
    def bias(self) -> float:
        """Realised mean minus the requested AL (zero for an unbiased scheme)."""
        return self.mean - self.target.mean_al

    @computed_field(return_type=tuple[_R12, ...])  # type: ignore[prop-decorator]
    @property
    def per_position_rates(self) -> tuple[float, ...]:
        """Unconditional rates ``p_i = P(first i drafts all accepted)``, i = 1..K."""
        tails = [min(1.0, tail) for tail in itertools.accumulate(reversed(self.pmf[1:]))]
        return tuple(reversed(tails))

    @computed_field(return_type=tuple[_R12 | None, ...])  # type: ignore[prop-decorator]
    @property
    def conditional_rates(self) -> tuple[float | None, ...]:
        """Conditional rates ``c_i = p_i / p_{i-1}``; None where ``p_{i-1} = 0`` (never reached)."""
        return conditional_from_unconditional(self.per_position_rates)

    @property
    def draft_acceptance_rate(self) -> float:
        """Accepted drafts / proposed drafts ``= (AL - 1) / K``."""
        return (self.mean - 1.0) / self.k

    def batch_mean_std(self, batch_size: int) -> float:
        """Standard deviation of the mean accept length over one step of ``batch_size`` requests.

        Per-request draws average out (``std / sqrt(n)``); a per-batch draw does not (``std``).
        """
        if batch_size < 1:
            raise InvalidInputError(f"batch_size={batch_size} must be at least 1")
        if self.granularity == "per-batch":
            return self.std
        return self.std / math.sqrt(batch_size)


def conditional_from_unconditional(rates: Sequence[float]) -> tuple[float | None, ...]:
    """``c_i = p_i / p_{i-1}`` with ``p_0 = 1``; None where the position is never reached."""
    return tuple(None if prev <= 0.0 else min(1.0, p / prev) for prev, p in itertools.pairwise([1.0, *rates]))


def pmf_from_rates(rates: Sequence[float]) -> tuple[float, ...]:
    """Accept-length pmf from unconditional rates: ``P(len = j + 1) = p_j - p_{j+1}``."""
    full = [1.0, *rates, 0.0]
    return tuple(max(0.0, full[j] - full[j + 1]) for j in range(len(rates) + 1))


def min_variance_rates(al: float, k: int) -> tuple[float, ...]:
    """The minimum-variance schedule of vLLM: ``[1]*floor(L-1) + [frac(L-1)] + [0]*rest``.

    Every step accepts ``floor(L-1)`` or ``floor(L-1) + 1`` drafts, and ``1 + sum(p) = L`` exactly.
    """
    drafts = validate_al(al, k) - 1.0
    whole = min(k, math.floor(drafts + _EPS))
    frac = drafts - whole
    if frac < _EPS:
        frac = 0.0
    rates = [1.0] * whole
    if whole < k:
        rates.append(frac)
    rates.extend([0.0] * (k - len(rates)))
    return tuple(rates)


def min_variance_al(rates: Sequence[float]) -> float | None:
    """The AL whose minimum-variance schedule equals ``rates``, or None if they are not one."""
    al = 1.0 + math.fsum(rates)
    k = len(rates)
    if k == 0 or not 1.0 <= al <= k + 1:
        return None
    expected = min_variance_rates(al, k)
    if all(abs(a - b) <= 1e-9 for a, b in zip(expected, rates, strict=True)):
        return al
    return None


def constant_conditional_rate(al: float, k: int) -> float:
    """The one conditional rate ``p`` with ``p + p^2 + ... + p^K = L - 1`` (llama.cpp style)."""
    target = validate_al(al, k) - 1.0
    if target <= 0.0:
        return 0.0
    if target >= k:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = (lo + hi) / 2
        total = math.fsum(mid**i for i in range(1, k + 1))
        if total < target:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-16:
            break
    return (lo + hi) / 2


# --------------------------------------------------------------------------------------------
# Samplers


class AcceptanceSampler(Protocol):
    """Draws accepted-draft counts (0..K) for the requests of one verify step."""

    granularity: Granularity

    def draw_step(self, batch_size: int) -> list[int]:
        """Accepted drafts ``a`` for each of ``batch_size`` requests in one verify step."""
        ...


@dataclass
class _Sampler:
    """Draws with ``draw_one``: each request on its own, or once per verify step for every request in it (SGLang)."""

    draw_one: Callable[[random.Random], int]
    rng: random.Random
    granularity: Granularity = "per-request"

    def draw_step(self, batch_size: int) -> list[int]:
        draw, rng = self.draw_one, self.rng
        if self.granularity == "per-batch":
            return [draw(rng)] * batch_size if batch_size > 0 else []
        return [draw(rng) for _ in range(batch_size)]


def _positional_draw(rates: Sequence[float]) -> Callable[[random.Random], int]:
    """Bernoulli with the conditional rate at each position; stop at the first rejection."""
    conditional = [1.0 if c is None else c for c in conditional_from_unconditional(rates)]

    def draw(rng: random.Random) -> int:
        accepted = 0
        for c in conditional:
            if c >= 1.0 or (c > 0.0 and rng.random() < c):
                accepted += 1
            else:
                break
        return accepted

    return draw


# --------------------------------------------------------------------------------------------
# Schemes


class Scheme(Protocol):
    """A synthetic-acceptance rule: exact distribution and a sampler for a target."""

    @property
    def name(self) -> str:
        """Registry name of the scheme."""
        ...

    @property
    def granularity(self) -> Granularity:
        """Whether one draw serves one request or the whole batch of a verify step."""
        ...

    @property
    def summary(self) -> str:
        """One line describing the rule."""
        ...

    @property
    def accepts_rates(self) -> bool:
        """Whether explicit per-position rates are allowed as a target."""
        ...

    def distribution(self, target: SyntheticTarget) -> AcceptanceDistribution:
        """The exact accept-length distribution this scheme produces for ``target``."""
        ...

    def sampler(self, target: SyntheticTarget, seed: int) -> AcceptanceSampler:
        """A seeded sampler whose draws follow :meth:`distribution`."""
        ...


def _require_al(scheme: str, target: SyntheticTarget) -> float:
    if target.al is None:
        raise SyntheticAcceptanceError(
            f"scheme {scheme!r} takes a target AL, not explicit per-position rates "
            "(only the 'vllm' scheme accepts rates)"
        )
    return target.al


@dataclass(frozen=True)
class VllmScheme:
    """vLLM: per-position rates (minimum-variance schedule from L, or explicit), drawn per request."""

    name: str = "vllm"
    granularity: Granularity = "per-request"
    summary: str = "min-variance rates from L (or explicit rates); Bernoulli per request and position"
    accepts_rates: bool = True

    def rates(self, target: SyntheticTarget) -> tuple[float, ...]:
        """The unconditional rates vLLM uses for ``target``."""
        if target.rates is not None:
            return target.rates
        assert target.al is not None
        return min_variance_rates(target.al, target.k)

    def distribution(self, target: SyntheticTarget) -> AcceptanceDistribution:
        return AcceptanceDistribution(self.name, target, pmf_from_rates(self.rates(target)), self.granularity)

    def sampler(self, target: SyntheticTarget, seed: int) -> AcceptanceSampler:
        return _Sampler(_positional_draw(self.rates(target)), random.Random(seed))


@dataclass(frozen=True)
class _FloorPlusBernoulli:
    """Schemes that accept ``floor(L-1)`` drafts plus one more with probability ``frac(L-1)``.

    Their exact distribution is the minimum-variance schedule's; they differ only in whether one
    draw serves a request (TensorRT-LLM) or the whole batch of a verify step (SGLang).
    """

    name: str
    granularity: Granularity
    summary: str
    accepts_rates: bool = False

    def distribution(self, target: SyntheticTarget) -> AcceptanceDistribution:
        al = _require_al(self.name, target)
        return AcceptanceDistribution(
            self.name, target, pmf_from_rates(min_variance_rates(al, target.k)), self.granularity
        )

    def sampler(self, target: SyntheticTarget, seed: int) -> AcceptanceSampler:
        """``floor(v)`` drafts plus one more with probability ``frac(v)`` (``v = L - 1``), clamped at K."""
        k = target.k
        drafts = _require_al(self.name, target) - 1.0
        whole = min(k, math.floor(drafts + _EPS))
        frac = drafts - whole if whole < k else 0.0
        if frac < _EPS:
            frac = 0.0

        def draw(rng: random.Random) -> int:
            if frac > 0.0 and rng.random() < frac:
                return min(k, whole + 1)
            return whole

        return _Sampler(draw, random.Random(seed), self.granularity)


SGLANG_MATCH_EXPECTED = _FloorPlusBernoulli(
    "sglang-match-expected",
    "per-batch",
    "floor(L) or ceil(L) weighted to give mean L; one draw per verify step for the batch",
)
"""SGLang ``match-expected``: floor(L) or ceil(L) weighted to mean L, one draw per step."""

TRTLLM = _FloorPlusBernoulli(
    "trtllm",
    "per-request",
    "v = L-1 drafts: floor(v) always accepted, one more with probability frac(v); per request",
)
"""TensorRT-LLM: value ``L - 1`` drafts; integer part always, fraction as a Bernoulli."""


@dataclass(frozen=True)
class SglangMultinomialScheme:
    """SGLang ``multinomial`` (older default): round(clamp(Normal(L, 1), 1, K+1)), biased."""

    name: str = "sglang-multinomial"
    granularity: Granularity = "per-batch"
    summary: str = "round(clamp(Normal(L, 1), 1, K+1)); one draw per verify step; biased near the bounds"
    accepts_rates: bool = False

    def distribution(self, target: SyntheticTarget) -> AcceptanceDistribution:
        al = _require_al(self.name, target)
        k = target.k
        cdf = NormalDist(al, 1.0).cdf
        # clamp to [1, K+1] first, then round to nearest: length j covers [j - 0.5, j + 0.5).
        bounds = [cdf(j + 0.5) for j in range(1, k + 1)]
        pmf = [bounds[0]]
        pmf.extend(bounds[i] - bounds[i - 1] for i in range(1, k))
        pmf.append(1.0 - bounds[-1])
        return AcceptanceDistribution(self.name, target, tuple(max(0.0, p) for p in pmf), self.granularity)

    def sampler(self, target: SyntheticTarget, seed: int) -> AcceptanceSampler:
        al = _require_al(self.name, target)
        k = target.k

        def draw(rng: random.Random) -> int:
            x = min(max(rng.gauss(al, 1.0), 1.0), float(k + 1))
            return min(k, max(0, math.floor(x + 0.5) - 1))

        return _Sampler(draw, random.Random(seed), "per-batch")


@dataclass(frozen=True)
class ConstantConditionalScheme:
    """One conditional rate p at every position with ``p + ... + p^K = L - 1`` (llama.cpp port)."""

    name: str = "constant-conditional"
    granularity: Granularity = "per-request"
    summary: str = "one conditional rate p at every position, p + p^2 + ... + p^K = L-1; per request"
    accepts_rates: bool = False

    def rates(self, target: SyntheticTarget) -> tuple[float, ...]:
        """Unconditional rates ``p^i`` for i = 1..K."""
        al = _require_al(self.name, target)
        p = constant_conditional_rate(al, target.k)
        return tuple(p**i for i in range(1, target.k + 1))

    def distribution(self, target: SyntheticTarget) -> AcceptanceDistribution:
        return AcceptanceDistribution(self.name, target, pmf_from_rates(self.rates(target)), self.granularity)

    def sampler(self, target: SyntheticTarget, seed: int) -> AcceptanceSampler:
        return _Sampler(_positional_draw(self.rates(target)), random.Random(seed))


SCHEMES: dict[str, Scheme] = {
    scheme.name: scheme
    for scheme in (
        VllmScheme(),
        SGLANG_MATCH_EXPECTED,
        SglangMultinomialScheme(),
        TRTLLM,
        ConstantConditionalScheme(),
    )
}
"""Every known scheme by name: the whole registry."""

UNBIASED_SCHEMES = ("vllm", "sglang-match-expected", "trtllm", "constant-conditional")


def get_scheme(name: str) -> Scheme:
    """Look a scheme up by name, with an error listing the known names."""
    try:
        return SCHEMES[name]
    except KeyError:
        raise SyntheticAcceptanceError(
            f"unknown synthetic-acceptance scheme {name!r}; known: {', '.join(SCHEMES)}"
        ) from None


def distribution(
    scheme: str, k: int, al: float | None = None, rates: Sequence[float] | None = None
) -> AcceptanceDistribution:
    """Exact accept-length distribution of ``scheme`` for K and a target AL or explicit rates."""
    return get_scheme(scheme).distribution(SyntheticTarget.of(k, al=al, rates=rates))


def sampler(
    scheme: str, k: int, al: float | None = None, rates: Sequence[float] | None = None, *, seed: int = 0
) -> AcceptanceSampler:
    """A seeded sampler of ``scheme`` for K and a target AL or explicit rates."""
    return get_scheme(scheme).sampler(SyntheticTarget.of(k, al=al, rates=rates), seed)


@dataclass(frozen=True)
class SchemeComparison(_OfTarget):
    """Every applicable scheme's distribution for one target, for side-by-side review."""

    target: Annotated[SyntheticTarget, _AS_TEXT]
    schemes: tuple[AcceptanceDistribution, ...]
    skipped: dict[str, str] = field(default_factory=dict)


def compare_schemes(
    k: int, al: float | None = None, rates: Sequence[float] | None = None
) -> SchemeComparison:
    """Distributions of every scheme that can honour the target (rates: only those that take rates)."""
    target = SyntheticTarget.of(k, al=al, rates=rates)
    skipped = {
        name: "takes a target AL, not explicit rates"
        for name, scheme in SCHEMES.items()
        if target.rates is not None and not scheme.accepts_rates
    }
    rows = tuple(scheme.distribution(target) for name, scheme in SCHEMES.items() if name not in skipped)
    return SchemeComparison(target, rows, skipped)
