"""Workload configs -> sessions: SPEED-Bench, the literature's AL datasets and random tokens.

SPEED-Bench files (or the bundled demo prompts); GSM8K, MATH-500, HumanEval, MBPP and MT-Bench from
local files in their published formats (:mod:`alflow.datasets.literature`).
"""

from __future__ import annotations

import hashlib
from importlib import resources
from pathlib import Path

from alflow.config import (
    BenchmarkParams,
    ModelSpec,
    RandomWorkload,
    SamplingParams,
    SpeedBenchWorkload,
    ThinkingMode,
)
from alflow.config.workloads import LiteratureWorkload
from alflow.datasets.literature import LiteratureLoad, load_literature
from alflow.datasets.random_tokens import as_text_sessions, random_sessions
from alflow.datasets.speed_bench import load_speed_bench
from alflow.datasets.types import Session
from alflow.errors import InvalidInputError
from alflow.evals.run import bundled_gsm8k
from alflow.loadgen.endpoints import Sampling
from alflow.plugins import framework_names, plugin_of

DEMO_SOURCE = "alflow-demo"
TINY_SOURCE = "alflow-tiny"
SPEED_BENCH = "nvidia/SPEED-Bench"
BUNDLED_PROMPTS = {"demo_prompts.jsonl": DEMO_SOURCE, "tiny_prompts.jsonl": TINY_SOURCE}
"""Prompt files shipped with alflow (SPEED-Bench schema, written for alflow; NOT SPEED-Bench data)."""


def _bundled(name: str) -> Path:
    return Path(str(resources.files("alflow.datasets") / "data" / name))


def demo_prompts_path() -> Path:
    """The bundled demo prompts (SPEED-Bench schema, written for alflow; not SPEED-Bench data)."""
    return _bundled("demo_prompts.jsonl")


def tiny_prompts_path() -> Path:
    """The bundled prompts for the tiny CPU engine: short code-editing and writing tasks (not SPEED-Bench)."""
    return _bundled("tiny_prompts.jsonl")


def dataset_name(path: Path) -> str:
    """The dataset a prompt file holds: a bundled file's own source name, else SPEED-Bench."""
    for name, source in BUNDLED_PROMPTS.items():
        if path.name == name and path.resolve() == _bundled(name).resolve():
            return source
    return SPEED_BENCH


def speed_bench_file(workload: SpeedBenchWorkload) -> Path:
    """The prompt file a SPEED-Bench workload reads."""
    return Path(workload.path) if workload.path else demo_prompts_path()


def file_sha256(path: Path) -> str:
    """``sha256:<hex>`` of a file's bytes (the dataset hash recorded in provenance)."""
    with path.open("rb") as fh:
        return "sha256:" + hashlib.file_digest(fh, "sha256").hexdigest()


def literature_load(workload: LiteratureWorkload) -> LiteratureLoad:
    """The literature dataset's sessions and what its file held (a subset is labelled by it)."""
    # GSM8K without a path: the test split shipped with alflow
    path = Path(workload.path) if workload.path is not None else bundled_gsm8k("test")
    return load_literature(workload.dataset, path, limit=workload.limit, max_tokens=workload.max_tokens)


def workload_category(workload: SpeedBenchWorkload | LiteratureWorkload) -> str:
    """The column a measurement on this workload fills: the SPEED-Bench category, or the dataset's name."""
    return workload.dataset if isinstance(workload, LiteratureWorkload) else workload.category


def dataset_description(workload: SpeedBenchWorkload | LiteratureWorkload) -> dict[str, str]:
    """Name, file, category and hash of the prompts, for provenance and cache keys.

    A literature dataset also records its hub name, split, licence and how many of the published rows
    were sent (``subset``: ``true`` when the file or ``limit`` left some out).
    """
    if isinstance(workload, LiteratureWorkload):
        loaded = literature_load(workload)
        spec = loaded.spec
        return {
            "dataset": loaded.label(),
            "file": str(loaded.file),
            "category": spec.name,
            "dataset_hash": file_sha256(loaded.file),
            "source": spec.source,
            "split": spec.split,
            "licence": spec.licence,
            "prompts": str(len(loaded.sessions)),
            "expected_prompts": str(spec.expected_rows),
            "subset": "true" if loaded.subset else "false",
        }
    path = speed_bench_file(workload)
    return {
        "dataset": dataset_name(path),
        "file": str(path),
        "category": workload.category,
        "dataset_hash": file_sha256(path),
    }


def reference_table_keys(
    workload: SpeedBenchWorkload | LiteratureWorkload, description: dict[str, str]
) -> tuple[str, str]:
    """``(dataset, category)`` of the reference table a calibration on this workload writes.

    SPEED-Bench: ``speed-bench`` (or the bundled prompts' own name) and the category; a literature
    dataset: its short name and its published split (``gsm8k``, ``main/test``).
    """
    if isinstance(workload, LiteratureWorkload):
        return workload.dataset, description.get("split") or workload.dataset
    name = description["dataset"]
    return ("speed-bench" if name == SPEED_BENCH else name), workload.category


def al_workload_sessions(workload: SpeedBenchWorkload | LiteratureWorkload) -> list[Session]:
    """The sessions of a real-acceptance workload (SPEED-Bench category or literature dataset)."""
    if isinstance(workload, LiteratureWorkload):
        return list(literature_load(workload).sessions)
    return speed_bench_sessions(workload)


def speed_bench_sessions(workload: SpeedBenchWorkload) -> list[Session]:
    """The category's sessions from the workload's file."""
    return load_speed_bench(
        speed_bench_file(workload),
        categories=[workload.category],
        limit=workload.limit,
        max_tokens=workload.max_tokens,
    )


def random_workload_sessions(
    workload: RandomWorkload, num_prompts: int, *, seed_offset: int = 0, framework: str | None = None
) -> list[Session]:
    """``num_prompts`` random-token sessions (token ids; the chat endpoint detokenizes them first).

    For a ``framework`` whose completions endpoint takes text only (its plugin's ``token_id_prompts`` false: ATOM),
    the prompts are the same random draws as words (:func:`~alflow.datasets.random_tokens.as_text_sessions`).
    """
    sessions = random_sessions(
        num_prompts,
        isl=workload.isl,
        osl=workload.osl,
        range_ratio=workload.range_ratio,
        seed=workload.seed + seed_offset,
        vocab_size=workload.vocab_size,
    )
    if framework in framework_names() and not getattr(plugin_of(framework), "token_id_prompts", True):
        return as_text_sessions(sessions)
    return sessions


PROMPT_TOKEN_BYTES = 40
"""Memory one random prompt token takes while held (measured: a Python int of 32 bytes and its slot in the tuple)."""


def available_memory_bytes() -> int | None:
    """The memory this machine has available (Linux's ``MemAvailable``); None where it is not known."""
    try:
        with Path("/proc/meminfo").open(encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _gb(n: int) -> str:
    return f"{n / 1e9:,.1f} GB" if n >= 1e8 else f"{n / 1e6:,.1f} MB"


def check_prompt_memory(tokens: int, what: str, remedy: str, *, available: int | None = None) -> None:
    """Refuse (one line) prompts of ``tokens`` that would fill more than half of the memory ``available``.

    Random prompts are drawn before a point's first request and held in memory while it runs: too many would
    exhaust the machine before any request. ``available`` defaults to this machine's (unknown: no check).
    """
    need = tokens * PROMPT_TOKEN_BYTES
    free = available_memory_bytes() if available is None else available
    if free is None or need <= free // 2:
        return
    raise InvalidInputError(
        f"{what} are {tokens:,} tokens, about {_gb(need)} in memory, more than half of the {_gb(free)} this "
        f"machine has available: {remedy}"
    )


def check_m2_prompt_memory(params: BenchmarkParams, *, available: int | None = None) -> None:
    """M2: refuse a sweep whose largest point's random prompts (measured and warm-up) would not fit in memory."""
    top = max(params.concurrencies)
    prompts = params.prompts_per_concurrency * top
    warmup = params.warmup_per_concurrency * top
    isl = params.workload.isl
    check_prompt_memory(
        (prompts + warmup) * isl,
        f"M2's point at concurrency {top:,}: {prompts:,} measured and {warmup:,} warm-up random prompts of up to "
        f"workload.isl={isl:,} tokens",
        "lower prompts_per_concurrency, warmup_per_concurrency, the largest concurrency or workload.isl",
        available=available,
    )


def request_sampling(
    model: ModelSpec,
    thinking: ThinkingMode,
    *,
    max_tokens: int | None = None,
    fixed_length: int | None = None,
) -> Sampling:
    """The loadgen sampling for a model's recommended settings in a thinking mode."""
    params: SamplingParams = model.sampling(thinking)
    extra = {
        key: value
        for key, value in (
            ("min_p", params.min_p),
            ("presence_penalty", params.presence_penalty),
            ("repetition_penalty", params.repetition_penalty),
        )
        if value is not None
    }
    return Sampling(
        max_tokens=fixed_length or max_tokens or params.max_tokens,
        temperature=params.temperature,
        top_p=params.top_p,
        top_k=params.top_k,
        seed=params.seed,
        min_tokens=fixed_length,
        ignore_eos=True if fixed_length else None,
        chat_template_kwargs=model.chat_template_kwargs(thinking) or None,
        extra_body=extra,
    )
