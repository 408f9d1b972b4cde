"""A small deterministic stand-in for :class:`alflow.tiny.engine.TinyEngine` (unit tests of the server).

Same interface as the real engine. Tokens are UTF-8 bytes (id = byte + 3; 1 is BOS, 2 is EOS). The
"model" continues by repeating the prompt's text; at temperature > 0 a seeded generator replaces
some tokens. Drafts come from real n-gram lookup over the context (longest n-gram first), accepted
while they equal the model's next tokens, so acceptance depends on the text the way the real loop's
does. A reply ends with EOS after ``eos_after`` tokens (unless ``ignore_eos``), at ``max_tokens``,
or at a stop string (the text up to it is emitted). ``calls`` records every request's steps.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

BOS, EOS, OFFSET = 1, 2, 3


@dataclass(frozen=True)
class DoubleSpec:
    """Speculative settings (the fields of the engine's SpecSettings)."""

    k: int
    ngram_min: int = 1
    ngram_max: int = 4
    synthetic_rates: tuple[float, ...] | None = None


@dataclass(frozen=True)
class DoubleStep:
    """One step (the fields of the engine's StepEvent)."""

    tokens: tuple[int, ...]
    text: str
    drafted: int
    accepted: int
    accepted_positions: tuple[bool, ...]
    finish_reason: str | None


class DoubleEngine:
    """Deterministic engine double; ``step_delay_s`` makes each step take time (queueing tests)."""

    model_name = "double-model"

    def __init__(self, *, eos_after: int = 40, step_delay_s: float = 0.0) -> None:
        self.eos_after = eos_after
        self.step_delay_s = step_delay_s
        self.calls: list[list[DoubleStep]] = []
        self.active = 0
        self.max_active = 0
        self._lock = threading.Lock()

    @property
    def eos_token_ids(self) -> frozenset[int]:
        return frozenset({EOS})

    def tokenize(self, text: str, *, add_bos: bool = True) -> list[int]:
        ids = [b + OFFSET for b in text.encode()]
        return [BOS, *ids] if add_bos else ids

    def detokenize(self, tokens: Sequence[int]) -> str:
        return bytes(t - OFFSET for t in tokens if t >= OFFSET).decode(errors="replace")

    @staticmethod
    def _draft(context: list[int], spec: DoubleSpec) -> list[int]:
        for n in range(spec.ngram_max, spec.ngram_min - 1, -1):
            if len(context) <= n:
                continue
            tail = context[-n:]
            for start in range(len(context) - n - 1, -1, -1):
                if context[start : start + n] == tail:
                    return context[start + n : start + n + spec.k]
        return []

    def generate(
        self,
        prompt: Sequence[int],
        *,
        max_tokens: int,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int | None = None,
        spec: DoubleSpec | None = None,
        stop: Sequence[str] = (),
        ignore_eos: bool = False,
    ) -> Iterator[DoubleStep]:
        with self._lock:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        steps: list[DoubleStep] = []
        self.calls.append(steps)
        try:
            yield from self._generate(
                list(prompt), max_tokens, temperature, seed, spec, tuple(stop), ignore_eos, steps
            )
        finally:
            with self._lock:
                self.active -= 1

    def _generate(  # noqa: C901
        self,
        context: list[int],
        max_tokens: int,
        temperature: float,
        seed: int | None,
        spec: DoubleSpec | None,
        stop: tuple[str, ...],
        ignore_eos: bool,
        steps: list[DoubleStep],
    ) -> Iterator[DoubleStep]:
        script = [t for t in context if t >= OFFSET] or [OFFSET + ord("a")]
        rng = random.Random(seed if seed is not None else 0)
        out: list[int] = []
        shown = ""

        def model_next(i: int) -> int:
            if not ignore_eos and i >= self.eos_after:
                return EOS
            tok = script[i % len(script)]
            if temperature > 0 and rng.random() < min(0.5, temperature / 2):
                tok = OFFSET + ord("a") + rng.randrange(26)
            return tok

        while True:
            drafts = self._draft(context, spec) if spec is not None else []
            drafts = drafts[: max(0, max_tokens - len(out) - 1)]
            emitted: list[int] = []
            positions: list[bool] = []
            target = model_next(len(out))
            for d in drafts:
                if d == target and target != EOS:
                    positions.append(True)
                    emitted.append(d)
                    target = model_next(len(out) + len(emitted))
                else:
                    positions.append(False)
                    break
            positions += [False] * (len(drafts) - len(positions))
            emitted.append(target)
            reason: str | None = None
            if EOS in emitted:
                emitted = emitted[: emitted.index(EOS) + 1]
                reason = "stop"
            out += emitted
            context += emitted
            text = self.detokenize(out)
            cut = len(text)
            for s in stop:
                at = text.find(s)
                if at >= 0 and at <= cut:
                    cut, reason = at, "stop"
            if reason is None and len(out) >= max_tokens:
                reason = "length"
            if reason is None:  # hold back text that may begin a stop string
                for s in stop:
                    for n in range(min(len(s) - 1, len(text)), 0, -1):
                        if text.endswith(s[:n]):
                            cut = min(cut, len(text) - n)
                            break
            new = text[len(shown) : max(cut, len(shown))]
            shown += new
            accepted = sum(positions)
            step = DoubleStep(tuple(emitted), new, len(drafts), accepted, tuple(positions), reason)
            steps.append(step)
            if self.step_delay_s:
                time.sleep(self.step_delay_s)
            yield step
            if reason is not None:
                return
