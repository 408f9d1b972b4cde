"""The literature's acceptance-length datasets, read from local files in their published formats.

The speculative-decoding literature reports AL on five standard sets; AIPerf registers them as
``spec_al_gsm8k``, ``spec_al_math500``, ``spec_al_humaneval``, ``spec_al_mbpp`` and
``spec_al_mtbench`` (``docs/tutorials/speed-bench.md`` and ``src/aiperf/dataset/loader/mt_bench.py``
of ai-dynamo/aiperf). alflow sends them the same way: each prompt **verbatim** (the raw
question / problem / prompt / text field) as a chat message, so the served model's chat template
wraps it; greedy sampling; output capped with ``max_tokens``. MT-Bench rows are two user turns sent in
order on one session, the model's live reply appended between them (:class:`Session` does that).

Nothing is downloaded here: every loader reads a local file in the format its publisher ships:

- ``.jsonl`` (one JSON object a line), ``.jsonl.gz`` (the same, gzip), ``.parquet`` (the Hugging Face
  hub's files, read with polars; rows are numbered from 1 in messages).

A malformed row is an :class:`InvalidInputError` naming the file, the line (JSONL) or row (parquet)
and the field. A file whose row count differs from the published split is accepted as a subset, with
a warning, and :attr:`LiteratureLoad.subset` labels it wherever the run's dataset is described.
"""

from __future__ import annotations

import gzip
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, get_args

from alflow.datasets.gsm8k import reference_answer
from alflow.datasets.types import MAX_DATASET_BYTES, Session, Turn, jsonl_rows, refuse_large
from alflow.errors import InvalidInputError
from alflow.util.fsutil import file_problem

log = logging.getLogger(__name__)

LiteratureName = Literal["gsm8k", "math500", "humaneval", "mbpp", "mtbench"]
"""The datasets' short names: AIPerf's ``spec_al_<name>`` selectors and its report's column names
(``SPEC_AL_BENCHMARKS`` in ``src/aiperf/analysis/speed_bench_report.py``)."""

LITERATURE_NAMES: Final[tuple[str, ...]] = get_args(LiteratureName)

MBPP_TEST_IDS: Final = range(11, 511)
"""MBPP's test split is task_ids 11..510 (google-research/mbpp README: 1-10 few-shot prompts,
11-510 test, 511-600 validation, 601-974 train); ``mbpp.jsonl`` holds all 974 rows, the hub's
``full/test-*.parquet`` only these 500."""


@dataclass(frozen=True, slots=True)
class LiteratureSpec:
    """One dataset: where it is published, what its split holds and under which licence."""

    name: str
    source: str
    """The Hugging Face dataset it is published as (AIPerf's ``hf_dataset_name``)."""
    split: str
    """The published subset/split the literature uses."""
    expected_rows: int
    licence: str
    fields: tuple[str, ...]
    """The fields every row must hold (the published schema's names)."""


SPECS: Final[Mapping[str, LiteratureSpec]] = {
    # openai/gsm8k (main, test): {"question", "answer"}; 1,319 rows, MIT (DOMAIN.md section 7)
    "gsm8k": LiteratureSpec("gsm8k", "openai/gsm8k", "main/test", 1319, "MIT", ("question", "answer")),
    # HuggingFaceH4/MATH-500 test.jsonl: problem, solution, answer, subject, level, unique_id; 500 rows, MIT
    "math500": LiteratureSpec("math500", "HuggingFaceH4/MATH-500", "test", 500, "MIT", ("problem",)),
    # openai/openai_humaneval (HumanEval.jsonl.gz): task_id, prompt, canonical_solution, test, entry_point;
    # 164 rows, MIT
    "humaneval": LiteratureSpec(
        "humaneval", "openai/openai_humaneval", "test", 164, "MIT", ("task_id", "prompt")
    ),
    # google-research-datasets/mbpp (full, test): task_id, text, code, test_list, test_setup_code,
    # challenge_test_list; 500 rows (task_ids 11..510), CC-BY-4.0
    "mbpp": LiteratureSpec(
        "mbpp", "google-research-datasets/mbpp", "full/test", 500, "CC-BY-4.0", ("task_id", "text")
    ),
    # HuggingFaceH4/mt_bench_prompts (train): prompt (list of user turns), prompt_id, category, reference;
    # 80 two-turn rows, Apache-2.0. FastChat's own question.jsonl names the turns "turns" and the id
    # "question_id" (the dataset card: "rename turns to prompts"); both spellings are read.
    "mtbench": LiteratureSpec(
        "mtbench", "HuggingFaceH4/mt_bench_prompts", "train", 80, "Apache-2.0", ("prompt",)
    ),
}

FORMATS: Final = (".jsonl", ".jsonl.gz", ".parquet")


@dataclass(frozen=True, slots=True)
class LiteratureLoad:
    """The sessions of one dataset file, and what the file held."""

    spec: LiteratureSpec
    file: Path
    sessions: tuple[Session, ...]
    rows: int
    """Rows of the split the file held (MBPP: those with a test task_id), before ``limit``."""

    @property
    def subset(self) -> bool:
        """True when the file does not hold the whole published split (or ``limit`` cut it)."""
        return self.rows != self.spec.expected_rows or len(self.sessions) != self.rows

    def label(self) -> str:
        """The dataset's name for provenance: the hub name, marked when only a subset was sent."""
        if not self.subset:
            return self.spec.source
        return f"{self.spec.source} (subset: {len(self.sessions)} of {self.spec.expected_rows} prompts)"


def _fail(path: Path, where: str, what: str) -> InvalidInputError:
    return InvalidInputError(f"{path}:{where}: {what}")


def read_rows(path: str | Path) -> Iterator[tuple[str, Any]]:
    """``(where, row)`` for every row: ``where`` is ``line N`` (JSONL) or ``row N`` (parquet, from 1)."""
    file = Path(path)
    why = file_problem(file)
    if why is not None:
        raise InvalidInputError(f"dataset file {file} {why}")
    refuse_large(file, "dataset")
    fmt = next((ext for ext in FORMATS if file.name.lower().endswith(ext)), None)
    if fmt is None:
        raise InvalidInputError(
            f"dataset file {file} has an unknown format; allowed: {', '.join(FORMATS)} (by file name)"
        )
    if fmt == ".parquet":
        import polars as pl  # here: the load generator's processes import this module (through the plugins)

        try:
            frame = pl.read_parquet(file)
        except Exception as exc:  # polars raises several types for a damaged file
            raise InvalidInputError(f"{file}: not a readable parquet file ({exc})") from None
        for i, row in enumerate(frame.iter_rows(named=True), start=1):
            yield f"row {i}", row
        return
    with gzip.open(file, "rb") if fmt == ".jsonl.gz" else file.open("rb") as fh:
        try:
            for line_no, row in jsonl_rows(_bounded_lines(fh, file), f"{file}:line "):
                yield f"line {line_no}", row
        except (OSError, EOFError) as exc:  # a truncated or non-gzip .gz
            raise InvalidInputError(f"{file}: cannot be read as gzip ({exc})") from None


def _bounded_lines(fh: Any, file: Path) -> Iterator[bytes]:
    """The lines of ``fh`` while their sum stays within :data:`MAX_DATASET_BYTES` (a small ``.gz`` may inflate)."""
    total = 0
    while line := fh.readline(MAX_DATASET_BYTES + 1 - total):
        total += len(line)
        if total > MAX_DATASET_BYTES:
            raise InvalidInputError(
                f"dataset file {file}: more than the {MAX_DATASET_BYTES:,} bytes a dataset file may be, uncompressed"
            )
        yield line


def _text(row: Mapping[str, Any], name: str, path: Path, where: str) -> str:
    value = row.get(name)
    if not isinstance(value, str) or not value.strip():
        raise _fail(path, where, f"field {name!r} is missing or not a non-empty string")
    return value


def _number(where: str) -> str:
    """The line or row number of ``line N`` / ``row N``."""
    return where.rpartition(" ")[2]


def _meta(row: Mapping[str, Any], *names: str) -> dict[str, str]:
    return {n: str(row[n]) for n in names if row.get(n) is not None}


def _turn(text: str, max_tokens: int | None) -> tuple[Turn, ...]:
    return (Turn(prompt=text, max_tokens=max_tokens),)


def _gsm8k(row: Mapping[str, Any], path: Path, where: str, max_tokens: int | None) -> Session:
    question = _text(row, "question", path, where)
    answer = _text(row, "answer", path, where)
    try:
        number = reference_answer(answer)
    except InvalidInputError:
        raise _fail(path, where, "field 'answer' has no '#### <number>' final answer") from None
    n = _number(where)
    return Session(f"gsm8k-{n}", _turn(question, max_tokens), "gsm8k", meta={"answer": number, "at": where})


def _math500(row: Mapping[str, Any], path: Path, where: str, max_tokens: int | None) -> Session:
    problem = _text(row, "problem", path, where)
    sid = str(row.get("unique_id") or f"math500-{_number(where)}")
    meta = {**_meta(row, "subject", "level", "answer", "unique_id"), "at": where}
    return Session(sid, _turn(problem, max_tokens), "math500", meta=meta)


def _humaneval(row: Mapping[str, Any], path: Path, where: str, max_tokens: int | None) -> Session:
    task = row.get("task_id")
    if isinstance(task, bool) or not isinstance(task, str | int) or task == "":
        raise _fail(path, where, "field 'task_id' is missing or not a string or integer id")
    prompt = _text(row, "prompt", path, where)
    meta = {**_meta(row, "task_id", "entry_point"), "at": where}
    return Session(str(task), _turn(prompt, max_tokens), "humaneval", meta=meta)


def _mtbench(row: Mapping[str, Any], path: Path, where: str, max_tokens: int | None) -> Session:
    name = "prompt" if "prompt" in row else "turns"
    raw = row.get(name)
    if not isinstance(raw, list) or not raw:
        raise _fail(path, where, "field 'prompt' (or FastChat's 'turns') is missing or not a non-empty list")
    turns: list[Turn] = []
    for i, text in enumerate(raw):
        if not isinstance(text, str) or not text.strip():
            raise _fail(path, where, f"field '{name}[{i}]' is not a non-empty string")
        turns.append(Turn(prompt=text, max_tokens=max_tokens))
    ident = row.get("prompt_id", row.get("question_id"))
    sid = f"mtbench-{ident}" if ident is not None else f"mtbench-{_number(where)}"
    meta = {**_meta(row, "prompt_id", "question_id", "category"), "at": where}
    return Session(sid, tuple(turns), "mtbench", meta=meta)


def _mbpp_task(row: Mapping[str, Any], path: Path, where: str) -> int:
    value = row.get("task_id")
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(path, where, f"field 'task_id' is {value!r}, expected an integer")
    return value


def _mbpp(row: Mapping[str, Any], path: Path, where: str, max_tokens: int | None) -> Session:
    task = _mbpp_task(row, path, where)
    text = _text(row, "text", path, where)
    return Session(f"mbpp-{task}", _turn(text, max_tokens), "mbpp", meta={"task_id": str(task), "at": where})


_PARSERS: Final[Mapping[str, Callable[[Mapping[str, Any], Path, str, int | None], Session]]] = {
    "gsm8k": _gsm8k,
    "math500": _math500,
    "humaneval": _humaneval,
    "mbpp": _mbpp,
    "mtbench": _mtbench,
}


def spec_of(name: str) -> LiteratureSpec:
    """The dataset's spec; an unknown name is an error listing the known ones."""
    try:
        return SPECS[name]
    except KeyError:
        raise InvalidInputError(
            f"unknown literature dataset {name!r}; allowed: {', '.join(LITERATURE_NAMES)}"
        ) from None


def load_literature(
    name: str, path: str | Path, *, limit: int | None = None, max_tokens: int | None = None
) -> LiteratureLoad:
    """The dataset's sessions from ``path`` (``.jsonl``, ``.jsonl.gz`` or ``.parquet``), in file order.

    MBPP keeps only the test task_ids (11..510), so the full ``mbpp.jsonl`` and the hub's test parquet
    give the same sessions. A row count other than the published split's is a warning (a subset),
    never an error.
    """
    spec = spec_of(name)
    file = Path(path)
    parse = _PARSERS[name]
    sessions: list[Session] = []
    for where, row in read_rows(file):
        if not isinstance(row, dict):
            raise _fail(file, where, f"row is a {type(row).__name__}, expected an object")
        if name == "mbpp" and _mbpp_task(row, file, where) not in MBPP_TEST_IDS:
            continue
        sessions.append(parse(row, file, where, max_tokens))
    if not sessions:
        raise InvalidInputError(f"{spec.name} file {file} holds no rows of the {spec.split} split")
    rows = len(sessions)
    if rows != spec.expected_rows:
        log.warning(
            "%s holds %d %s rows; the published %s split has %d: running it as a subset",
            file,
            rows,
            spec.name,
            spec.split,
            spec.expected_rows,
        )
    if limit is not None:
        sessions = sessions[:limit]
    log.info("loaded %d %s sessions from %s", len(sessions), spec.name, file)
    return LiteratureLoad(spec=spec, file=file, sessions=tuple(sessions), rows=rows)
