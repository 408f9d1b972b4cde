"""TensorRT-LLM's metric names and endpoints (DOMAIN.md section 4), the one home of these strings.

Read by the plugin's dialect, exposed by the simulated engine. Names are family names as ``prometheus_client``'s
parser reports them (counters without the ``_total`` suffix).
"""

from __future__ import annotations

from typing import Final

# TensorRT-LLM (trtllm-serve): Prometheus text at /prometheus/metrics; /metrics is JSON iteration stats.
TRTLLM_METRICS_PATH: Final = "/prometheus/metrics"
TRTLLM_JSON_STATS_PATH: Final = "/metrics"
TRTLLM_NUM_DRAFT_TOKENS: Final = "trtllm_spec_decode_num_draft_tokens"  # counter
TRTLLM_NUM_ACCEPTED_TOKENS: Final = "trtllm_spec_decode_num_accepted_tokens"  # counter
TRTLLM_ACCEPTANCE_LENGTH: Final = "trtllm_spec_decode_acceptance_length"  # gauge, last iteration
TRTLLM_DRAFTED_PER_POS: Final = "trtllm_spec_decode_drafted_tokens"  # counter, label token_position
TRTLLM_ACCEPTED_PER_POS: Final = "trtllm_spec_decode_accepted_tokens"  # counter, label token_position
TRTLLM_POSITION_LABEL: Final = "token_position"
TRTLLM_PER_POSITION_RELEASE: Final = "1.3.0rc19"
TRTLLM_PER_POSITION_SOURCE: Final = "NVIDIA/TensorRT-LLM PR #12636, in the v1.3.0rc19 release notes"
"""The first release with the two per-position counters above (the only input of TensorRT-LLM's exact AL)."""
TRTLLM_SPECULATIVE_CONFIG_INFO: Final = "trtllm_speculative_config_info"  # info gauge: the speculative path
TRTLLM_PROMPT_TOKENS: Final = "trtllm_prompt_tokens"
TRTLLM_GENERATION_TOKENS: Final = "trtllm_generation_tokens"
TRTLLM_TTFT_SECONDS: Final = "trtllm_time_to_first_token_seconds"
TRTLLM_E2E_SECONDS: Final = "trtllm_e2e_request_latency_seconds"

# Added for the simulated engine (issue 3): further TensorRT-LLM request metrics.
TRTLLM_TPOT_SECONDS: Final = "trtllm_time_per_output_token_seconds"
TRTLLM_REQUEST_SUCCESS: Final = "trtllm_request_success"  # counter, label finished_reason
