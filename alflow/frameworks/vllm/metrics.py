"""vLLM's spec-decode counters as alflow reads them.

``AL = 1 + Δaccepted_tokens / Δnum_drafts``; per-position counters by ``position``.
"""

from __future__ import annotations

from collections.abc import Mapping

from alflow.acceptance.stats import CI_LEVEL, SpecStats, from_counters
from alflow.frameworks.vllm import names as vllm_names
from alflow.frameworks.vllm.requests import VLLM_COUNTS
from alflow.loadgen.counts import CountsReader
from alflow.metrics.dialects import CountersOnly, join_notes, need_counter, positions_in_order
from alflow.metrics.prometheus import CounterWindow, Snapshot


class VllmDialect(CountersOnly):
    """vLLM's ``vllm:spec_decode_*`` counters (labels ``model_name``, ``engine``; summed over engines)."""

    name = "vllm"
    metrics_path = vllm_names.VLLM_METRICS_PATH
    request_counts: str | None = "metrics.speculative_decoding"
    """vLLM 0.32.0+ with ``--per-request-spec-decode-metrics`` (PR #48915; vllm/v1/metrics/stats.py)."""
    request_fields: Mapping[str, object] = {}
    """vLLM needs no request field: the server flag turns the counts on."""
    count_reader: CountsReader | None = VLLM_COUNTS

    def matches(self, snapshot: Snapshot) -> bool:
        return any(f.startswith("vllm:") for f in snapshot.families())

    def spec_stats(
        self, window: CounterWindow, *, k: int | None = None, level: float = CI_LEVEL
    ) -> SpecStats:
        hint = "start vLLM with --speculative-config"
        drafts = need_counter(window, vllm_names.VLLM_NUM_DRAFTS, hint)
        accepted = need_counter(window, vllm_names.VLLM_NUM_ACCEPTED_TOKENS, hint)
        draft_tokens = window.increase(vllm_names.VLLM_NUM_DRAFT_TOKENS)
        per_pos = window.increase_by(vllm_names.VLLM_ACCEPTED_PER_POS, vllm_names.VLLM_POSITION_LABEL)
        return from_counters(
            drafts,
            accepted,
            draft_tokens=draft_tokens,
            accepted_per_position=positions_in_order(per_pos) if per_pos else None,
            k=k,
            level=level,
            note=join_notes(*window.notes),
        )
