"""The simulator speaking TensorRT-LLM: its ``/prometheus/metrics`` and JSON iteration stats.

Iteration counters ``num_draft_tokens`` (K per request-step) and
``num_accepted_tokens``, moved every iteration; per-position ``drafted_tokens{token_position}`` and
``accepted_tokens{token_position}``, moved once per **finished request** (from its perf metrics);
gauge ``acceptance_length`` of the last iteration; ``trtllm_speculative_config_info`` (value 1,
labels: the speculative path); JSON iteration stats at ``/metrics`` (drained on each read, like
``trtllm-serve``). A window whose baseline is taken mid-flight sees the two families disagree:
the exact AL takes numerator and denominator from the per-position family alone.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from prometheus_client.metrics_core import Metric

from alflow.config import SpecMethod
from alflow.errors import InvalidInputError
from alflow.frameworks.sim_source import plain_families
from alflow.frameworks.trtllm import names as trtllm_names
from alflow.frameworks.trtllm.knobs import TRTLLM_ENV
from alflow.frameworks.trtllm.recipe import TRTLLM_DECODING_TYPES
from alflow.sim.dialects import EngineSettings, JsonView, gauge_family, labelled_counter, success_family
from alflow.sim.sources import FrameworkSettings
from alflow.sim.stats import EngineStats


@dataclass(frozen=True)
class TrtllmEmitter:
    """TensorRT-LLM's ``/prometheus/metrics`` (per-position counters labelled ``token_position``)."""

    name: str = "trtllm"
    metrics_path: str = trtllm_names.TRTLLM_METRICS_PATH
    records_iterations: bool = True

    def json_routes(self) -> Mapping[str, JsonView]:
        """``/metrics``: the JSON iteration stats, drained on each read like ``trtllm-serve``."""
        return {"/metrics": drain_iterations}

    def families(self, stats: EngineStats, config: EngineSettings) -> Iterator[Metric]:
        lab = {"model_name": config.served_model_name, "engine_type": "trtllm"}
        n, s, c = trtllm_names, stats, stats.created_s
        pos = n.TRTLLM_POSITION_LABEL
        accepted = list(enumerate(s.finished_accepted_per_position()))
        drafted = [
            (i, s.finished_verify_steps) for i, _ in accepted
        ]  # each verify step drafts every position
        method = TRTLLM_DECODING_TYPES[SpecMethod(config.method)]
        info = {**lab, "spec_enabled": "true", "spec_method": method, "spec_num_tokens": str(config.k)}
        return plain_families(
            (
                ("counter", n.TRTLLM_NUM_DRAFT_TOKENS, "Number of draft tokens.", s.draft_tokens),
                (
                    "counter",
                    n.TRTLLM_NUM_ACCEPTED_TOKENS,
                    "Number of accepted draft tokens.",
                    s.accepted_tokens,
                ),
                (
                    "gauge",
                    n.TRTLLM_ACCEPTANCE_LENGTH,
                    "Acceptance length of the last iteration.",
                    s.last_step_al,
                ),
                labelled_counter(
                    n.TRTLLM_DRAFTED_PER_POS, "Drafted tokens per position.", lab, pos, drafted, c
                ),
                labelled_counter(
                    n.TRTLLM_ACCEPTED_PER_POS, "Accepted tokens per position.", lab, pos, accepted, c
                ),
                gauge_family(
                    n.TRTLLM_SPECULATIVE_CONFIG_INFO, "Speculative decoding configuration.", info, 1.0
                ),
                ("counter", n.TRTLLM_PROMPT_TOKENS, "Number of prompt tokens.", s.prompt_tokens),
                ("counter", n.TRTLLM_GENERATION_TOKENS, "Number of generation tokens.", s.generation_tokens),
                success_family(n.TRTLLM_REQUEST_SUCCESS, lab, s),
                ("histogram", n.TRTLLM_TTFT_SECONDS, "Histogram of time to first token in seconds.", s.ttft),
                ("histogram", n.TRTLLM_TPOT_SECONDS, "Histogram of time per output token in seconds.", s.itl),
                ("histogram", n.TRTLLM_E2E_SECONDS, "Histogram of end-to-end request latency.", s.e2e),
            ),
            lab,
            c,
        )


def drain_iterations(stats: EngineStats, config: EngineSettings) -> object:
    """TensorRT-LLM's ``/metrics``: the iteration stats since the last read (the read drains them)."""
    del config
    items = list(stats.iterations)
    stats.iterations.clear()
    return items


def read_trtllm_env(env: Mapping[str, str]) -> FrameworkSettings:
    """Settings from ``TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS`` (accepted drafts = AL - 1)."""
    src = TRTLLM_ENV
    if src not in env:
        return FrameworkSettings(src)
    text = env[src]
    try:
        value = float(text)
    except ValueError:
        raise InvalidInputError(f"{src}={text!r} is not a number") from None
    if value < 0:
        raise InvalidInputError(f"{src}={text!r} must be >= 0 (it counts accepted draft tokens: AL - 1)")
    return FrameworkSettings(src, al=value + 1.0, scheme="trtllm")
