"""SPEED-Bench loader for the JSONL files written by the official preparation script.

Schema (DOMAIN.md section 6): one row per line with ``question_id``, ``category`` (the entropy tier
for throughput splits), ``sub_category``, ``source``, ``src_id``, ``difficulty``, ``multiturn`` and
``messages`` (user turns only). A row still holding the unresolved placeholder, or a malformed row,
is rejected with an error naming the file, the line and the field.

:func:`download_speed_bench` runs the preparation through the Hugging Face ``datasets`` library on a
machine with hub access; it imports ``datasets`` lazily and says how to install it when missing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Final

import orjson

from alflow.datasets.types import MAX_SPEED_BENCH_BYTES, Session, Turn, jsonl_rows, refuse_large
from alflow.errors import InvalidInputError
from alflow.util.fsutil import file_problem

log = logging.getLogger(__name__)

PLACEHOLDER: Final = "FULL BENCHMARK DATA SHOULD BE FETCHED FROM THE SOURCE USING SPECDEC_BENCH"
HF_DATASET: Final = "nvidia/SPEED-Bench"
QUALITATIVE_CATEGORIES: Final = (
    "coding",
    "humanities",
    "math",
    "multilingual",
    "qa",
    "rag",
    "reasoning",
    "roleplay",
    "stem",
    "summarization",
    "writing",
)
ENTROPY_TIERS: Final = ("low_entropy", "mixed", "high_entropy")
SPLITS: Final = (
    "qualitative",
    "throughput_1k",
    "throughput_2k",
    "throughput_8k",
    "throughput_16k",
    "throughput_32k",
)
DEFAULT_MAX_TOKENS: Final = 4096
_STR_FIELDS: Final = ("question_id", "category")


def _fail(path: Path, line: int, what: str) -> InvalidInputError:
    return InvalidInputError(f"{path}:{line}: {what}")


def parse_row(row: Any, path: Path, line: int, *, max_tokens: int | None) -> Session:
    """One JSONL row as a :class:`Session`; raises naming file, line and field when malformed."""
    if not isinstance(row, dict):
        raise _fail(path, line, f"row is a {type(row).__name__}, expected a JSON object")
    for name in _STR_FIELDS:
        value = row.get(name)
        if not isinstance(value, str) or not value:
            raise _fail(path, line, f"field {name!r} is missing or not a non-empty string")
    messages = row.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _fail(path, line, "field 'messages' is missing or not a non-empty list")
    turns: list[Turn] = []
    for i, msg in enumerate(messages):
        where = f"field 'messages[{i}]'"
        if not isinstance(msg, dict):
            raise _fail(path, line, f"{where} is not an object")
        if msg.get("role") != "user":
            raise _fail(path, line, f"{where}.role is {msg.get('role')!r}; only user turns are allowed")
        content = msg.get("content")
        if not isinstance(content, str) or not content:
            raise _fail(path, line, f"{where}.content is missing or not a non-empty string")
        if PLACEHOLDER in content:
            raise _fail(
                path,
                line,
                f"{where}.content holds the unresolved placeholder {PLACEHOLDER!r}: run the official "
                "preparation (alflow.datasets.speed_bench.download_speed_bench or SPECDEC_BENCH's prepare "
                "script) to fetch the full data",
            )
        turns.append(Turn(prompt=content, max_tokens=max_tokens))
    multiturn = row.get("multiturn", len(turns) > 1)
    if not isinstance(multiturn, bool):
        raise _fail(path, line, f"field 'multiturn' is {multiturn!r}, expected true or false")
    if not multiturn and len(turns) > 1:
        raise _fail(path, line, f"field 'multiturn' is false but 'messages' has {len(turns)} user turns")
    meta = {
        k: str(row[k])
        for k in ("question_id", "sub_category", "source", "src_id", "difficulty")
        if row.get(k) is not None
    }
    return Session(session_id=row["question_id"], turns=tuple(turns), category=row["category"], meta=meta)


def load_speed_bench(
    path: str | Path,
    *,
    categories: Sequence[str] | None = None,
    limit: int | None = None,
    max_tokens: int | None = DEFAULT_MAX_TOKENS,
) -> list[Session]:
    """Load a prepared SPEED-Bench split (JSONL), keeping only ``categories`` when given.

    For throughput splits the category is the entropy tier (``low_entropy``, ``mixed``,
    ``high_entropy``). An unknown category is an error listing the categories the file holds.
    """
    file = Path(path)
    why = file_problem(file)
    if why is not None:
        raise InvalidInputError(f"SPEED-Bench file {file} {why}")
    refuse_large(file, "SPEED-Bench", limit=MAX_SPEED_BENCH_BYTES)
    sessions: list[Session] = []
    with file.open("rb") as fh:
        for line_no, row in jsonl_rows(fh, f"{file}:"):
            sessions.append(parse_row(row, file, line_no, max_tokens=max_tokens))
    if not sessions:
        raise InvalidInputError(f"SPEED-Bench file {file} holds no rows")
    if categories:
        present = sorted({s.category or "" for s in sessions})
        unknown = [c for c in categories if c not in present]
        if unknown:
            raise InvalidInputError(
                f"unknown SPEED-Bench category {', '.join(map(repr, unknown))} in {file}; "
                f"the file holds: {', '.join(present)}"
            )
        wanted = set(categories)
        sessions = [s for s in sessions if s.category in wanted]
    if limit is not None:
        sessions = sessions[:limit]
    log.info("loaded %d SPEED-Bench sessions from %s", len(sessions), file)
    return sessions


def write_rows(path: str | Path, rows: Iterable[dict[str, Any]]) -> int:
    """Write rows in the prepare script's JSONL schema; returns the number of rows written."""
    n = 0
    with Path(path).open("wb") as fh:
        for row in rows:
            fh.write(orjson.dumps(row) + b"\n")
            n += 1
    return n


def download_speed_bench(
    out_dir: str | Path,
    *,
    splits: Sequence[str] = ("qualitative",),
    token: str | None = None,
    dataset: str = HF_DATASET,
) -> list[Path]:
    """Fetch SPEED-Bench from the Hugging Face hub and write one JSONL file per split.

    Needs hub access and the ``datasets`` package (``pip install datasets``); gated sources
    (``cais/hle``) need ``token``. Rows that still hold the placeholder after download are written
    as they are and rejected by :func:`load_speed_bench` with a clear message, so an incomplete
    preparation never passes silently.
    """
    unknown = [s for s in splits if s not in SPLITS]
    if unknown:
        raise InvalidInputError(f"unknown SPEED-Bench split {', '.join(unknown)}; known: {', '.join(SPLITS)}")
    try:
        import datasets  # type: ignore[import-not-found,unused-ignore]
    except ImportError as exc:
        raise InvalidInputError(
            "downloading SPEED-Bench needs the Hugging Face 'datasets' package: pip install datasets "
            "(and hub access; set HF_TOKEN for gated sources)"
        ) from exc
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for split in splits:
        data = datasets.load_dataset(dataset, split, token=token)
        part = data["test"] if "test" in data else data[next(iter(data))]
        target = out / f"{split}.jsonl"
        n = write_rows(target, (_normalise(dict(r)) for r in part))
        log.info("wrote %d rows of %s/%s to %s", n, dataset, split, target)
        written.append(target)
    return written


def _normalise(row: dict[str, Any]) -> dict[str, Any]:
    """Keep only user turns and the schema's fields (the hub rows may carry extra columns)."""
    messages = [
        {"role": "user", "content": m["content"]}
        for m in row.get("messages") or row.get("turns") or []
        if isinstance(m, dict) and m.get("role", "user") == "user"
    ]
    keys = ("question_id", "category", "sub_category", "source", "src_id", "difficulty", "multiturn")
    out = {k: row.get(k) for k in keys}
    out["messages"] = messages
    if out["multiturn"] is None:
        out["multiturn"] = len(messages) > 1
    return out
