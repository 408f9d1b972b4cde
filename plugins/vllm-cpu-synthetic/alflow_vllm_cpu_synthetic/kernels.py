"""CPU ports of vLLM 0.32.0's two rejection kernels, synthetic mode included.

The rule ported is the ``SYNTHETIC_MODE`` branch of the Triton kernels in
``vllm/v1/sample/rejection_sampler.py`` of vLLM 0.32.0:

- ``rejection_greedy_sample_kernel`` (lines 725-780): a request runs here when it is greedy (``is_greedy`` is
  None or true). For each draft position ``pos`` until the first rejection, the draft is accepted when
  ``uniform_probs[start + pos] < synthetic_conditional_rates[pos]`` and the draft id is not the padding
  ``-1`` (line 763); an accepted position stores the draft id, the first rejected one stores the target's
  argmax (line 764) and stops the loop; when no position was rejected, the bonus token is stored after the
  last draft (lines 774-780).
- ``rejection_random_sample_kernel`` (lines 828-900): a request runs here when it is not greedy. A padded
  draft (``-1``) is rejected (lines 864-866); otherwise it is accepted when
  ``uniform_probs[start + pos] < synthetic_conditional_rates[pos]`` (lines 867-869); the first rejection
  stores the recovered token ``recovered_token_ids[start + pos]`` (line 889) and stops; all accepted
  appends the bonus token (lines 894-900).

Positions after the first rejection are left as they were (the output buffer comes filled with the
placeholder -1, ``PLACEHOLDER_TOKEN_ID``). ``start`` is 0 for the first request, else
``cu_num_draft_tokens[req - 1]``; the request's drafts are ``cu_num_draft_tokens[req] - start``.

Calls with ``SYNTHETIC_MODE`` false go unchanged to vLLM's own CPU implementations (the functions
``_rejection_greedy_sample_kernel_impl`` / ``_rejection_random_sample_kernel_impl`` of
``vllm/utils/cpu_triton_utils.py``, which call the C++ kernels); :func:`make_greedy` and
:func:`make_random` take them as ``native``. The signatures are those of vLLM's CPU implementations,
which are the Triton kernels' parameters in their order (the launch binds them by position).

This file holds the vectorised port; ``tests/transcription.py`` holds a line-by-line Python
transcription of the Triton kernels, and the property test checks that the two agree.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

Native = Callable[..., Any]


def _layout(
    cu_num_draft_tokens: torch.Tensor, batch: int, width: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per request and position: the flat index of the draft, whether the position exists, the draft count.

    Returns ``(index [batch, width], valid [batch, width], count [batch])``; ``width`` is ``max_spec_len``.
    """
    ends = cu_num_draft_tokens.to(torch.int64).reshape(-1)[:batch]
    starts = torch.cat([ends.new_zeros(1), ends[:-1]]) if batch else ends
    count = ends - starts
    pos = torch.arange(width, dtype=torch.int64, device=ends.device).unsqueeze(0)
    valid = pos < count.unsqueeze(1)
    index = starts.unsqueeze(1) + pos
    return index, valid, count


def _synthetic(
    output_token_ids: torch.Tensor,
    cu_num_draft_tokens: torch.Tensor,
    draft_token_ids: torch.Tensor,
    rejected_token_ids: torch.Tensor,
    bonus_token_ids: torch.Tensor,
    rows: torch.Tensor,
    max_spec_len: int,
    uniform_probs: torch.Tensor,
    synthetic_conditional_rates: torch.Tensor,
) -> None:
    """The synthetic accept rule for the requests in ``rows`` (a bool mask over the batch), in place.

    ``rejected_token_ids[i]`` is what a rejection at flat draft index ``i`` stores: the target's argmax
    (greedy kernel) or the recovered token (random kernel).
    """
    batch = output_token_ids.shape[0]
    width = int(max_spec_len)
    index, valid, count = _layout(cu_num_draft_tokens, batch, width)
    num_tokens = draft_token_ids.shape[0]
    if num_tokens:
        safe = index.clamp(0, num_tokens - 1)
        drafts = draft_token_ids.reshape(-1).to(torch.int64)[safe]
        uniform = uniform_probs.reshape(-1)[safe]
        fallback = rejected_token_ids.reshape(-1).to(torch.int64)[safe]
    else:
        drafts = torch.full_like(index, -1)
        uniform = torch.ones(index.shape, dtype=torch.float64, device=index.device)
        fallback = torch.zeros_like(index)
    rates = synthetic_conditional_rates.reshape(-1)
    # a position beyond the configured K never exists (max_spec_len <= K); pad so the gather is defined
    padded = torch.zeros(width, dtype=rates.dtype, device=rates.device)
    used = min(width, rates.shape[0])
    padded[:used] = rates[:used]
    # line 763 / 864-869: accepted = (uniform < rate) and draft >= 0 (uniform float64, rate float32: compared in float64)
    accepted = (uniform < padded.unsqueeze(0)) & (drafts >= 0) & valid
    # a position is reached when every earlier position was accepted (the loop stops at the first rejection)
    alive = torch.cumprod(accepted.to(torch.int64), dim=1)
    before = torch.cat([torch.ones_like(alive[:, :1]), alive[:, :-1]], dim=1) if width else alive
    reached = valid & (before == 1) & rows.unsqueeze(1)
    tokens = torch.where(accepted, drafts, fallback).to(output_token_ids.dtype)
    head = output_token_ids[:, :width]
    head[reached] = tokens[reached]
    num_accepted = alive.sum(dim=1)
    all_accepted = rows & (num_accepted == count)
    if bool(all_accepted.any()):
        which = torch.nonzero(all_accepted).reshape(-1)
        bonus = bonus_token_ids.reshape(-1)[which].to(output_token_ids.dtype)
        output_token_ids[which, count[which]] = bonus


def make_greedy(native: Native) -> Native:
    """The greedy rejection kernel for vLLM's CPU dispatcher: synthetic mode ported, the rest to ``native``."""

    def rejection_greedy_sample_synthetic_cpu(
        output_token_ids: torch.Tensor,
        cu_num_draft_tokens: torch.Tensor,
        draft_token_ids: torch.Tensor,
        target_argmax: torch.Tensor,
        bonus_token_ids: torch.Tensor,
        is_greedy: torch.Tensor | None,
        max_spec_len: int,
        uniform_probs: torch.Tensor | None = None,
        synthetic_conditional_rates: torch.Tensor | None = None,
        SYNTHETIC_MODE: bool = False,  # noqa: N803 (the Triton kernel's constexpr name)
    ) -> None:
        if not SYNTHETIC_MODE:
            native(
                output_token_ids,
                cu_num_draft_tokens,
                draft_token_ids,
                target_argmax,
                bonus_token_ids,
                is_greedy,
                max_spec_len,
                uniform_probs,
                synthetic_conditional_rates,
                SYNTHETIC_MODE,
            )
            return
        assert uniform_probs is not None
        assert synthetic_conditional_rates is not None
        batch = output_token_ids.shape[0]
        # lines 741-744: a non-greedy request exits early (is_greedy None: every request is greedy)
        rows = (
            torch.ones(batch, dtype=torch.bool, device=output_token_ids.device)
            if is_greedy is None
            else is_greedy.reshape(-1)[:batch].to(torch.bool)
        )
        _synthetic(
            output_token_ids,
            cu_num_draft_tokens,
            draft_token_ids,
            target_argmax.to(torch.int32),  # line 758: .to(tl.int32)
            bonus_token_ids,
            rows,
            max_spec_len,
            uniform_probs,
            synthetic_conditional_rates,
        )

    return rejection_greedy_sample_synthetic_cpu


def make_random(native: Native) -> Native:
    """The random rejection kernel for vLLM's CPU dispatcher: synthetic mode ported, the rest to ``native``."""

    def rejection_random_sample_synthetic_cpu(
        output_token_ids: torch.Tensor,
        cu_num_draft_tokens: torch.Tensor,
        draft_token_ids: torch.Tensor,
        draft_probs: torch.Tensor | None,
        target_probs: torch.Tensor,
        bonus_token_ids: torch.Tensor,
        recovered_token_ids: torch.Tensor,
        uniform_probs: torch.Tensor,
        is_greedy: torch.Tensor,
        max_spec_len: int,
        vocab_size: int,
        synthetic_conditional_rates: torch.Tensor | None = None,
        NO_DRAFT_PROBS: bool = False,  # noqa: N803
        SYNTHETIC_MODE: bool = False,  # noqa: N803
    ) -> None:
        if not SYNTHETIC_MODE:
            native(
                output_token_ids,
                cu_num_draft_tokens,
                draft_token_ids,
                draft_probs,
                target_probs,
                bonus_token_ids,
                recovered_token_ids,
                uniform_probs,
                is_greedy,
                max_spec_len,
                vocab_size,
                synthetic_conditional_rates,
                NO_DRAFT_PROBS,
                SYNTHETIC_MODE,
            )
            return
        assert synthetic_conditional_rates is not None
        batch = output_token_ids.shape[0]
        # lines 846-849: a greedy request exits early
        rows = ~is_greedy.reshape(-1)[:batch].to(torch.bool)
        _synthetic(
            output_token_ids,
            cu_num_draft_tokens,
            draft_token_ids,
            recovered_token_ids,
            bonus_token_ids,
            rows,
            max_spec_len,
            uniform_probs,
            synthetic_conditional_rates,
        )

    return rejection_random_sample_synthetic_cpu
