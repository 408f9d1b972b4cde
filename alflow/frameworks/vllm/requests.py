"""vLLM's per-request speculative counts (``metrics.speculative_decoding``): the reader the client is handed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from alflow.loadgen.counts import NO_REQUEST_SPEC, CountsReader, RequestSpec, consistent, int_list, nonneg_int


def speculative_decoding_counts(body: Mapping[str, object]) -> RequestSpec:
    """VLLM's per-request speculative counts from a response body or the stream's usage event.

    Reads ``metrics.speculative_decoding``, vLLM 0.32.0's ``RequestSpecDecodeMetrics.to_dict``
    (``vllm/v1/metrics/stats.py``), sent when the server runs with ``--per-request-spec-decode-metrics
    summary|detailed`` (``vllm/config/observability.py``): streamed on the final usage chunk (``"choices":[]``)
    when ``stream_options.include_usage`` is set and ``n == 1`` (``vllm/entrypoints/openai/completion/serving.py``,
    ``chat_completion/serving.py``), else at the top level of the body. The counts used are ``num_spec_steps``,
    ``num_accepted_draft_tokens``, ``num_draft_tokens`` and the dense ``acceptance_histogram`` (index j = steps
    that accepted exactly j drafts, length ``num_spec_tokens + 1``); the scheduler observes one entry per verify
    step that carried drafts (``vllm/v1/core/sched/scheduler.py``), the same entries as its counters.

    The server's word is checked before it is used: every count a non-negative integer (bools are not),
    ``sum(hist) == num_spec_steps``, ``sum(j * hist[j]) == num_accepted_draft_tokens``, accepted <= proposed
    drafts, ``len(hist) == num_spec_tokens + 1`` when ``num_spec_tokens`` is sent, and ``detailed``'s
    ``per_step_accepted`` / ``per_step_drafted`` (when not null) one integer per step summing to the accepted and
    proposed drafts. An object that fails any of these is not used (all None); nothing here raises.
    """
    metrics = body.get("metrics")
    spec = metrics.get("speculative_decoding") if isinstance(metrics, dict) else None
    if not isinstance(spec, dict):
        return NO_REQUEST_SPEC
    steps = nonneg_int(spec.get("num_spec_steps"))
    accepted = nonneg_int(spec.get("num_accepted_draft_tokens"))
    drafts = nonneg_int(spec.get("num_draft_tokens"))
    hist = int_list(spec.get("acceptance_histogram"))
    if steps is None or accepted is None or drafts is None or not hist:
        return NO_REQUEST_SPEC
    if not consistent(steps, accepted, drafts, hist):
        return NO_REQUEST_SPEC
    k = spec.get("num_spec_tokens")
    if k is not None and nonneg_int(k) != len(hist) - 1:
        return NO_REQUEST_SPEC
    per_step_accepted = spec.get("per_step_accepted")
    per_step_drafted = spec.get("per_step_drafted")
    if per_step_accepted is not None or per_step_drafted is not None:
        got_accepted = int_list(per_step_accepted)
        got_drafted = int_list(per_step_drafted)
        if (
            got_accepted is None
            or got_drafted is None
            or len(got_accepted) != steps
            or len(got_drafted) != steps
            or sum(got_accepted) != accepted
            or sum(got_drafted) != drafts
        ):
            return NO_REQUEST_SPEC
        return RequestSpec(
            steps, accepted, drafts, hist, full_k_histogram(got_accepted, got_drafted, len(hist) - 1)
        )
    return RequestSpec(steps, accepted, drafts, hist)


def full_k_histogram(accepted: Sequence[int], drafted: Sequence[int], k: int) -> list[int] | None:
    """The steps that carried all ``k`` drafts, by drafts accepted (index j: exactly j).

    None if a step accepted more than it drafted (not a count to trust).
    """
    hist = [0] * (k + 1)
    for a, d in zip(accepted, drafted, strict=True):
        if a > d:
            return None
        if d == k:
            hist[a] += 1
    return hist


VLLM_COUNTS = CountsReader("metrics", speculative_decoding_counts)
"""vLLM's reader: the ``metrics`` object of the usage event (streamed) or of the body."""
