"""The request objects every workload produces and the load generator consumes.

A :class:`Session` is one dataset row: one or more user turns sent in order on one concurrency
slot. A multi-turn session (SPEED-Bench ``multiturn`` rows) sends turn 2 after turn 1's live reply
has been appended to the history, so the server sees the conversation as a user would build it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import orjson

from alflow.errors import InvalidInputError


@dataclass(frozen=True, slots=True)
class Turn:
    """One user turn: chat message content (text) or a completions prompt (text or token ids).

    ``max_tokens``/``min_tokens``/``ignore_eos`` override the run's sampling options for this turn
    (random-token workloads fix the output length per request this way).
    """

    prompt: str | tuple[int, ...]
    max_tokens: int | None = None
    min_tokens: int | None = None
    ignore_eos: bool | None = None
    input_tokens_hint: int | None = None


@dataclass(frozen=True, slots=True)
class Session:
    """One workload row: its turns, the messages placed before the first turn, and labels."""

    session_id: str
    turns: tuple[Turn, ...]
    category: str | None = None
    prefix_messages: tuple[Mapping[str, str], ...] = ()
    meta: Mapping[str, str] = field(default_factory=dict)

    @property
    def multiturn(self) -> bool:
        """True when the session has more than one user turn."""
        return len(self.turns) > 1


MAX_DATASET_BYTES: Final = 64 << 20
"""The largest dataset file read (64 MiB; GSM8K's train split is 4 MB): a 3 GB file took 6.5 GB of memory (round 15)."""
MAX_SPEED_BENCH_BYTES: Final = 512 << 20
"""The largest SPEED-Bench file read (512 MiB): room for its ``throughput_32k`` split of 32k-token prompts (estimated
from its prompt lengths at a few hundred MB; no real file was measured here)."""


def refuse_large(path: Path, what: str, *, size: int | None = None, limit: int = MAX_DATASET_BYTES) -> None:
    """Refuse a dataset file larger than ``limit`` by its size (``stat``, or ``size`` of the open file), unread.

    One line names the file, its size and the bound: ``<what> file <path>: N bytes, larger than the M bytes a
    <what> file may be``. Every dataset loader calls it before reading (GSM8K, custom, SPEED-Bench, literature).
    """
    actual = path.stat().st_size if size is None else size
    if actual > limit:
        raise InvalidInputError(
            f"{what} file {path}: {actual:,} bytes, larger than the {limit:,} bytes a {what} file may be"
        )


def jsonl_rows(lines: Iterable[bytes], at: str) -> Iterator[tuple[int, Any]]:
    """``(line number, parsed row)`` of every non-blank JSON line; a bad one raises ``<at><line>: not valid JSON``."""
    for line_no, raw in enumerate(lines, start=1):
        if raw.strip():
            try:
                row = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                raise InvalidInputError(f"{at}{line_no}: not valid JSON ({exc})") from None
            yield line_no, row
