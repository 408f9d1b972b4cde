"""The simulator speaking vLLM: its ``/metrics``.

``num_drafts`` = (request, verify step) pairs, ``num_draft_tokens`` = K per pair,
``num_accepted_tokens`` = accepted drafts, ``..._per_pos{position=i}`` = pairs that accepted the
draft at 0-based position i. AL = 1 + Δaccepted / Δdrafts exactly.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import cast

from prometheus_client.metrics_core import Metric

from alflow.errors import InvalidInputError
from alflow.frameworks.sim_source import plain_families
from alflow.frameworks.vllm import names as vllm_names
from alflow.sim.dialects import EngineSettings, JsonView, labelled_counter, success_family
from alflow.sim.sources import FrameworkSettings
from alflow.sim.stats import EngineStats


@dataclass(frozen=True)
class VllmEmitter:
    """vLLM's ``/metrics``: ``vllm:*`` counters with labels ``model_name`` and ``engine``."""

    name: str = "vllm"
    metrics_path: str = vllm_names.VLLM_METRICS_PATH
    records_iterations: bool = False

    def json_routes(self) -> Mapping[str, JsonView]:
        """None beside the metrics."""
        return {}

    def families(self, stats: EngineStats, config: EngineSettings) -> Iterator[Metric]:
        lab = {"model_name": config.served_model_name, "engine": "0"}
        n, s, c = vllm_names, stats, stats.created_s
        per_pos = enumerate(s.accepted_per_position())
        return plain_families(
            (
                ("counter", n.VLLM_NUM_DRAFTS, "Number of spec decoding drafts.", s.num_drafts),
                ("counter", n.VLLM_NUM_DRAFT_TOKENS, "Number of draft tokens.", s.draft_tokens),
                ("counter", n.VLLM_NUM_ACCEPTED_TOKENS, "Number of accepted tokens.", s.accepted_tokens),
                labelled_counter(
                    n.VLLM_ACCEPTED_PER_POS,
                    "Accepted tokens per draft position.",
                    lab,
                    "position",
                    per_pos,
                    c,
                ),
                ("counter", n.VLLM_PROMPT_TOKENS, "Number of prefill tokens processed.", s.prompt_tokens),
                (
                    "counter",
                    n.VLLM_GENERATION_TOKENS,
                    "Number of generation tokens processed.",
                    s.generation_tokens,
                ),
                success_family(n.VLLM_REQUEST_SUCCESS, lab, s),
                (
                    "gauge",
                    n.VLLM_NUM_RUNNING,
                    "Number of requests in model execution batches.",
                    s.num_running,
                ),
                ("gauge", n.VLLM_NUM_WAITING, "Number of requests waiting to be processed.", s.num_waiting),
                ("histogram", n.VLLM_TTFT_SECONDS, "Histogram of time to first token in seconds.", s.ttft),
                ("histogram", n.VLLM_ITL_SECONDS, "Histogram of inter-token latency in seconds.", s.itl),
                ("histogram", n.VLLM_E2E_SECONDS, "Histogram of e2e request latency in seconds.", s.e2e),
            ),
            lab,
            c,
        )


SPECULATIVE_CONFIG_FLAG = "--speculative-config"
VLLM_METHOD_ALIASES = {
    "mtp": "mtp",
    "deepseek_mtp": "mtp",
    "qwen3_next_mtp": "mtp",
    "eagle": "eagle3",
    "eagle3": "eagle3",
    "draft_model": "draft_model",
    "ngram": "ngram",
    "dspark": "dspark",
    "dflash": "dflash",
}


def read_vllm_speculative_config(text: str) -> FrameworkSettings:
    """Settings from vLLM's ``--speculative-config`` JSON (errors name the key)."""
    src = "--speculative-config"
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInputError(f"{src} is not valid JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise InvalidInputError(f"{src} must be a JSON object, got {type(raw).__name__}")
    data = cast(dict[str, object], raw)
    k: int | None = None
    if "num_speculative_tokens" in data:
        value = data["num_speculative_tokens"]
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidInputError(f"{src}: num_speculative_tokens must be an integer, got {value!r}")
        k = value
    method: str | None = None
    if "method" in data:
        name = data["method"]
        if not isinstance(name, str) or name not in VLLM_METHOD_ALIASES:
            raise InvalidInputError(
                f"{src}: method {name!r} is not simulated; known: {', '.join(VLLM_METHOD_ALIASES)}"
            )
        method = VLLM_METHOD_ALIASES[name]
    has_len = "synthetic_acceptance_length" in data
    has_rates = "synthetic_acceptance_rates" in data
    sample_method = data.get("rejection_sample_method")
    if (has_len or has_rates) and sample_method != "synthetic":
        raise InvalidInputError(
            f'{src}: synthetic_acceptance_* given but rejection_sample_method is {sample_method!r}, not "synthetic"'
        )
    if sample_method == "synthetic" and has_len == has_rates:
        raise InvalidInputError(
            f'{src}: rejection_sample_method "synthetic" needs exactly one of '
            "synthetic_acceptance_length or synthetic_acceptance_rates"
        )
    al: float | None = None
    rates: tuple[float, ...] | None = None
    if has_len:
        value = data["synthetic_acceptance_length"]
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InvalidInputError(f"{src}: synthetic_acceptance_length must be a number, got {value!r}")
        al = float(value)
    if has_rates:
        value = data["synthetic_acceptance_rates"]
        if not isinstance(value, list) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in value
        ):
            raise InvalidInputError(
                f"{src}: synthetic_acceptance_rates must be a list of numbers, got {value!r}"
            )
        rates = tuple(float(v) for v in value)
    return FrameworkSettings(
        src, k=k, method=method, al=al, rates=rates, scheme="vllm" if al or rates else None
    )


def read_args(args: Sequence[str]) -> FrameworkSettings:
    """VLLM's ``--speculative-config JSON`` (or ``=JSON``), the one flag of its own the simulator reads."""
    items = list(args)
    flag, _, inline = items.pop(0).partition("=")
    if flag != SPECULATIVE_CONFIG_FLAG:
        raise InvalidInputError(
            f"unknown argument {flag!r} for the simulator's vLLM dialect; it reads {SPECULATIVE_CONFIG_FLAG}"
        )
    if not inline and not items:
        raise InvalidInputError(f"{SPECULATIVE_CONFIG_FLAG} needs a JSON value")
    text = inline or items.pop(0)
    if items:
        raise InvalidInputError(f"unknown arguments for the simulator's vLLM dialect: {' '.join(items)}")
    return read_vllm_speculative_config(text)
