"""What is sent: load shapes, SPEED-Bench, literature and random-token workloads, the GSM8K accuracy settings."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Self

from pydantic import Discriminator, Field, Tag, model_validator

from alflow.config.base import (
    MAX_CONCURRENCY,
    MAX_PROMPTS,
    MAX_SEQUENCE_TOKENS,
    StrictModel,
)
from alflow.datasets.literature import LiteratureName
from alflow.datasets.random_tokens import DEFAULT_VOCAB_SIZE
from alflow.loadgen.spec import (
    DEFAULT_STALL_TIMEOUT_S,
    MAX_PROCESSES,
    MAX_REQUEST_RATE,
    MAX_SECONDS,
    MIN_PROCESSES,
    MIN_REQUEST_RATE,
)


class LoadConfig(StrictModel):
    """How requests are offered at one point."""

    concurrency: int = Field(
        1, ge=1, le=MAX_CONCURRENCY, description="Requests (sessions) in flight at once."
    )
    num_prompts: int | None = Field(
        None, ge=1, le=MAX_PROMPTS, description="Measured requests (None: every prompt once)."
    )
    warmup: int = Field(
        0, ge=0, le=MAX_PROMPTS, description="Warm-up requests sent before the measured window."
    )
    request_rate: float | None = Field(
        None, ge=MIN_REQUEST_RATE, le=MAX_REQUEST_RATE, description="Requests per second (None: unlimited)."
    )
    timeout_s: float = Field(
        600.0, gt=0.0, le=MAX_SECONDS, allow_inf_nan=False, description="Per-request timeout in seconds."
    )
    stall_timeout_s: float | None = Field(
        DEFAULT_STALL_TIMEOUT_S,
        gt=0.0,
        le=MAX_SECONDS,
        allow_inf_nan=False,
        description=(
            "Abort the point when the server sends nothing on any open stream for this many seconds (a hung "
            "server fails within it); None: off."
        ),
    )
    client_processes: int = Field(
        1,
        ge=MIN_PROCESSES,
        le=MAX_PROCESSES,
        description=(
            "Client processes sharing the point's load (Linux; at most concurrency): one Python process "
            "saturates near a thousand streams. Concurrency, prompts, warm-up and request rate are split "
            "between them."
        ),
    )

    auto_client_processes: bool = Field(
        False,
        description=(
            "Judge the client by the warm-up (loop lag, CPU share, streams in flight) and, when one process was "
            "the bottleneck, split the measured phase over as many processes as the machine has cores (Linux; "
            "needs client_processes=1 and a warm-up)."
        ),
    )

    @model_validator(mode="after")
    def _processes_within_concurrency(self) -> Self:
        if self.auto_client_processes and (self.client_processes != 1 or self.warmup < 1):
            raise ValueError(
                "auto_client_processes needs client_processes=1 and warmup >= 1 to judge the client by "
                f"(got client_processes={self.client_processes}, warmup={self.warmup})"
            )
        if self.client_processes > self.concurrency:
            raise ValueError(
                f"client_processes={self.client_processes} must not exceed concurrency={self.concurrency} "
                "(each client process keeps at least one session in flight)"
            )
        return self


class SpeedBenchWorkload(StrictModel):
    """SPEED-Bench prompts from a prepared JSONL split (real acceptance: M0 and M1)."""

    kind: Literal["speed-bench"] = Field("speed-bench", description="Workload kind.")
    path: str | None = Field(
        None,
        min_length=1,
        description=(
            "Prepared SPEED-Bench JSONL (e.g. qualitative.jsonl). None: alflow's bundled demo prompts, "
            "which are NOT SPEED-Bench and are labelled as such in every result."
        ),
    )
    category: str = Field("coding", min_length=1, description="Category to run (coding for M0/M1).")
    limit: int | None = Field(
        None, ge=1, le=MAX_PROMPTS, description="Use only the first N prompts of the category."
    )
    max_tokens: int = Field(4096, ge=1, le=MAX_SEQUENCE_TOKENS, description="Output cap per turn.")


class LiteratureWorkload(StrictModel):
    """One of the literature's AL datasets from a local file in its published format (M0)."""

    kind: Literal["literature"] = Field("literature", description="Workload kind.")
    dataset: LiteratureName = Field(description="gsm8k, math500, humaneval, mbpp (full test) or mtbench.")
    path: str | None = Field(
        None,
        min_length=1,
        description=(
            "The dataset file (.jsonl, .jsonl.gz or the hub's .parquet). None: only for gsm8k, the GSM8K "
            "test split shipped with alflow."
        ),
    )
    limit: int | None = Field(
        None, ge=1, le=MAX_PROMPTS, description="Use only the first N prompts (a labelled subset)."
    )
    max_tokens: int = Field(
        4096,
        ge=1,
        le=MAX_SEQUENCE_TOKENS,
        description="Output cap per turn (greedy; the literature caps this way).",
    )

    @model_validator(mode="after")
    def _needs_path(self) -> Self:
        if self.path is None and self.dataset != "gsm8k":
            raise ValueError(
                f"dataset={self.dataset!r} needs path: alflow ships only GSM8K; give the local file "
                "(.jsonl, .jsonl.gz or .parquet)"
            )
        return self


def default_reference_path(dataset: str) -> str:
    """The reference table a literature dataset's M0 writes by default: one table per dataset."""
    return f"references/{dataset}.yaml"


def _workload_kind(value: Any) -> str:
    """The tag of an AL workload; a mapping without ``kind`` is SPEED-Bench (configs written before the union)."""
    if isinstance(value, dict):
        return str(value.get("kind", "speed-bench"))
    return str(getattr(value, "kind", "speed-bench"))


AlWorkload = Annotated[
    Annotated[SpeedBenchWorkload, Tag("speed-bench")] | Annotated[LiteratureWorkload, Tag("literature")],
    Discriminator(_workload_kind),
]
"""The prompts of a real-acceptance measurement: SPEED-Bench, or a literature AL dataset."""


class RandomWorkload(StrictModel):
    """Random-token prompts with fixed input and output lengths (M2, synthetic acceptance)."""

    kind: Literal["random"] = Field("random", description="Workload kind.")
    isl: int = Field(
        1024, ge=1, le=MAX_SEQUENCE_TOKENS, description="Input sequence length in tokens (upper end)."
    )
    osl: int = Field(
        1024,
        ge=1,
        le=MAX_SEQUENCE_TOKENS,
        description="Output sequence length in tokens (fixed with ignore_eos).",
    )
    range_ratio: float = Field(0.8, gt=0.0, le=1.0, description="Input lengths are drawn in [ISL x r, ISL].")
    seed: int = Field(0, description="Seed of the prompts.")
    vocab_size: int = Field(
        DEFAULT_VOCAB_SIZE,
        ge=200,
        le=2**31,
        description=(
            "Token ids are drawn in [100, vocab_size): keep it at or below the served model's vocabulary "
            "(20,000 fits every common model and the simulator)."
        ),
    )
    endpoint: Literal["chat", "completions"] = Field(
        "chat", description="chat: decoded text in the chat template; completions: token ids."
    )


class Gsm8kSettings(StrictModel):
    """The GSM8K accuracy gate of M1."""

    enabled: bool = Field(True, description="Run the GSM8K accuracy gate after the AL gate.")
    limit: int | None = Field(
        None, ge=1, le=MAX_PROMPTS, description="Seeded subset of N questions (None: all 1,319)."
    )
    shots: int = Field(
        5, ge=0, le=100, description="Few-shot examples per question (100: far past any context's use)."
    )
    seed: int = Field(1234, description="Seed of the subset and the few-shot draws.")
    concurrency: int = Field(64, ge=1, le=MAX_CONCURRENCY, description="Requests in flight.")
    max_tokens: int = Field(512, ge=1, le=MAX_SEQUENCE_TOKENS, description="Output cap per reply.")
    threshold: float | None = Field(
        None,
        ge=0.0,
        le=1.0,
        description="Accuracy both scores must reach (None: the thresholds file or 0.90).",
    )
    thresholds_file: str | None = Field(None, min_length=1, description="YAML of per-model thresholds.")
