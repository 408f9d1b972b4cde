"""JSON pieces of the simulated responses that carry counts: usage and each framework's per-request speculative counts.

Built from one request's accept histogram (``hist[a]``: its verify steps that accepted ``a`` drafts, the same steps
the dialect's counters count) and, for vLLM's ``detailed`` level, its per-step accepts in order.

- SGLang with PR #33518, when the request sets ``return_spec_tokens_details: true``: ``sglext`` =
  ``{"spec_tokens_details": {...}}`` (:func:`spec_tokens_details_json`), streamed in a chunk of its own with
  ``"choices": []`` after the finish_reason chunk and before the usage chunk, not streamed at the body's top level
  (``python/sglang/srt/entrypoints/openai/serving_chat.py``, ``serving_completions.py``). No ``meta_info``: the
  OpenAI endpoints do not send it.
- vLLM 0.32.0 with ``--per-request-spec-decode-metrics summary|detailed`` (``vllm/config/observability.py``):
  ``metrics.speculative_decoding`` = ``RequestSpecDecodeMetrics.to_dict()`` (``vllm/v1/metrics/stats.py``),
  validated into the ``SpeculativeDecodingMetrics`` model inside ``PerRequestMetrics``
  (``vllm/entrypoints/generate/base/protocol.py``). Streamed, it rides on the final usage chunk
  (``"choices":[]``), dumped with ``exclude_none=True``: only ``speculative_decoding``, and the per-step arrays
  only at ``detailed`` (:func:`stream_metrics_json`; ``vllm/entrypoints/openai/completion/serving.py``,
  ``chat_completion/serving.py``). Not streamed, the response model is dumped whole (``model_dump()`` in the API
  routers): the timing fields and the absent per-step arrays are ``null`` (:func:`body_metrics_json`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import orjson

TIMING_FIELDS: Final = (
    "time_to_first_token_ms",
    "generation_time_ms",
    "queue_time_ms",
    "mean_itl_ms",
    "tokens_per_second",
)
"""``PerRequestMetrics``'s timing fields (``--enable-per-request-metrics``, which the sim does not have: null)."""


def usage_json(prompt: int, completion: int) -> bytes:
    """The OpenAI ``usage`` object."""
    return b'{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d}' % (
        prompt,
        prompt + completion,
        completion,
    )


def spec_tokens_details_json(hist: Sequence[int], k: int) -> bytes:
    """SGLang's ``sglext`` value from a request's accept histogram: ``{"spec_tokens_details": {...}}``.

    The fields of ``SpecTokensDetails`` (``python/sglang/srt/entrypoints/openai/protocol.py``, PR #33518) as
    ``spec_tokens_details_from_meta_info`` (``utils.py``) fills them: ``spec_verify_ct = S = sum(hist)``,
    ``spec_num_correct_drafts = A = sum(a * hist[a])``, ``spec_num_proposed_drafts = S K`` (every step drafts
    the block), ``spec_correct_drafts_histogram = hist`` (K + 1 buckets), ``spec_accept_rate = A / (S K)``,
    ``spec_accept_length = completion tokens / S``, which counts the prefill token, as SGLang's does (alflow
    never reads it; it is computed here as ``(1 + S + A) / S``, the untruncated completion), and the DSpark/DFlash
    fields SGLang sends as 0 / ``[]`` for a fixed-width drafter.
    """
    steps = sum(hist)
    accepted = sum(a * n for a, n in enumerate(hist))
    details = {
        "spec_accept_rate": accepted / (steps * k) if steps else 0.0,
        "spec_accept_length": (1 + steps + accepted) / steps if steps else 0.0,
        "spec_cap_length": 0.0,
        "spec_block_accept_length": 0.0,
        "spec_num_correct_drafts": accepted,
        "spec_num_proposed_drafts": steps * k,
        "spec_verify_ct": steps,
        "spec_correct_drafts_histogram": list(hist),
        "spec_cap_lens_histogram": [],
    }
    return orjson.dumps({"spec_tokens_details": details})


def speculative_decoding(
    hist: Sequence[int],
    k: int,
    steps: Sequence[int] | None,
    drafted: Sequence[int] | None = None,
    draft_tokens: int | None = None,
) -> dict[str, object]:
    """The dict of vLLM's ``RequestSpecDecodeMetrics.to_dict()`` for one request.

    ``mean_acceptance_length = 1 + A / S`` (1.0 without steps), ``draft_acceptance_rate = A / D`` (0.0 without
    drafts), with ``S = sum(hist)``, ``A = sum(a * hist[a])`` and ``D`` the drafts proposed (``draft_tokens``; K per
    step when not given); ``per_step_accepted`` / ``per_step_drafted`` (``drafted``, else K per step) only when
    ``steps`` holds at least one step (vLLM includes them only when populated).
    """
    n = sum(hist)
    accepted = sum(a * c for a, c in enumerate(hist))
    drafts = n * k if draft_tokens is None else draft_tokens
    out: dict[str, object] = {
        "mean_acceptance_length": 1.0 + accepted / n if n else 1.0,
        "draft_acceptance_rate": accepted / drafts if drafts else 0.0,
        "acceptance_histogram": list(hist),
        "num_spec_steps": n,
        "num_accepted_draft_tokens": accepted,
        "num_draft_tokens": drafts,
        "num_spec_tokens": k,
    }
    if steps:
        out["per_step_accepted"] = list(steps)
        out["per_step_drafted"] = list(drafted) if drafted is not None else [k] * len(steps)
    return out


def stream_metrics_json(
    hist: Sequence[int],
    k: int,
    steps: Sequence[int] | None,
    drafted: Sequence[int] | None = None,
    draft_tokens: int | None = None,
) -> bytes:
    """The final usage chunk's ``metrics`` value: ``{"speculative_decoding": {...}}`` without null fields."""
    return orjson.dumps({"speculative_decoding": speculative_decoding(hist, k, steps, drafted, draft_tokens)})


def body_metrics_json(
    hist: Sequence[int],
    k: int,
    steps: Sequence[int] | None,
    drafted: Sequence[int] | None = None,
    draft_tokens: int | None = None,
) -> bytes:
    """A non-streamed response's ``metrics`` value: the whole ``PerRequestMetrics``, absent fields null."""
    spec = speculative_decoding(hist, k, steps, drafted, draft_tokens)
    spec.setdefault("per_step_accepted", None)  # the model's last two fields, null at ``summary``
    spec.setdefault("per_step_drafted", None)
    metrics: dict[str, object] = dict.fromkeys(TIMING_FIELDS)
    metrics["speculative_decoding"] = spec
    return orjson.dumps(metrics)
