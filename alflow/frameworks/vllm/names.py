"""vLLM's metric names and endpoint (DOMAIN.md section 4), the one home of these strings.

Read by the plugin's dialect and exposed by the simulated engine and the tiny engine (which speak vLLM's dialect),
so a rename in vLLM changes one line here. Names are family names as ``prometheus_client``'s parser reports them
(counters without the ``_total`` suffix of the exposition text).
"""

from __future__ import annotations

from typing import Final

# vLLM: /metrics, counters (exposition text: <name>_total), labels model_name and engine.
VLLM_METRICS_PATH: Final = "/metrics"
VLLM_NUM_DRAFTS: Final = "vllm:spec_decode_num_drafts"
VLLM_NUM_DRAFT_TOKENS: Final = "vllm:spec_decode_num_draft_tokens"
VLLM_NUM_ACCEPTED_TOKENS: Final = "vllm:spec_decode_num_accepted_tokens"
VLLM_ACCEPTED_PER_POS: Final = "vllm:spec_decode_num_accepted_tokens_per_pos"  # label position="0".."K-1"
VLLM_POSITION_LABEL: Final = "position"  # label of VLLM_ACCEPTED_PER_POS
VLLM_PROMPT_TOKENS: Final = "vllm:prompt_tokens"
VLLM_GENERATION_TOKENS: Final = "vllm:generation_tokens"
VLLM_REQUEST_SUCCESS: Final = "vllm:request_success"
VLLM_NUM_RUNNING: Final = "vllm:num_requests_running"
VLLM_NUM_WAITING: Final = "vllm:num_requests_waiting"
VLLM_TTFT_SECONDS: Final = "vllm:time_to_first_token_seconds"
VLLM_ITL_SECONDS: Final = "vllm:inter_token_latency_seconds"
VLLM_E2E_SECONDS: Final = "vllm:e2e_request_latency_seconds"
VLLM_REQUEST_TPOT_SECONDS: Final = "vllm:request_time_per_output_token_seconds"
"""Histogram: per finished request ``(last token - first token) / (generation tokens - 1)``, the engine's clock."""
