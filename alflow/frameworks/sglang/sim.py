"""The simulator speaking SGLang: its ``/metrics`` and ``/server_info``.

Request-level counters, moved when a request **finishes** (as SGLang's tokenizer
manager does): ``spec_verify_calls`` += the request's verify steps (``spec_verify_ct``),
``generation_tokens`` += its output length as served (``len(output_ids)``: the first token, which
came from prefill, included; tokens past ``max_tokens`` in the last verify step cut off), and
``num_requests`` += 1. So Δgeneration_tokens / Δverify_calls overestimates AL by about
Δrequests / Δverify_calls; the scraper subtracts the requests. Gauges ``spec_accept_length`` /
``spec_accept_rate`` hold the latest window of ``--sglang-window-steps`` verify steps (per step).
``/server_info`` (and the deprecated ``/get_server_info``) report the cumulative
``avg_spec_accept_length`` of every verify step since start (the scheduler's per-step view).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from prometheus_client.metrics_core import Metric

from alflow.errors import InvalidInputError
from alflow.frameworks.sglang import names as sglang_names
from alflow.frameworks.sglang.knobs import SGLANG_LEN_ENV, SGLANG_METHOD_ENV, SGLANG_TOKEN_MODE_ENV
from alflow.frameworks.sim_source import FamilyRow, plain_families
from alflow.sim.config import SGLANG_TOKEN_MODES
from alflow.sim.dialects import EngineSettings, JsonView
from alflow.sim.sources import FrameworkSettings
from alflow.sim.stats import EngineStats


@dataclass(frozen=True)
class SglangEmitter:
    """SGLang's ``/metrics``: windowed spec gauges plus counters (see the module docstring)."""

    name: str = "sglang"
    metrics_path: str = sglang_names.SGLANG_METRICS_PATH
    records_iterations: bool = False

    def json_routes(self) -> Mapping[str, JsonView]:
        """``/server_info`` and the deprecated ``/get_server_info``."""
        return {"/server_info": sglang_server_info, "/get_server_info": sglang_server_info}

    def families(self, stats: EngineStats, config: EngineSettings) -> Iterator[Metric]:
        lab = {"model_name": config.served_model_name}
        n, s = sglang_names, stats
        rows: list[FamilyRow] = [
            (
                "gauge",
                n.SGLANG_SPEC_ACCEPT_LENGTH,
                "The average acceptance length (latest window).",
                s.window_al,
            ),
            (
                "gauge",
                n.SGLANG_SPEC_ACCEPT_RATE,
                "The average acceptance rate (latest window).",
                s.window_rate,
            ),
        ]
        # the active K, as SGLang's gauges of --speculative-adaptive (constant here: the sim has no adaptive steps)
        if config.k:
            rows += [
                ("gauge", n.SGLANG_SPEC_NUM_STEPS, "The active speculative_num_steps.", config.k),
                (
                    "gauge",
                    n.SGLANG_SPEC_NUM_DRAFT_TOKENS,
                    "The active speculative_num_draft_tokens.",
                    config.k + 1,
                ),
            ]
        rows += [
            (
                "counter",
                n.SGLANG_SPEC_VERIFY_CALLS,
                "The number of speculative verify calls (finished requests).",
                s.finished_verify_steps,
            ),
            (
                "counter",
                n.SGLANG_GENERATION_TOKENS,
                "Number of generation tokens processed (finished requests, first token included).",
                s.finished_output_tokens,
            ),
            ("counter", n.SGLANG_NUM_REQUESTS, "Number of requests processed.", s.finished_requests),
            ("counter", n.SGLANG_PROMPT_TOKENS, "Number of prefill tokens processed.", s.prompt_tokens),
            ("gauge", n.SGLANG_NUM_RUNNING, "The number of running requests.", s.num_running),
            ("gauge", n.SGLANG_NUM_QUEUE, "The number of requests in the waiting queue.", s.num_waiting),
            ("histogram", n.SGLANG_TTFT_SECONDS, "Histogram of time to first token in seconds.", s.ttft),
            ("histogram", n.SGLANG_ITL_SECONDS, "Histogram of inter-token latency in seconds.", s.itl),
            ("histogram", n.SGLANG_E2E_SECONDS, "Histogram of end-to-end request latency.", s.e2e),
        ]
        return plain_families(rows, lab, s.created_s)


def sglang_server_info(stats: EngineStats, config: EngineSettings) -> dict[str, object]:
    """SGLang ``/server_info``: cumulative ``avg_spec_accept_length`` per data-parallel rank (one)."""
    avg = stats.verify_tokens / stats.num_drafts if stats.num_drafts else None
    return {
        "model_path": config.served_model_name,
        "served_model_name": config.served_model_name,
        "speculative_algorithm": {
            "mtp": "EAGLE",
            "eagle3": "EAGLE3",
            "draft_model": "STANDALONE",
            "ngram": "NGRAM",
            "dspark": "DSPARK",
            "dflash": "DFLASH",
        }[config.method],
        "speculative_num_steps": config.k,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": config.k + 1,
        "max_running_requests": config.max_num_seqs,
        "context_length": config.max_model_len,
        "version": config.framework_version or "alflow-sim",
        "simulated": True,
        "internal_states": [
            {
                sglang_names.SGLANG_AVG_ACCEPT_LENGTH_KEY: avg,
                "last_gen_throughput": 0.0,
                "num_running_reqs": stats.num_running,
                "num_queue_reqs": stats.num_waiting,
            }
        ],
    }


SGLANG_METHODS = {"match-expected": "sglang-match-expected", "multinomial": "sglang-multinomial"}


def read_sglang_env(env: Mapping[str, str]) -> FrameworkSettings:
    """Settings from SGLang's ``SGLANG_SIMULATE_ACC_LEN`` / ``SGLANG_SIMULATE_ACC_METHOD``."""
    src = SGLANG_LEN_ENV
    al: float | None = None
    scheme: str | None = None
    if SGLANG_LEN_ENV in env:
        text = env[SGLANG_LEN_ENV]
        try:
            value = float(text)
        except ValueError:
            raise InvalidInputError(f"{src}={text!r} is not a number") from None
        if value >= 0:  # SGLang: off when negative
            al = value
    if SGLANG_METHOD_ENV in env:
        name = env[SGLANG_METHOD_ENV]
        if name not in SGLANG_METHODS:
            raise InvalidInputError(f"{SGLANG_METHOD_ENV}={name!r} is not one of {', '.join(SGLANG_METHODS)}")
        scheme = SGLANG_METHODS[name]
    token_mode: str | None = None
    if SGLANG_TOKEN_MODE_ENV in env:
        token_mode = env[SGLANG_TOKEN_MODE_ENV]
        if token_mode not in SGLANG_TOKEN_MODES:
            raise InvalidInputError(
                f"{SGLANG_TOKEN_MODE_ENV}={token_mode!r} is not one of {', '.join(SGLANG_TOKEN_MODES)}"
            )
    return FrameworkSettings(src, al=al, scheme=scheme if al is not None else None, token_mode=token_mode)
