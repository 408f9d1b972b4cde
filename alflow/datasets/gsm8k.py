"""GSM8K loader: JSONL rows with ``question`` and ``answer`` (the number after ``####``).

Each row becomes a single-turn :class:`Session` whose ``meta["answer"]`` holds the reference
number; optional few-shot examples (from the train file) go before the question as alternating
user/assistant messages, the way the common harness sends them to a chat endpoint.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

from alflow.datasets.types import MAX_DATASET_BYTES, Session, Turn, jsonl_rows, refuse_large
from alflow.errors import InvalidInputError
from alflow.util.fsutil import file_problem

_ANSWER: Final = re.compile(r"####\s*(-?[\d,]*\.?\d+)")
DEFAULT_MAX_TOKENS: Final = 512
MAX_FILE_BYTES: Final = MAX_DATASET_BYTES
"""The largest GSM8K file read (the train split is 4 MB): a 2 GB file of one line was read whole, then refused."""


def reference_answer(solution: str) -> str:
    """The number after ``####`` in a GSM8K reference solution, without thousands separators."""
    m = _ANSWER.search(solution)
    if m is None:
        raise InvalidInputError(f"no '#### <number>' in GSM8K answer {solution[-80:]!r}")
    return m.group(1).replace(",", "")


def read_rows(path: Path) -> list[tuple[int, str, str]]:
    """``(line number, question, answer)`` of every row; errors name the file, line and field."""
    why = file_problem(path)
    if why is not None:
        raise InvalidInputError(f"GSM8K file {path} {why}")
    refuse_large(path, "GSM8K")
    rows: list[tuple[int, str, str]] = []
    with path.open("rb") as fh:
        for line_no, row in jsonl_rows(fh, f"{path}:"):
            for name in ("question", "answer"):
                if not isinstance(row, dict) or not isinstance(row.get(name), str) or not row[name]:
                    raise InvalidInputError(
                        f"{path}:{line_no}: field {name!r} is missing or not a non-empty string"
                    )
            rows.append((line_no, row["question"], row["answer"]))
    if not rows:
        raise InvalidInputError(f"GSM8K file {path} holds no rows")
    return rows


def load_gsm8k(
    path: str | Path,
    *,
    limit: int | None = None,
    num_shots: int = 0,
    shots_path: str | Path | None = None,
    max_tokens: int | None = DEFAULT_MAX_TOKENS,
) -> list[Session]:
    """Load GSM8K questions as sessions; ``num_shots`` examples come from ``shots_path`` (train)."""
    file = Path(path)
    rows = read_rows(file)
    prefix: list[dict[str, str]] = []
    if num_shots:
        if shots_path is None:
            raise InvalidInputError("num_shots > 0 needs shots_path (the GSM8K train file)")
        shots = read_rows(Path(shots_path))
        if num_shots > len(shots):
            raise InvalidInputError(f"num_shots={num_shots} but {shots_path} holds only {len(shots)} rows")
        for _, q, a in shots[:num_shots]:
            prefix += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
    sessions = [
        Session(
            session_id=f"gsm8k-{line_no}",
            turns=(Turn(prompt=question, max_tokens=max_tokens),),
            category="gsm8k",
            prefix_messages=tuple(prefix),
            meta={"answer": reference_answer(answer), "line": str(line_no)},
        )
        for line_no, question, answer in rows
    ]
    return sessions[:limit] if limit is not None else sessions
