"""What the simulator "generates": filler text, pre-escaped token text, and replies to known GSM8K questions."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import orjson

from alflow.errors import InvalidInputError
from alflow.sim.acceptance import stable_seed
from alflow.sim.tokenizer import Tokenizer

_NUMBER = re.compile(r"-?[\d,]*\.?\d+")


@lru_cache(maxsize=8)
def corpus_text(words: int = 6000) -> str:
    """Deterministic English-like filler with some numbers: the text the sim "generates"."""
    rng = random.Random(20240611)
    vocab_text = (
        "the model reads each token and the cache grows as the answer goes on so we check the "
        "numbers again before the next step because a draft may be wrong and then the target "
        "writes its own token instead which is why speed depends on how many drafts are accepted "
        "in every verify pass of the batch"
    )
    vocab = vocab_text.split()
    out: list[str] = []
    sentence: list[str] = []
    for _ in range(words):
        word = rng.choice(vocab)
        if rng.random() < 0.04:
            word = str(rng.randint(2, 999))
        sentence.append(word)
        if len(sentence) >= rng.randint(8, 18):
            out.append(" ".join(sentence).capitalize() + ".")
            sentence = []
    return " ".join(out)


@dataclass(frozen=True)
class TextSource:
    """Pre-escaped output text: JSON-string bytes and per-token byte offsets into them."""

    data: bytes
    offsets: list[int]

    @classmethod
    def of(cls, tokenizer: Tokenizer, ids: list[int]) -> TextSource:
        """Build from token ids whose text is ASCII (each token escapes on its own)."""
        offsets = [0]
        chunks: list[bytes] = []
        total = 0
        for tok in ids:
            frag = orjson.dumps(tokenizer.token_bytes(tok).decode("ascii", "replace"))[1:-1]
            chunks.append(frag)
            total += len(frag)
            offsets.append(total)
        return cls(b"".join(chunks), offsets)

    @property
    def size(self) -> int:
        """Number of tokens."""
        return len(self.offsets) - 1


def load_answer_key(path: Path) -> dict[str, tuple[str, str]]:
    """GSM8K-style JSONL -> ``{question: (reasoning, final number)}`` (the number after ``####``)."""
    key: dict[str, tuple[str, str]] = {}
    with path.open("rb") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = orjson.loads(line)
                question, answer = row["question"], row["answer"]
            except (orjson.JSONDecodeError, KeyError, TypeError):
                raise InvalidInputError(
                    f"--answer-key {path}: line {lineno} is not a question/answer row"
                ) from None
            if not isinstance(question, str) or not isinstance(answer, str) or "####" not in answer:
                raise InvalidInputError(f"--answer-key {path}: line {lineno} has no '#### N' answer")
            reasoning, _, final = answer.rpartition("####")
            reasoning = re.sub(r"<<[^>]*>>", "", reasoning).strip()
            key[question.strip()] = (reasoning, final.strip().replace(",", ""))
    return key


def ascii_text(text: str) -> str:
    """``text`` in ASCII (a typographic apostrophe becomes '; anything else outside ASCII a ?)."""
    return text.replace("\u2019", "'").encode("ascii", "replace").decode()


class AnswerKey:
    """Right (with probability ``accuracy``, seeded per question) or wrong replies to known GSM8K questions."""

    def __init__(
        self, rows: dict[str, tuple[str, str]], tokenizer: Tokenizer, *, seed: int, accuracy: float
    ) -> None:
        self.rows = rows
        self.tokenizer = tokenizer
        self.seed = seed
        self.accuracy = accuracy
        self._sources: dict[tuple[str, bool], tuple[TextSource, int, int]] = {}

    def __bool__(self) -> bool:
        return bool(self.rows)

    def find(self, text: str) -> str | None:
        """The key question that occurs last in ``text`` (the prompt's last question), if any."""
        best: str | None = None
        best_at = -1
        for window in (text[-4000:], text):
            for question in self.rows:
                at = window.rfind(question)
                if at > best_at:
                    best, best_at = question, at
            if best is not None:
                return best
        return None

    def source(self, question: str) -> tuple[TextSource, int, int]:
        """Reply text for a key question, the tokens up to its end, and its reasoning tokens.

        Brief reasoning and ``#### N``: right with probability ``accuracy`` (seeded), else a nearby wrong
        number with some of the reasoning's numbers changed; filler follows (a reply that ignores EOS).
        """
        rng = random.Random(stable_seed("answer", self.seed, question))
        correct = rng.random() < self.accuracy
        cached = self._sources.get((question, correct))
        if cached is not None:
            return cached
        reasoning, final = self.rows[question]
        number = final
        if not correct:
            try:
                value = float(final)
                delta = rng.choice([-3, -2, -1, 1, 2, 5, 10])
                number = str(int(value) + delta) if value.is_integer() else f"{value + delta:g}"
            except ValueError:
                number = final + "1"
        steps = "\n".join(line for line in reasoning.splitlines()[-3:] if line.strip())
        if not correct:
            steps = _NUMBER.sub(lambda m: m.group() if rng.random() < 0.7 else str(rng.randint(1, 99)), steps)
        thought = self.tokenizer.encode(ascii_text(f"Let's solve this step by step.\n{steps}\n"))
        ids = thought + self.tokenizer.encode(ascii_text(f"The answer is {number}.\n#### {number}"))
        filler = self.tokenizer.encode(" " + corpus_text(400))
        source = TextSource.of(self.tokenizer, ids + filler)
        self._sources[(question, correct)] = (source, len(ids), len(thought))
        return source, len(ids), len(thought)
