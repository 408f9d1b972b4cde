"""How the simulated engine decides how many drafts each request accepts in each verify step.

Two modes:

- **synthetic**: the framework's forced acceptance, drawn with the acceptance package's samplers
  (:mod:`alflow.acceptance.synthetic`) with the scheme's own granularity: per request and position
  (vLLM, TensorRT-LLM) or one draw per step shared by the whole batch (SGLang).
- **natural** ("real" acceptance): each request gets per-position *conditional* rates that depend on
  its prompt, deterministically from the seed and the text. The prompt is scored against keyword
  families of the SPEED-Bench categories (coding, math, ..., writing, roleplay); the conditional
  rate is the category's base rate for the drafting method, lowered by ``quality`` and temperature,
  decaying slightly with position, plus a small per-request jitter. Base rates are calibrated so
  that at K = 3 the AL of a category matches the SPEED-Bench means in DOMAIN.md section 6 (for
  example MTP coding 3.34, roleplay 2.09; EAGLE3 2.46 / 1.87; n-gram 1.54 / 1.15).
"""

from __future__ import annotations

import hashlib
import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

from alflow.acceptance.synthetic import AcceptanceSampler, sampler

_KEYWORDS: dict[str, tuple[str, ...]] = {
    "coding": (
        "def ",
        "class ",
        "import ",
        "return ",
        "function",
        "```",
        "code",
        "python",
        "javascript",
        "java",
        "c++",
        "rust",
        "sql",
        "compile",
        "bug",
        "implement",
        "algorithm",
        "array",
        "string",
        "regex",
        "api",
        "=>",
        "();",
        "{",
        "}",
        "#include",
        "print(",
        "console.",
        "var ",
        "const ",
    ),
    "math": (
        "solve",
        "equation",
        "calculate",
        "how many",
        "how much",
        "sum",
        "integer",
        "prime",
        "probability",
        "percent",
        "%",
        "+",
        "=",
        "*",
        "/",
        "derivative",
        "integral",
        "theorem",
        "prove",
        "####",
        "dollars",
        "$",
    ),
    "stem": ("physics", "chemistry", "biology", "molecule", "energy", "velocity", "cell", "scientific"),
    "reasoning": ("puzzle", "logic", "deduce", "step by step", "if all", "which of the following"),
    "qa": ("what is", "who is", "when did", "where is", "why does", "explain"),
    "rag": ("context:", "document", "according to the", "passage", "based on the following"),
    "summarization": ("summarize", "summary", "tl;dr", "key points", "condense"),
    "multilingual": ("translate", "traduce", "übersetze", "français", "español", "中文", "日本語"),
    "humanities": ("history", "philosophy", "literature", "culture", "art ", "religion", "ethics"),
    "writing": ("write a", "story", "poem", "essay", "creative", "novel", "lyrics", "blog post"),
    "roleplay": ("roleplay", "pretend", "you are a", "act as", "in character", "imagine you"),
}
CATEGORIES = tuple(_KEYWORDS)
"""The SPEED-Bench categories, in the order of their keyword families."""

# Conditional acceptance rate per (method, category), the categories in CATEGORIES order: AL at K=3 is
# 1 + c + c^2 + c^3 (before decay).
_BASE_RATES: dict[str, dict[str, float]] = {
    method: dict(zip(CATEGORIES, rates, strict=True))
    for method, rates in {
        "mtp": (0.885, 0.86, 0.78, 0.77, 0.72, 0.76, 0.72, 0.66, 0.68, 0.6, 0.585),
        "eagle3": (0.695, 0.68, 0.62, 0.61, 0.58, 0.6, 0.57, 0.52, 0.54, 0.51, 0.505),
        "draft_model": (0.72, 0.7, 0.63, 0.62, 0.6, 0.62, 0.58, 0.5, 0.55, 0.5, 0.48),
        # block drafters (one pass proposes all K): a shade below MTP per position on this scale (DSpark, trained
        # with the target like MTP), DFlash's block-diffusion drafter in between MTP and EAGLE3
        "dspark": (0.87, 0.85, 0.77, 0.76, 0.71, 0.75, 0.71, 0.65, 0.67, 0.59, 0.575),
        "dflash": (0.8, 0.79, 0.7, 0.69, 0.65, 0.68, 0.65, 0.58, 0.61, 0.55, 0.54),
        "ngram": (0.37, 0.3, 0.22, 0.22, 0.18, 0.34, 0.3, 0.14, 0.16, 0.13, 0.13),
    }.items()
}
METHODS = tuple(_BASE_RATES)
POSITION_DECAY = 0.985
JITTER = 0.02
_WORD = re.compile(r"\w+")


def classify_prompt(text: str) -> str:
    """The SPEED-Bench category whose keywords score highest in ``text`` (ties: list order; none: qa)."""
    lowered = text.lower()
    best, best_score = "qa", 0.0
    words = max(1, len(_WORD.findall(lowered)))
    for category in CATEGORIES:
        score = 0.0
        for kw in _KEYWORDS[category]:
            hits = lowered.count(kw)
            if hits:
                score += 1.0 + math.log1p(hits)
        # symbol-only keywords are frequent in any text: normalise by length a little
        score /= 1.0 + 0.002 * words
        if score > best_score:
            best, best_score = category, score
    return best


def stable_seed(*parts: object) -> int:
    """A 64-bit seed from ``parts`` that does not depend on Python's hash randomisation."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


@dataclass(frozen=True)
class NaturalAcceptance:
    """Prompt-dependent per-position conditional rates for "real" (non-synthetic) acceptance."""

    method: str
    k: int
    quality: float = 1.0
    seed: int = 0

    def conditional_rates(self, text: str, temperature: float = 0.0) -> tuple[float, ...]:
        """Conditional rates ``c_1..c_K`` for a prompt (deterministic in seed, text, temperature)."""
        base = _BASE_RATES[self.method][classify_prompt(text)]
        rng = random.Random(stable_seed("natural", self.seed, text))
        c = base + rng.uniform(-JITTER, JITTER)
        c *= self.quality
        c *= max(0.6, 1.0 - 0.08 * max(0.0, temperature))
        c = min(max(c, 0.0), 0.99)
        return tuple(c * POSITION_DECAY**i for i in range(self.k))

    def expected_al(self, text: str, temperature: float = 0.0) -> float:
        """``1 + sum_i prod_{j<=i} c_j``: the AL these rates give."""
        total, prod = 1.0, 1.0
        for c in self.conditional_rates(text, temperature):
            prod *= c
            total += prod
        return total


def category_al(method: str, category: str, k: int, quality: float = 1.0) -> float:
    """Mean AL of a category for a method and K, without jitter (for calibration checks)."""
    c = min(_BASE_RATES[method][category] * quality, 0.99)
    total, prod = 1.0, 1.0
    for i in range(k):
        prod *= c * POSITION_DECAY**i
        total += prod
    return total


def draw_natural(rates: Sequence[float], rng: random.Random) -> int:
    """Accepted drafts for one step: Bernoulli with each conditional rate until the first rejection."""
    accepted = 0
    rand = rng.random
    for c in rates:
        if rand() < c:
            accepted += 1
        else:
            break
    return accepted


def synthetic_sampler(
    scheme: str, k: int, al: float | None, rates: Sequence[float] | None, seed: int
) -> AcceptanceSampler:
    """The acceptance package's sampler for the configured synthetic target."""
    return sampler(scheme, k, al=al, rates=rates, seed=seed)
