"""TensorRT-LLM's spec-decode counters as alflow reads them.

Per-position counters only, both moved once per finished request:
``AL = 1 + Σ_i Δaccepted_tokens{token_position=i} / Δdrafted_tokens{token_position=0}`` (every
step drafts at position 0). The iteration counters ``num_draft_tokens`` / ``num_accepted_tokens``
come from iteration stats drained by a background loop, at other times than the per-position
ones: mixing the families (as earlier versions did) is wrong whenever a request spans a scrape.
They are kept as a cross-check in the note only. Without per-position counters
(``return_perf_metrics: false``) the dialect refuses, saying how to enable them.
"""

from __future__ import annotations

from collections.abc import Mapping

from alflow.acceptance.stats import CI_LEVEL, SpecStats, from_counters
from alflow.frameworks.trtllm import names as trtllm_names
from alflow.loadgen.counts import CountsReader
from alflow.metrics.dialects import (
    CountersOnly,
    MissingMetricsError,
    SpeculativeInfo,
    join_notes,
    positions_in_order,
)
from alflow.metrics.prometheus import CounterWindow, Snapshot


class TrtllmDialect(CountersOnly):
    """TensorRT-LLM's ``trtllm_spec_decode_*`` counters at ``/prometheus/metrics`` (per-position family)."""

    name = "trtllm"
    request_counts: str | None = None
    """Per-request acceptance on TensorRT-LLM's responses is an open PR (#19311) at the time of writing."""
    request_fields: Mapping[str, object] = {}
    count_reader: CountsReader | None = None
    metrics_path = trtllm_names.TRTLLM_METRICS_PATH

    def matches(self, snapshot: Snapshot) -> bool:
        return any(f.startswith("trtllm_") for f in snapshot.families())

    def speculative_info(self, snapshot: Snapshot) -> SpeculativeInfo | None:
        """``trtllm_speculative_config_info`` (value 1): labels ``spec_enabled``, ``spec_method``, ``spec_num_tokens``."""
        for labels in snapshot.samples.get(trtllm_names.TRTLLM_SPECULATIVE_CONFIG_INFO) or {}:
            found = dict(labels)
            tokens = found.get("spec_num_tokens")
            enabled = found.get("spec_enabled")
            return SpeculativeInfo(
                enabled=None if enabled is None else enabled.lower() == "true",
                method=found.get("spec_method"),
                num_tokens=int(tokens) if tokens is not None and tokens.isdigit() else None,
            )
        return None

    def spec_stats(
        self, window: CounterWindow, *, k: int | None = None, level: float = CI_LEVEL
    ) -> SpecStats:
        drafted_by_pos = window.increase_by(
            trtllm_names.TRTLLM_DRAFTED_PER_POS, trtllm_names.TRTLLM_POSITION_LABEL
        )
        accepted_by_pos = window.increase_by(
            trtllm_names.TRTLLM_ACCEPTED_PER_POS, trtllm_names.TRTLLM_POSITION_LABEL
        )
        if not drafted_by_pos:
            raise MissingMetricsError(
                f"metric {trtllm_names.TRTLLM_DRAFTED_PER_POS} is not exposed: TensorRT-LLM's exact AL needs its "
                f"per-position counters, which exist only since TensorRT-LLM {trtllm_names.TRTLLM_PER_POSITION_RELEASE} "
                f"({trtllm_names.TRTLLM_PER_POSITION_SOURCE}; use that release or newer) and only with "
                "return_perf_metrics: true and enable_iter_perf_stats: true in the trtllm-serve config; the "
                "iteration counters alone move at other times and are not used"
            )
        drafted = positions_in_order(drafted_by_pos)
        steps = drafted[0]
        per_pos = positions_in_order(accepted_by_pos) if accepted_by_pos else [0.0] * len(drafted)
        if len(per_pos) < len(drafted):
            per_pos = per_pos + [0.0] * (len(drafted) - len(per_pos))
        notes = ["AL = 1 + Σ accepted{token_position} / drafted{token_position=0} (per finished request)"]
        iter_drafts = window.increase(trtllm_names.TRTLLM_NUM_DRAFT_TOKENS)
        iter_accepted = window.increase(trtllm_names.TRTLLM_NUM_ACCEPTED_TOKENS)
        if iter_drafts and iter_accepted is not None and k:
            notes.append(
                f"cross-check, iteration counters (other timing, not used): AL ~ "
                f"{1 + iter_accepted * k / iter_drafts:.4f}"
            )
        return from_counters(
            steps,
            sum(per_pos),
            draft_tokens=sum(drafted),
            accepted_per_position=per_pos,
            k=k if k is not None else len(drafted),
            level=level,
            note=join_notes(*notes, *window.notes),
        )
