"""Token sampling and the speculative accept rule of the tiny engine (numpy only, no llama.cpp).

A target distribution is kept sparse: the candidate token ids that survive temperature, top-k and
top-p, and their probabilities (summing to 1). The order of the filters follows vLLM: logits are
divided by the temperature, then top-k keeps the ``k`` largest, then top-p keeps the smallest set of
most likely tokens whose mass reaches ``top_p``; the result is renormalised. Temperature 0 is greedy:
a point mass on the argmax (ties go to the lowest token id, as ``numpy.argmax`` does).

Exact speculative sampling with a point-mass draft (n-gram drafts are deterministic, so the draft
distribution ``q`` is ``delta_x``): accept the draft ``x`` with probability ``min(1, p(x) / q(x)) =
p(x)``; on rejection sample from the residual ``norm(max(p - q, 0))``, which is ``p`` with ``x``
removed and renormalised. Then ``P(out = y) = p(x) [y = x] + (1 - p(x)) p(y) / (1 - p(x)) [y != x]
= p(y)``: the output has the target's distribution whatever the draft was.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from alflow.errors import InvalidInputError
from alflow.tiny.errors import TinyUnavailableError

try:
    import numpy as np
    import numpy.typing as npt
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise TinyUnavailableError("numpy", exc) from exc

# top-p first looks at this many most likely tokens; only if their mass is below top_p does it sort
# the whole vocabulary (Gemma 3 has 262,144 tokens: a full sort per position would cost ~15 ms).
_TOP_P_PREFILTER = 4096

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class SamplingParams:
    """Sampling settings of one request: temperature (0 = greedy), top-k (0 = off), top-p (1 = off)."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        t, k, p = self.temperature, self.top_k, self.top_p
        if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t) or t < 0:
            raise InvalidInputError(f"temperature={t!r} must be a finite number >= 0 (0 means greedy)")
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise InvalidInputError(f"top_k={k!r} must be an integer >= 0 (0 means no top-k filter)")
        if isinstance(p, bool) or not isinstance(p, int | float) or not 0.0 < p <= 1.0:
            raise InvalidInputError(f"top_p={p!r} must be a number in (0, 1] (1 means no top-p filter)")

    @property
    def greedy(self) -> bool:
        """True for temperature 0: the argmax, no randomness."""
        return self.temperature == 0.0


@dataclass(frozen=True)
class Distribution:
    """A sparse distribution over token ids: ``probs[i]`` is the probability of ``ids[i]`` (sum 1)."""

    ids: IntArray
    probs: FloatArray

    @classmethod
    def point(cls, token: int) -> Distribution:
        """All mass on one token."""
        return cls(np.array([token], dtype=np.int64), np.array([1.0]))

    def prob(self, token: int) -> float:
        """Probability of ``token`` (0 when it is not a candidate)."""
        hit = np.flatnonzero(self.ids == token)
        return float(self.probs[hit[0]]) if hit.size else 0.0

    def without(self, token: int) -> Distribution:
        """The distribution with ``token`` removed and renormalised (the residual of a point draft).

        Raises when nothing is left (``token`` held all the mass): such a draft is always accepted.
        """
        keep = self.ids != token
        probs = self.probs[keep]
        total = float(probs.sum())
        if not probs.size or total <= 0.0:
            raise InvalidInputError(f"token {token} holds all the mass: there is no residual to sample")
        return Distribution(self.ids[keep], probs / total)

    def dense(self, vocab_size: int) -> FloatArray:
        """The full probability vector over ``vocab_size`` tokens."""
        out = np.zeros(vocab_size)
        out[self.ids] = self.probs
        return out


def target_distribution(logits: npt.NDArray[np.floating], params: SamplingParams) -> Distribution:
    """The target's sampling distribution at one position: temperature, then top-k, then top-p."""
    if params.greedy:
        return Distribution.point(int(np.argmax(logits)))
    x = np.asarray(logits, dtype=np.float64) / params.temperature
    vocab = x.shape[0]
    if 0 < params.top_k < vocab:
        cand = np.argpartition(-x, params.top_k - 1)[: params.top_k].astype(np.int64)
    else:
        cand = np.arange(vocab, dtype=np.int64)
    xs = x[cand]
    p = np.exp(xs - xs.max())
    p /= p.sum()
    if params.top_p < 1.0:
        cand, p = _top_p(cand, p, params.top_p)
    return Distribution(cand, p)


def _top_p(cand: IntArray, p: FloatArray, top_p: float) -> tuple[IntArray, FloatArray]:
    """Keep the smallest prefix of the most likely tokens whose mass reaches ``top_p``; renormalise."""
    pool = np.arange(p.size)
    if p.size > _TOP_P_PREFILTER:
        head = np.argpartition(-p, _TOP_P_PREFILTER - 1)[:_TOP_P_PREFILTER]
        if float(p[head].sum()) >= top_p:
            pool = head
    order = pool[np.argsort(-p[pool], kind="stable")]
    cum = np.cumsum(p[order])
    keep = min(int(np.searchsorted(cum, top_p, side="left")) + 1, order.size)
    chosen = order[:keep]
    kept = p[chosen]
    return cand[chosen], kept / kept.sum()


def sample(dist: Distribution, rng: np.random.Generator) -> int:
    """Draw one token from ``dist`` (inverse CDF with one uniform draw; no draw for a point mass)."""
    if dist.ids.size == 1:
        return int(dist.ids[0])
    cum = np.cumsum(dist.probs)
    idx = int(np.searchsorted(cum, rng.random() * cum[-1], side="right"))
    return int(dist.ids[min(idx, dist.ids.size - 1)])


def speculative_step(dist: Distribution, draft: int, rng: np.random.Generator) -> tuple[bool, int]:
    """Verify one point-mass draft against the target: ``(accepted, emitted token)``.

    Accept ``draft`` with probability ``p(draft)``; else emit a sample of the residual (``p`` without
    ``draft``, renormalised). The emitted token is distributed exactly as ``p`` (module docstring).
    """
    p_draft = dist.prob(draft)
    if p_draft >= 1.0:
        return True, draft
    if p_draft > 0.0 and rng.random() < p_draft:
        return True, draft
    return False, sample(dist.without(draft), rng)


def forced_accept(conditional_rate: float, rng: np.random.Generator) -> bool:
    """Synthetic acceptance (vLLM): accept this position's draft with its conditional rate."""
    if conditional_rate >= 1.0:
        return True
    if conditional_rate <= 0.0:
        return False
    return bool(rng.random() < conditional_rate)
