r"""GSM8K accuracy against an OpenAI-compatible server, scored like the common harness.

Prompting follows lm-evaluation-harness's ``gsm8k`` task run on a chat endpoint with
``--apply_chat_template --fewshot_as_multiturn``: each few-shot example is a user turn
``"Question: {question}\nAnswer:"`` followed by an assistant turn holding the reference solution
(which ends in ``#### N``); the question under test is the last user turn. Few-shot examples are
drawn from the train split with a seeded generator, a fresh draw per question.

Two scores, as in the harness:

- **strict-match**: the first ``#### <number>`` in the reply (regex ``#### (\-?[0-9\.\,]+)``);
- **flexible-extract**: the last number-like token in the reply (regex
  ``(-?[$0-9.,]{2,})|(-?[0-9]+)``).

Both the extracted answer and the reference go through the harness's ``exact_match`` settings:
case ignored, and the patterns ``,``, ``\$``, ``(?s).*#### `` and ``\.$`` removed, then compared
as strings (so ``1,000`` equals ``1000`` and ``$18.`` equals ``18``, but ``18.00`` does not).
A reply with no match scores as wrong.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Annotated, Final

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer, computed_field

from alflow.datasets.gsm8k import read_rows
from alflow.datasets.types import Session, Turn
from alflow.errors import InvalidInputError

STRICT_PATTERN: Final = re.compile(r"#### (\-?[0-9\.\,]+)")
FLEXIBLE_PATTERN: Final = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")
_IGNORE: Final = (re.compile(","), re.compile(r"\$"), re.compile(r"(?s).*#### "), re.compile(r"\.$"))
QUESTION_TEMPLATE: Final = "Question: {question}\nAnswer:"
DEFAULT_SHOTS: Final = 5
Rounded6 = Annotated[float, PlainSerializer(lambda x: round(x, 6))]
DEFAULT_MAX_TOKENS: Final = 512


@dataclass(frozen=True, slots=True)
class Problem:
    """One GSM8K row: an id, the question and the full reference solution (ending in ``#### N``)."""

    problem_id: str
    question: str
    solution: str

    @property
    def answer(self) -> str:
        """The reference answer as the harness compares it (the text after ``#### ``, normalised)."""
        return normalize(self.solution)


def read_problems(path: str | Path, *, split: str | None = None) -> list[Problem]:
    """Read GSM8K JSONL (``question``, ``answer``); errors name the file, line and field."""
    file = Path(path)
    name = split or file.stem
    out: list[Problem] = []
    for line_no, question, answer in read_rows(file):
        if "####" not in answer:
            raise InvalidInputError(f"{file}:{line_no}: field 'answer' has no '#### <number>'")
        out.append(Problem(f"{name}-{line_no}", question, answer))
    return out


# --------------------------------------------------------------------------------------------
# Extraction and scoring (the harness's filters and exact_match)


def normalize(text: str) -> str:
    """Apply the harness's ``regexes_to_ignore`` and ``ignore_case`` to a prediction or reference."""
    for pattern in _IGNORE:
        text = pattern.sub("", text)
    return text.lower()


def extract_strict(reply: str) -> str | None:
    """strict-match: the first ``#### <number>`` of the reply, or None."""
    found = STRICT_PATTERN.search(reply)
    return found[1] if found else None


def extract_flexible(reply: str) -> str | None:
    """flexible-extract: the last number-like match of the reply, or None."""
    found = FLEXIBLE_PATTERN.findall(reply)
    return next((group for group in found[-1] if group), None) if found else None


def is_correct(prediction: str | None, reference: str) -> bool:
    """Exact match after normalisation; a missing prediction is wrong."""
    return prediction is not None and normalize(prediction) == normalize(reference)


# --------------------------------------------------------------------------------------------
# Prompts


@dataclass(frozen=True)
class PromptConfig:
    """How questions are asked: shots, their seed, an optional instruction, output cap."""

    num_shots: int = DEFAULT_SHOTS
    seed: int = 1234
    instruction: str | None = None
    max_tokens: int = DEFAULT_MAX_TOKENS

    def check(self) -> None:
        """Raise naming the first invalid field."""
        if self.num_shots < 0:
            raise InvalidInputError(f"num_shots={self.num_shots} must not be negative")
        if self.max_tokens < 1:
            raise InvalidInputError(f"max_tokens={self.max_tokens} must be at least 1")


def build_sessions(
    problems: Sequence[Problem], shots: Sequence[Problem], config: PromptConfig
) -> list[Session]:
    """One chat session per problem: optional instruction, seeded few-shot turns, the question."""
    config.check()
    if config.num_shots > len(shots):
        raise InvalidInputError(
            f"num_shots={config.num_shots} but the few-shot pool holds only {len(shots)} examples"
        )
    rng = random.Random(config.seed)
    sessions: list[Session] = []
    for problem in problems:
        prefix: list[dict[str, str]] = []
        if config.instruction:
            prefix.append({"role": "system", "content": config.instruction})
        pool = [
            s
            for s in rng.sample(list(shots), min(len(shots), config.num_shots + 1))
            if s.question != problem.question
        ]
        for shot in pool[: config.num_shots]:
            prefix.append({"role": "user", "content": QUESTION_TEMPLATE.format(question=shot.question)})
            prefix.append({"role": "assistant", "content": shot.solution})
        sessions.append(
            Session(
                session_id=problem.problem_id,
                turns=(
                    Turn(
                        prompt=QUESTION_TEMPLATE.format(question=problem.question),
                        max_tokens=config.max_tokens,
                    ),
                ),
                category="gsm8k",
                prefix_messages=tuple(prefix),
                meta={"answer": problem.answer},
            )
        )
    return sessions


def select_subset(problems: Sequence[Problem], limit: int | None, seed: int) -> list[Problem]:
    """All problems, or a seeded random subset of ``limit`` of them (kept in file order)."""
    if limit is None or limit >= len(problems):
        return list(problems)
    if limit < 1:
        raise InvalidInputError(f"limit={limit} must be at least 1")
    chosen = sorted(random.Random(seed).sample(range(len(problems)), limit))
    return [problems[i] for i in chosen]


# --------------------------------------------------------------------------------------------
# Results


@dataclass(frozen=True, slots=True)
class QuestionResult:
    """One question: the reply, what each filter extracted, and whether it was right."""

    problem_id: str
    reference: str
    reply: str | None
    strict: str | None
    flexible: str | None
    strict_correct: bool
    flexible_correct: bool
    error: str | None = None


def score_reply(problem: Problem, reply: str | None, error: str | None = None) -> QuestionResult:
    """Extract and score one reply (a failed request scores as wrong on both filters)."""
    text = reply or ""
    strict = extract_strict(text) if error is None else None
    flexible = extract_flexible(text) if error is None else None
    return QuestionResult(
        problem.problem_id,
        problem.answer,
        reply,
        strict,
        flexible,
        is_correct(strict, problem.solution),
        is_correct(flexible, problem.solution),
        error,
    )


@dataclass(frozen=True)
class Score:
    """Accuracy of one filter with a Wilson interval (binomial)."""

    name: str
    correct: int
    total: int
    level: Annotated[float, Field(exclude=True)] = 0.95

    @computed_field(return_type=Rounded6)  # type: ignore[prop-decorator]
    @property
    def accuracy(self) -> float:
        """Accuracy: correct / total (0 when nothing was asked)."""
        return self.correct / self.total if self.total else 0.0

    @property
    def interval(self) -> tuple[float, float]:
        """Wilson score interval for the accuracy at ``level``."""
        if not self.total:
            return (0.0, 1.0)
        z = NormalDist().inv_cdf(0.5 + self.level / 2)
        n, p = self.total, self.accuracy
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
        return (max(0.0, centre - half), min(1.0, centre + half))

    @computed_field(return_type=Rounded6)  # type: ignore[prop-decorator]
    @property
    def ci_low(self) -> float:
        """The interval's low end."""
        return self.interval[0]

    @computed_field(return_type=Rounded6)  # type: ignore[prop-decorator]
    @property
    def ci_high(self) -> float:
        """The interval's high end."""
        return self.interval[1]


class Gsm8kSummary(BaseModel):
    """A GSM8K run as M1's ``summary.json`` stores it (``gsm8k``): what was asked and both scores, by filter name."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    model: str
    backend: str
    questions: int
    population: int
    subset: bool
    limit: int | None
    num_shots: int
    seed: int
    duration_s: Annotated[float, PlainSerializer(lambda x: round(x, 3))]
    failed_requests: int
    scores: dict[str, Score]
    notes: list[str] = Field(default_factory=list)


@dataclass(frozen=True)
class EvalResult:
    """A GSM8K run: both scores, per-question results, and what was asked."""

    model: str
    results: tuple[QuestionResult, ...]
    num_shots: int
    seed: int
    limit: int | None
    population: int
    duration_s: float
    backend: str = "alflow"
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def strict(self) -> Score:
        """strict-match accuracy."""
        return Score("strict-match", sum(r.strict_correct for r in self.results), len(self.results))

    @property
    def flexible(self) -> Score:
        """flexible-extract accuracy."""
        return Score("flexible-extract", sum(r.flexible_correct for r in self.results), len(self.results))

    @property
    def failed_requests(self) -> int:
        """Requests that failed (counted as wrong)."""
        return sum(r.error is not None for r in self.results)

    @property
    def subset(self) -> bool:
        """True when only a subset of the test set was asked."""
        return len(self.results) < self.population

    def summary(self) -> Gsm8kSummary:
        """The run without its per-question rows (:func:`alflow.util.rows.dump_row` stores each of those)."""
        return Gsm8kSummary(
            model=self.model,
            backend=self.backend,
            questions=len(self.results),
            population=self.population,
            subset=self.subset,
            limit=self.limit,
            num_shots=self.num_shots,
            seed=self.seed,
            duration_s=self.duration_s,
            failed_requests=self.failed_requests,
            scores={s.name: s for s in (self.strict, self.flexible)},
            notes=list(self.notes),
        )
