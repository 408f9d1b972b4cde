"""SGLang's metric names, endpoints and per-request fields (DOMAIN.md section 4), the one home of these strings.

Read by the plugin's dialect and its per-request reader (:mod:`alflow.frameworks.sglang.requests`), exposed by the
simulated engine. Names are family
names as ``prometheus_client``'s parser reports them (counters without the ``_total`` suffix).
"""

from __future__ import annotations

from typing import Final

# SGLang (--enable-metrics): /metrics; windowed gauges plus counters; cumulative AL at /server_info.
SGLANG_METRICS_PATH: Final = "/metrics"
SGLANG_SERVER_INFO_PATH: Final = "/server_info"
SGLANG_SERVER_INFO_DEPRECATED_PATH: Final = "/get_server_info"
SGLANG_SPEC_ACCEPT_LENGTH: Final = "sglang:spec_accept_length"  # gauge, latest window only
SGLANG_SPEC_ACCEPT_RATE: Final = "sglang:spec_accept_rate"  # gauge, latest window only
SGLANG_SPEC_VERIFY_CALLS: Final = "sglang:spec_verify_calls"  # counter
SGLANG_SPEC_NUM_STEPS: Final = "sglang:spec_num_steps"
"""Gauge: the active speculative_num_steps (K) under --speculative-adaptive (sgl-project/sglang PR #25940)."""
SGLANG_SPEC_NUM_DRAFT_TOKENS: Final = "sglang:spec_num_draft_tokens"
"""Gauge: the active speculative_num_draft_tokens (K + 1 with topk 1) under --speculative-adaptive (PR #25940)."""
SGLANG_ACTIVE_K_GAUGES: Final = (SGLANG_SPEC_NUM_STEPS, SGLANG_SPEC_NUM_DRAFT_TOKENS)
"""SGLang's gauges of the active K: a change inside a measured window is a warning on the point."""
SGLANG_GENERATION_TOKENS: Final = "sglang:generation_tokens"  # counter
SGLANG_PROMPT_TOKENS: Final = "sglang:prompt_tokens"  # counter
SGLANG_NUM_REQUESTS: Final = "sglang:num_requests"  # counter, finished requests (moves with the two above)
SGLANG_NUM_RETRACTED: Final = "sglang:num_retracted_requests"
"""Counter (``_total``) of requests retracted under KV-cache pressure and re-prefilled later
(python/sglang/srt/metrics/collector.py ``num_retracted_requests_total``)."""
SGLANG_NUM_RUNNING: Final = "sglang:num_running_reqs"
SGLANG_NUM_QUEUE: Final = "sglang:num_queue_reqs"
SGLANG_TTFT_SECONDS: Final = "sglang:time_to_first_token_seconds"
SGLANG_ITL_SECONDS: Final = "sglang:inter_token_latency_seconds"
SGLANG_E2E_SECONDS: Final = "sglang:e2e_request_latency_seconds"
SGLANG_AVG_ACCEPT_LENGTH_KEY: Final = "avg_spec_accept_length"  # in server_info internal_states[i]
SGLANG_SPEC_VERIFY_CALLS_SINCE: Final = "sgl-project/sglang PR #25689 (merged 2026-05-18)"
"""Where ``sglang:spec_verify_calls_total`` comes from; an older image has the other counters but not this one."""
# SGLang's per-request speculative details on the OpenAI endpoints (sgl-project/sglang PR #33518, merged
# 2026-08-04; python/sglang/srt/entrypoints/openai/serving_chat.py and utils.py): only when the request sets
# ``return_spec_tokens_details: true``; streamed as a chunk of its own with ``"choices": []`` and a response-level
# ``sglext`` (after the finish_reason chunks, before the usage chunk), not streamed as the body's top-level
# ``sglext``. ``meta_info`` is not sent on these endpoints (``return_meta_info`` is refused with ``stream``).
SGLANG_SPEC_DETAILS_FLAG: Final = "return_spec_tokens_details"
SGLANG_SGLEXT: Final = "sglext"
SGLANG_SPEC_DETAILS: Final = "spec_tokens_details"
SGLANG_SPEC_DETAILS_SINCE: Final = "sgl-project/sglang PR #33518 (merged 2026-08-04)"
SGLANG_DETAILS_VERIFY_CT: Final = "spec_verify_ct"  # verify steps of the request
SGLANG_DETAILS_CORRECT: Final = "spec_num_correct_drafts"  # accepted draft tokens (bonus not counted)
SGLANG_DETAILS_PROPOSED: Final = "spec_num_proposed_drafts"  # drafts proposed (verify steps x block size)
SGLANG_DETAILS_HISTOGRAM: Final = (
    "spec_correct_drafts_histogram"  # index i = steps that accepted i drafts, K+1 long
)
# ``spec_accept_length`` in the same object is completion_tokens / spec_verify_ct: it counts the prefill token
# (biased high) and is never read.
