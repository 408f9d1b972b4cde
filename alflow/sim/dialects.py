"""Metrics emitters of the simulated engine: each framework's metric names, labels and endpoints over its counters.

Names come only from :mod:`alflow.metrics.names`. Counters are exposed through ``prometheus_client``
(a custom collector on a registry of the server's own), so the text has ``_total`` and ``_created``
samples exactly like the real frameworks.

What each dialect counts (DOMAIN.md section 4):

- **vLLM**: ``num_drafts`` = (request, verify step) pairs, ``num_draft_tokens`` = K per pair,
  ``num_accepted_tokens`` = accepted drafts, ``..._per_pos{position=i}`` = pairs that accepted the
  draft at 0-based position i. AL = 1 + Δaccepted / Δdrafts exactly.
- **SGLang**: request-level counters, moved when a request **finishes** (as SGLang's tokenizer
  manager does): ``spec_verify_calls`` += the request's verify steps (``spec_verify_ct``),
  ``generation_tokens`` += its output length as served (``len(output_ids)``: the first token, which
  came from prefill, included; tokens past ``max_tokens`` in the last verify step cut off), and
  ``num_requests`` += 1. So Δgeneration_tokens / Δverify_calls overestimates AL by about
  Δrequests / Δverify_calls; the scraper subtracts the requests. Gauges ``spec_accept_length`` /
  ``spec_accept_rate`` hold the latest window of ``--sglang-window-steps`` verify steps (per step).
  ``/server_info`` (and the deprecated ``/get_server_info``) report the cumulative
  ``avg_spec_accept_length`` of every verify step since start (the scheduler's per-step view).
- **TensorRT-LLM**: iteration counters ``num_draft_tokens`` (K per request-step) and
  ``num_accepted_tokens``, moved every iteration; per-position ``drafted_tokens{token_position}`` and
  ``accepted_tokens{token_position}``, moved once per **finished request** (from its perf metrics);
  gauge ``acceptance_length`` of the last iteration; ``trtllm_speculative_config_info`` (value 1,
  labels: the speculative path); JSON iteration stats at ``/metrics`` (drained on each read, like
  ``trtllm-serve``). A window whose baseline is taken mid-flight sees the two families disagree:
  the exact AL takes numerator and denominator from the per-position family alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

from alflow.errors import InvalidInputError
from alflow.metrics import names
from alflow.plugins import get_framework
from alflow.sim.config import SimConfig
from alflow.sim.engine import EngineStats, Histogram


class MetricsEmitter(Protocol):
    """One framework's metric names and paths over :class:`EngineStats`."""

    @property
    def name(self) -> str:
        """Dialect name (``vllm``, ``sglang``, ``trtllm``)."""
        ...

    @property
    def metrics_path(self) -> str:
        """Path of the Prometheus text."""
        ...

    def families(self, stats: EngineStats, config: SimConfig) -> Iterable[Metric]:
        """The metric families of one scrape."""
        ...


def _counter(
    name: str, doc: str, labels: dict[str, str], value: float, created: float
) -> CounterMetricFamily:
    fam = CounterMetricFamily(name, doc, labels=list(labels))
    fam.add_metric(list(labels.values()), value, created=created)
    return fam


def _gauge(name: str, doc: str, labels: dict[str, str], value: float) -> GaugeMetricFamily:
    fam = GaugeMetricFamily(name, doc, labels=list(labels))
    fam.add_metric(list(labels.values()), value)
    return fam


def _histogram(name: str, doc: str, labels: dict[str, str], hist: Histogram) -> HistogramMetricFamily:
    fam = HistogramMetricFamily(name, doc, labels=list(labels))
    fam.add_metric(list(labels.values()), hist.cumulative(), hist.sum)
    return fam


@dataclass(frozen=True)
class VllmEmitter:
    """vLLM's ``/metrics``: ``vllm:*`` counters with labels ``model_name`` and ``engine``."""

    name: str = "vllm"
    metrics_path: str = names.VLLM_METRICS_PATH

    def families(self, stats: EngineStats, config: SimConfig) -> Iterator[Metric]:
        lab = {"model_name": config.served_model_name, "engine": "0"}
        c = stats.created_s
        yield _counter(names.VLLM_NUM_DRAFTS, "Number of spec decoding drafts.", lab, stats.num_drafts, c)
        yield _counter(names.VLLM_NUM_DRAFT_TOKENS, "Number of draft tokens.", lab, stats.draft_tokens, c)
        yield _counter(
            names.VLLM_NUM_ACCEPTED_TOKENS, "Number of accepted tokens.", lab, stats.accepted_tokens, c
        )
        per_pos = CounterMetricFamily(
            names.VLLM_ACCEPTED_PER_POS, "Accepted tokens per draft position.", labels=[*lab, "position"]
        )
        for i, n in enumerate(stats.accepted_per_position()):
            per_pos.add_metric([*lab.values(), str(i)], n, created=c)
        yield per_pos
        yield _counter(
            names.VLLM_PROMPT_TOKENS, "Number of prefill tokens processed.", lab, stats.prompt_tokens, c
        )
        yield _counter(
            names.VLLM_GENERATION_TOKENS,
            "Number of generation tokens processed.",
            lab,
            stats.generation_tokens,
            c,
        )
        success = CounterMetricFamily(
            names.VLLM_REQUEST_SUCCESS,
            "Count of successfully processed requests.",
            labels=[*lab, "finished_reason"],
        )
        for reason in ("stop", "length", "abort"):
            success.add_metric([*lab.values(), reason], stats.requests_finished.get(reason, 0), created=c)
        yield success
        yield _gauge(
            names.VLLM_NUM_RUNNING, "Number of requests in model execution batches.", lab, stats.num_running
        )
        yield _gauge(
            names.VLLM_NUM_WAITING, "Number of requests waiting to be processed.", lab, stats.num_waiting
        )
        yield _histogram(
            names.VLLM_TTFT_SECONDS, "Histogram of time to first token in seconds.", lab, stats.ttft
        )
        yield _histogram(
            names.VLLM_ITL_SECONDS, "Histogram of inter-token latency in seconds.", lab, stats.itl
        )
        yield _histogram(
            names.VLLM_E2E_SECONDS, "Histogram of e2e request latency in seconds.", lab, stats.e2e
        )


@dataclass(frozen=True)
class SglangEmitter:
    """SGLang's ``/metrics``: windowed spec gauges plus counters (see the module docstring)."""

    name: str = "sglang"
    metrics_path: str = names.SGLANG_METRICS_PATH

    def families(self, stats: EngineStats, config: SimConfig) -> Iterator[Metric]:
        lab = {"model_name": config.served_model_name}
        c = stats.created_s
        yield _gauge(
            names.SGLANG_SPEC_ACCEPT_LENGTH,
            "The average acceptance length (latest window).",
            lab,
            stats.window_al,
        )
        yield _gauge(
            names.SGLANG_SPEC_ACCEPT_RATE,
            "The average acceptance rate (latest window).",
            lab,
            stats.window_rate,
        )
        # the active K, as SGLang's gauges of --speculative-adaptive (constant here: the sim has no adaptive steps)
        if config.k:
            yield _gauge(names.SGLANG_SPEC_NUM_STEPS, "The active speculative_num_steps.", lab, config.k)
            yield _gauge(
                names.SGLANG_SPEC_NUM_DRAFT_TOKENS,
                "The active speculative_num_draft_tokens.",
                lab,
                config.k + 1,
            )
        yield _counter(
            names.SGLANG_SPEC_VERIFY_CALLS,
            "The number of speculative verify calls (finished requests).",
            lab,
            stats.finished_verify_steps,
            c,
        )
        yield _counter(
            names.SGLANG_GENERATION_TOKENS,
            "Number of generation tokens processed (finished requests, first token included).",
            lab,
            stats.finished_output_tokens,
            c,
        )
        yield _counter(
            names.SGLANG_NUM_REQUESTS, "Number of requests processed.", lab, stats.finished_requests, c
        )
        yield _counter(
            names.SGLANG_PROMPT_TOKENS, "Number of prefill tokens processed.", lab, stats.prompt_tokens, c
        )
        yield _gauge(names.SGLANG_NUM_RUNNING, "The number of running requests.", lab, stats.num_running)
        yield _gauge(
            names.SGLANG_NUM_QUEUE, "The number of requests in the waiting queue.", lab, stats.num_waiting
        )
        yield _histogram(
            names.SGLANG_TTFT_SECONDS, "Histogram of time to first token in seconds.", lab, stats.ttft
        )
        yield _histogram(
            names.SGLANG_ITL_SECONDS, "Histogram of inter-token latency in seconds.", lab, stats.itl
        )
        yield _histogram(names.SGLANG_E2E_SECONDS, "Histogram of end-to-end request latency.", lab, stats.e2e)


@dataclass(frozen=True)
class TrtllmEmitter:
    """TensorRT-LLM's ``/prometheus/metrics`` (per-position counters labelled ``token_position``)."""

    name: str = "trtllm"
    metrics_path: str = names.TRTLLM_METRICS_PATH

    def families(self, stats: EngineStats, config: SimConfig) -> Iterator[Metric]:
        lab = {"model_name": config.served_model_name, "engine_type": "trtllm"}
        c = stats.created_s
        yield _counter(names.TRTLLM_NUM_DRAFT_TOKENS, "Number of draft tokens.", lab, stats.draft_tokens, c)
        yield _counter(
            names.TRTLLM_NUM_ACCEPTED_TOKENS,
            "Number of accepted draft tokens.",
            lab,
            stats.accepted_tokens,
            c,
        )
        yield _gauge(
            names.TRTLLM_ACCEPTANCE_LENGTH,
            "Acceptance length of the last iteration.",
            lab,
            stats.last_step_al,
        )
        pos_labels = [*lab, names.TRTLLM_POSITION_LABEL]
        drafted = CounterMetricFamily(
            names.TRTLLM_DRAFTED_PER_POS, "Drafted tokens per position.", labels=pos_labels
        )
        accepted = CounterMetricFamily(
            names.TRTLLM_ACCEPTED_PER_POS, "Accepted tokens per position.", labels=pos_labels
        )
        steps = stats.finished_verify_steps  # every verify step drafts at every position
        for i, n in enumerate(stats.finished_accepted_per_position()):
            drafted.add_metric([*lab.values(), str(i)], steps, created=c)
            accepted.add_metric([*lab.values(), str(i)], n, created=c)
        yield drafted
        yield accepted
        yield _speculative_config_info(config, lab)
        yield _counter(names.TRTLLM_PROMPT_TOKENS, "Number of prompt tokens.", lab, stats.prompt_tokens, c)
        yield _counter(
            names.TRTLLM_GENERATION_TOKENS, "Number of generation tokens.", lab, stats.generation_tokens, c
        )
        success = CounterMetricFamily(
            names.TRTLLM_REQUEST_SUCCESS,
            "Count of successfully processed requests.",
            labels=[*lab, "finished_reason"],
        )
        for reason in ("stop", "length", "abort"):
            success.add_metric([*lab.values(), reason], stats.requests_finished.get(reason, 0), created=c)
        yield success
        yield _histogram(
            names.TRTLLM_TTFT_SECONDS, "Histogram of time to first token in seconds.", lab, stats.ttft
        )
        yield _histogram(
            names.TRTLLM_TPOT_SECONDS, "Histogram of time per output token in seconds.", lab, stats.itl
        )
        yield _histogram(names.TRTLLM_E2E_SECONDS, "Histogram of end-to-end request latency.", lab, stats.e2e)


def emitter_of(dialect: str) -> MetricsEmitter:
    """The metrics emitter of ``dialect``: its framework plugin's ``sim`` (vLLM's, SGLang's, TensorRT-LLM's are here)."""
    emitter = get_framework(dialect).sim
    if emitter is None:
        raise InvalidInputError(f"framework {dialect!r} has no dialect the simulator speaks")
    return emitter


class _EngineCollector(Collector):
    def __init__(self, dialect: MetricsEmitter, stats: EngineStats, config: SimConfig) -> None:
        self._dialect, self._stats, self._config = dialect, stats, config

    def collect(self) -> Iterable[Metric]:
        return list(self._dialect.families(self._stats, self._config))


def make_registry(dialect: MetricsEmitter, stats: EngineStats, config: SimConfig) -> CollectorRegistry:
    """A registry of the server's own whose one collector reads ``stats`` at scrape time."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_EngineCollector(dialect, stats, config))
    return registry


TRTLLM_DECODING_TYPES = {
    "mtp": "MTP",
    "eagle3": "Eagle3",
    "draft_model": "DraftTarget",
    "ngram": "NGram",
    "dspark": "DSpark",
    "dflash": "DFlash",
}
"""TensorRT-LLM's ``decoding_type`` of each method, as ``trtllm_speculative_config_info`` labels it."""


def _speculative_config_info(config: SimConfig, lab: dict[str, str]) -> GaugeMetricFamily:
    """``trtllm_speculative_config_info`` (value 1): ``spec_enabled``, ``spec_method``, ``spec_num_tokens``."""
    info = {**lab, "spec_enabled": "true", "spec_method": TRTLLM_DECODING_TYPES[config.method]}
    info["spec_num_tokens"] = str(config.k)
    return _gauge(names.TRTLLM_SPECULATIVE_CONFIG_INFO, "Speculative decoding configuration.", info, 1.0)


def sglang_server_info(stats: EngineStats, config: SimConfig) -> dict[str, object]:
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
                names.SGLANG_AVG_ACCEPT_LENGTH_KEY: avg,
                "last_gen_throughput": 0.0,
                "num_running_reqs": stats.num_running,
                "num_queue_reqs": stats.num_waiting,
            }
        ],
    }
