"""A line-by-line Python transcription of vLLM 0.32.0's two Triton rejection kernels.

``vllm/v1/sample/rejection_sampler.py``: ``rejection_greedy_sample_kernel`` (lines 725-780) and
``rejection_random_sample_kernel`` (lines 828-900). One call of ``program`` is one Triton program
(``req_idx = tl.program_id(0)``); ``tl.load(ptr + i)`` is ``ptr.reshape(-1)[i]``; ``tl.store`` writes the
flat output. Every branch is kept, the non-synthetic ones included, so the reference is the kernel as
written; the property test compares the plugin's vectorised port with it on synthetic calls.
"""

from __future__ import annotations

import torch


def _flat(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1)


def greedy_kernel(
    output_token_ids: torch.Tensor,
    cu_num_draft_tokens: torch.Tensor,
    draft_token_ids: torch.Tensor,
    target_argmax: torch.Tensor,
    bonus_token_ids: torch.Tensor,
    is_greedy: torch.Tensor | None,
    max_spec_len: int,
    uniform_probs: torch.Tensor | None,
    synthetic_conditional_rates: torch.Tensor | None,
    SYNTHETIC_MODE: bool,
) -> None:
    """``rejection_greedy_sample_kernel`` launched on grid ``(batch_size,)``."""
    out = _flat(output_token_ids)
    for req_idx in range(output_token_ids.shape[0]):
        is_greedy_ = True if is_greedy is None else bool(_flat(is_greedy)[req_idx])
        if not is_greedy_:
            continue  # early exit for non-greedy sampling requests
        start_idx = 0 if req_idx == 0 else int(_flat(cu_num_draft_tokens)[req_idx - 1])
        end_idx = int(_flat(cu_num_draft_tokens)[req_idx])
        num_draft_tokens = end_idx - start_idx
        rejected = False
        for pos in range(num_draft_tokens):
            if not rejected:
                draft_token_id = int(_flat(draft_token_ids)[start_idx + pos])
                target_argmax_id = int(_flat(target_argmax)[start_idx + pos].to(torch.int32))
                if SYNTHETIC_MODE:
                    assert uniform_probs is not None and synthetic_conditional_rates is not None
                    uniform_prob = float(_flat(uniform_probs)[start_idx + pos])
                    rate = float(_flat(synthetic_conditional_rates)[pos])
                    accepted = (uniform_prob < rate) and draft_token_id >= 0
                    token_id = draft_token_id if accepted else target_argmax_id
                    rejected = not accepted
                else:
                    token_id = target_argmax_id
                    rejected = draft_token_id != target_argmax_id
                out[req_idx * (max_spec_len + 1) + pos] = token_id
        if not rejected:
            bonus_token_id = int(_flat(bonus_token_ids)[req_idx])
            out[req_idx * (max_spec_len + 1) + num_draft_tokens] = bonus_token_id


def random_kernel(
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
    synthetic_conditional_rates: torch.Tensor | None,
    NO_DRAFT_PROBS: bool,
    SYNTHETIC_MODE: bool,
) -> None:
    """``rejection_random_sample_kernel`` launched on grid ``(batch_size,)``."""
    out = _flat(output_token_ids)
    for req_idx in range(output_token_ids.shape[0]):
        if bool(_flat(is_greedy)[req_idx]):
            continue  # early exit for greedy sampling requests
        start_idx = 0 if req_idx == 0 else int(_flat(cu_num_draft_tokens)[req_idx - 1])
        end_idx = int(_flat(cu_num_draft_tokens)[req_idx])
        num_draft_tokens = end_idx - start_idx
        rejected = False
        for pos in range(num_draft_tokens):
            if not rejected:
                draft_token_id = int(_flat(draft_token_ids)[start_idx + pos])
                uniform_prob = float(_flat(uniform_probs)[start_idx + pos])
                if draft_token_id < 0:
                    accepted = False
                elif SYNTHETIC_MODE:
                    assert synthetic_conditional_rates is not None
                    rate = float(_flat(synthetic_conditional_rates)[pos])
                    accepted = uniform_prob < rate
                else:
                    if NO_DRAFT_PROBS:
                        draft_prob = 1.0
                    else:
                        assert draft_probs is not None
                        draft_prob = float(
                            _flat(draft_probs)[(start_idx + pos) * vocab_size + draft_token_id]
                        )
                    target_prob = float(_flat(target_probs)[(start_idx + pos) * vocab_size + draft_token_id])
                    accepted = draft_prob > 0 and target_prob / draft_prob >= uniform_prob
                if accepted:
                    token_id = draft_token_id
                else:
                    rejected = True
                    token_id = int(_flat(recovered_token_ids)[start_idx + pos])
                out[req_idx * (max_spec_len + 1) + pos] = token_id
        if not rejected:
            bonus_token_id = int(_flat(bonus_token_ids)[req_idx])
            out[req_idx * (max_spec_len + 1) + num_draft_tokens] = bonus_token_id
