"""The tiny engine's Prometheus metrics, in vLLM's dialect (names from :mod:`alflow.frameworks.vllm.names`).

Counted per decode step of the engine (one :class:`~alflow.tiny.engine.StepEvent` each), the way
vLLM counts them (DOMAIN.md section 4):

- ``vllm:spec_decode_num_drafts``: steps that carried drafts (``drafted > 0``); a step without a
  draft (no n-gram match) is a plain decode step and is not counted;
- ``vllm:spec_decode_num_draft_tokens``: drafted tokens (``drafted``, at most K per step);
- ``vllm:spec_decode_num_accepted_tokens``: accepted drafts (``accepted``);
- ``vllm:spec_decode_num_accepted_tokens_per_pos{position=i}``: steps that accepted the draft at
  0-based position ``i`` (one series per position 0..K-1, present from the start);
- ``vllm:prompt_tokens``, ``vllm:generation_tokens`` (tokens emitted), ``vllm:request_success``
  by ``finished_reason`` (``stop``, ``length``, ``abort``), and the gauges
  ``vllm:num_requests_running`` / ``vllm:num_requests_waiting``.

So ``AL = 1 + Δaccepted / Δdrafts`` over a window is the engine's own mean tokens per drafted step.
Every series carries the labels ``model_name`` and ``engine`` like vLLM's. The text ends in
``_total`` for counters (``prometheus_client`` adds it, as vLLM's exposition does).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from alflow.frameworks.vllm import names as vllm_names
from alflow.serving.api import FINISH_REASONS

M = TypeVar("M", Counter, Gauge)


class TinyMetrics:
    """The counters of one server (a registry of its own; thread-safe updates)."""

    def __init__(self, model_name: str, k: int) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._labels = (model_name, "0")

        def series(kind: type[M], name: str, doc: str, *label: str) -> M:
            return kind(name, doc, ("model_name", "engine", *label), registry=self.registry)

        def one(kind: type[M], name: str, doc: str) -> M:
            return series(kind, name, doc).labels(*self._labels)

        n = vllm_names
        self.num_drafts = one(Counter, n.VLLM_NUM_DRAFTS, "Number of spec decoding drafts.")
        self.draft_tokens = one(Counter, n.VLLM_NUM_DRAFT_TOKENS, "Number of draft tokens.")
        self.accepted_tokens = one(Counter, n.VLLM_NUM_ACCEPTED_TOKENS, "Number of accepted tokens.")
        per_pos = series(
            Counter, n.VLLM_ACCEPTED_PER_POS, "Accepted tokens per draft position.", n.VLLM_POSITION_LABEL
        )
        self.accepted_per_pos = [per_pos.labels(*self._labels, str(i)) for i in range(k)]
        self.prompt_tokens = one(Counter, n.VLLM_PROMPT_TOKENS, "Number of prefill tokens processed.")
        self.generation_tokens = one(
            Counter, n.VLLM_GENERATION_TOKENS, "Number of generation tokens processed."
        )
        success = series(
            Counter, n.VLLM_REQUEST_SUCCESS, "Count of successfully processed requests.", "finished_reason"
        )
        self.request_success = {reason: success.labels(*self._labels, reason) for reason in FINISH_REASONS}
        self.running = one(Gauge, n.VLLM_NUM_RUNNING, "Number of requests in model execution batches.")
        self.waiting = one(Gauge, n.VLLM_NUM_WAITING, "Number of requests waiting to be processed.")

    def count_step(
        self, tokens: int, drafted: int, accepted: int, accepted_positions: Sequence[bool]
    ) -> None:
        """Count one engine step: its emitted tokens and, when it drafted, its spec-decode counts."""
        self.generation_tokens.inc(tokens)
        if drafted <= 0:
            return
        self.num_drafts.inc()
        self.draft_tokens.inc(drafted)
        self.accepted_tokens.inc(accepted)
        for position, ok in enumerate(accepted_positions):
            if ok and position < len(self.accepted_per_pos):
                self.accepted_per_pos[position].inc()

    def text(self) -> bytes:
        """The Prometheus exposition text of every series."""
        return generate_latest(self.registry)
