"""SGLang's per-request speculative counts (``sglext.spec_tokens_details``): the reader the client is handed."""

from __future__ import annotations

from collections.abc import Mapping

from alflow.frameworks.sglang.names import (
    SGLANG_DETAILS_CORRECT,
    SGLANG_DETAILS_HISTOGRAM,
    SGLANG_DETAILS_PROPOSED,
    SGLANG_DETAILS_VERIFY_CT,
    SGLANG_SGLEXT,
    SGLANG_SPEC_DETAILS,
)
from alflow.loadgen.counts import NO_REQUEST_SPEC, CountsReader, RequestSpec, consistent, int_list, nonneg_int


def spec_tokens_details_counts(body: Mapping[str, object]) -> RequestSpec:
    """SGLang's per-request speculative counts from ``sglext.spec_tokens_details`` (all None: not usable).

    SGLang (PR #33518, merged 2026-08-04; ``python/sglang/srt/entrypoints/openai/serving_chat.py``,
    ``serving_completions.py``, ``utils.py`` ``spec_tokens_details_from_meta_info``) sends the object when the
    request sets ``return_spec_tokens_details: true``: streamed in a chunk of its own (``"choices": []``,
    response-level ``sglext``) after the finish_reason chunks and before the usage chunk; not streamed, as the
    body's top-level ``sglext``. With ``n > 1`` it is a list (alflow sends ``n = 1``: a list is not used).

    Used: ``spec_verify_ct`` (steps), ``spec_num_correct_drafts`` (accepted drafts), ``spec_num_proposed_drafts``
    and ``spec_correct_drafts_histogram`` (index j = steps that accepted j drafts, K + 1 buckets). SGLang fills a
    missing count with 0 and a missing histogram with ``[]``: an empty histogram gives the counts without one.
    ``spec_accept_length`` (completion tokens / verify steps: counts the prefill token, biased high) is never
    read. The same checks as vLLM's: non-negative integers, the histogram summing to the steps and to the
    accepted drafts, accepted <= proposed; an object that fails any of them is not used.
    """
    ext = body.get(SGLANG_SGLEXT)
    details = ext.get(SGLANG_SPEC_DETAILS) if isinstance(ext, dict) else None
    if not isinstance(details, dict):
        return NO_REQUEST_SPEC
    steps = nonneg_int(details.get(SGLANG_DETAILS_VERIFY_CT))
    accepted = nonneg_int(details.get(SGLANG_DETAILS_CORRECT))
    drafts = nonneg_int(details.get(SGLANG_DETAILS_PROPOSED))
    hist = int_list(details.get(SGLANG_DETAILS_HISTOGRAM, []))
    if steps is None or accepted is None or drafts is None or hist is None or accepted > drafts:
        return NO_REQUEST_SPEC
    if hist and not consistent(steps, accepted, drafts, hist):
        return NO_REQUEST_SPEC
    return RequestSpec(steps, accepted, drafts, hist or None)


SGLANG_COUNTS = CountsReader(SGLANG_SGLEXT, spec_tokens_details_counts)
"""SGLang's reader: the response-level ``sglext`` of its own chunk (``"choices": []``) or of the body."""
