"""The port against a line-by-line transcription of vLLM 0.32.0's Triton kernels, and the plugin's contract.

Runs in the vLLM environment: ``.venv-vllm/bin/python -m pytest plugins/vllm-cpu-synthetic/tests``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parent))

import alflow_vllm_cpu_synthetic as plugin
from alflow_vllm_cpu_synthetic.kernels import make_greedy, make_random
from transcription import greedy_kernel, random_kernel

PLACEHOLDER = -1  # vllm/v1/sample/rejection_sampler.py PLACEHOLDER_TOKEN_ID
VOCAB = 11


def _c_kernels_loaded() -> None:
    from vllm.platforms import current_platform

    current_platform.import_kernels()


@dataclass
class Batch:
    """One rejection-sampling call's inputs, in the shapes and dtypes vLLM passes (rejection_sample())."""

    cu_num_draft_tokens: torch.Tensor  # int32 [batch]
    draft_token_ids: torch.Tensor  # int32 [num_tokens]
    target_argmax: torch.Tensor  # int64 [num_tokens]
    bonus_token_ids: torch.Tensor  # int64 [batch, 1]
    recovered_token_ids: torch.Tensor  # int32 [num_tokens]
    target_probs: torch.Tensor  # float32 [num_tokens, vocab]
    uniform_probs: torch.Tensor  # float64 [num_tokens]
    is_greedy: torch.Tensor | None  # bool [batch] or None (all greedy)
    rates: torch.Tensor  # float32 [K] conditional rates
    max_spec_len: int

    def output(self) -> torch.Tensor:
        batch = self.cu_num_draft_tokens.shape[0]
        return torch.full((batch, self.max_spec_len + 1), PLACEHOLDER, dtype=torch.int32)


RATE_VALUES = st.one_of(st.sampled_from([0.0, 1.0, 0.5]), st.floats(0.0, 1.0, allow_nan=False))


@st.composite
def batches(draw: st.DrawFn) -> Batch:
    k = draw(st.integers(1, 7))
    batch = draw(st.integers(1, 6))
    counts = draw(st.lists(st.integers(0, k), min_size=batch, max_size=batch))
    num_tokens = sum(counts)
    drafts = draw(
        st.lists(st.one_of(st.just(-1), st.integers(0, VOCAB - 1)), min_size=num_tokens, max_size=num_tokens)
    )
    argmax = draw(st.lists(st.integers(0, VOCAB - 1), min_size=num_tokens, max_size=num_tokens))
    recovered = draw(st.lists(st.integers(0, VOCAB - 1), min_size=num_tokens, max_size=num_tokens))
    bonus = draw(st.lists(st.integers(0, VOCAB - 1), min_size=batch, max_size=batch))
    rates = draw(st.lists(RATE_VALUES, min_size=k, max_size=k))
    rates32 = torch.tensor(rates, dtype=torch.float32)
    # uniform draws: arbitrary, and some exactly at a rate (the rule is strict: u < rate)
    uniform: list[float] = []
    for r, n in enumerate(counts):
        for pos in range(n):
            exact = float(rates32[pos])
            uniform.append(
                draw(st.one_of(st.floats(0.0, 1.0, exclude_max=True, allow_nan=False), st.just(exact)))
            )
        del r
    greedy_mode = draw(st.sampled_from(["all", "none", "mixed"]))
    is_greedy: torch.Tensor | None
    if greedy_mode == "all":
        is_greedy = None
    elif greedy_mode == "none":
        is_greedy = torch.zeros(batch, dtype=torch.bool)
    else:
        is_greedy = torch.tensor(
            draw(st.lists(st.booleans(), min_size=batch, max_size=batch)), dtype=torch.bool
        )
    probs = torch.rand(
        (num_tokens, VOCAB), generator=torch.Generator().manual_seed(draw(st.integers(0, 2**31)))
    )
    cu = torch.tensor(counts, dtype=torch.int64).cumsum(0).to(torch.int32)
    return Batch(
        cu_num_draft_tokens=cu,
        draft_token_ids=torch.tensor(drafts, dtype=torch.int32),
        target_argmax=torch.tensor(argmax, dtype=torch.int64),
        bonus_token_ids=torch.tensor(bonus, dtype=torch.int64).reshape(batch, 1),
        recovered_token_ids=torch.tensor(recovered, dtype=torch.int32),
        target_probs=probs.softmax(-1),
        uniform_probs=torch.tensor(uniform, dtype=torch.float64),
        is_greedy=is_greedy,
        rates=rates32,
        max_spec_len=max(counts),
    )


def _run(b: Batch, greedy, random_) -> torch.Tensor:  # type: ignore[no-untyped-def]
    """What vLLM's rejection_sample() does with the two kernels: greedy requests, then random ones."""
    out = b.output()
    greedy(
        out, b.cu_num_draft_tokens, b.draft_token_ids, b.target_argmax, b.bonus_token_ids,
        b.is_greedy, b.max_spec_len, b.uniform_probs, b.rates, True,
    )  # fmt: skip
    if b.is_greedy is not None:
        random_(
            out, b.cu_num_draft_tokens, b.draft_token_ids, None, b.target_probs, b.bonus_token_ids,
            b.recovered_token_ids, b.uniform_probs, b.is_greedy, b.max_spec_len, VOCAB, b.rates, True, True,
        )  # fmt: skip
    return out


def _never(*args: object) -> None:
    raise AssertionError("a synthetic call reached the native kernel")


@settings(max_examples=400, deadline=None)
@given(batches())
def test_port_matches_the_triton_transcription(b: Batch) -> None:
    ported = _run(b, make_greedy(_never), make_random(_never))
    reference = _run(b, greedy_kernel, random_kernel)
    assert torch.equal(ported, reference), (ported, reference)


def test_rates_zero_and_one_and_padding() -> None:
    # K = 3, two requests: rate 1 accepts every real draft, a -1 draft is rejected, rate 0 rejects at once
    b = Batch(
        cu_num_draft_tokens=torch.tensor([3, 6], dtype=torch.int32),
        draft_token_ids=torch.tensor([5, 6, 7, 5, -1, 7], dtype=torch.int32),
        target_argmax=torch.tensor([1, 2, 3, 1, 2, 3], dtype=torch.int64),
        bonus_token_ids=torch.tensor([[9], [9]], dtype=torch.int64),
        recovered_token_ids=torch.tensor([4, 4, 4, 4, 4, 4], dtype=torch.int32),
        target_probs=torch.full((6, VOCAB), 1.0 / VOCAB),
        uniform_probs=torch.full((6,), 0.999, dtype=torch.float64),
        is_greedy=None,
        rates=torch.tensor([1.0, 1.0, 1.0]),
        max_spec_len=3,
    )
    out = _run(b, make_greedy(_never), make_random(_never))
    assert out.tolist() == [[5, 6, 7, 9], [5, 2, -1, -1]]  # all accepted + bonus; padding rejected -> argmax
    b.rates = torch.tensor([0.0, 1.0, 1.0])
    assert _run(b, make_greedy(_never), make_random(_never)).tolist() == [[1, -1, -1, -1], [1, -1, -1, -1]]
    b.is_greedy = torch.tensor([False, False])
    b.rates = torch.tensor([1.0, 1.0, 1.0])
    out = _run(b, make_greedy(_never), make_random(_never))
    assert out.tolist() == [
        [5, 6, 7, 9],
        [5, 4, -1, -1],
    ]  # random kernel: rejection stores the recovered token


@settings(max_examples=150, deadline=None)
@given(batches())
def test_non_synthetic_calls_reach_vllms_cpp_kernels_unchanged(b: Batch) -> None:
    _c_kernels_loaded()
    from vllm.utils import cpu_triton_utils as native

    seen: list[str] = []

    def spy_greedy(*args: object) -> None:
        seen.append("greedy")
        native._rejection_greedy_sample_kernel_impl(*args)

    ported, direct = b.output(), b.output()
    greedy = make_greedy(spy_greedy)
    args = (
        b.cu_num_draft_tokens,
        b.draft_token_ids,
        b.target_argmax,
        b.bonus_token_ids,
        b.is_greedy,
        b.max_spec_len,
    )
    greedy(ported, *args, None, None, False)
    native._rejection_greedy_sample_kernel_impl(direct, *args, None, None, False)
    assert seen == ["greedy"]
    assert torch.equal(ported, direct)
    reference = b.output()
    greedy_kernel(reference, *args, None, None, False)
    assert torch.equal(direct, reference)  # and vLLM's C++ kernel is the Triton rule (greedy, non-synthetic)
    if b.is_greedy is not None:
        rnd = (
            b.cu_num_draft_tokens, b.draft_token_ids, None, b.target_probs, b.bonus_token_ids,
            b.recovered_token_ids, b.uniform_probs, b.is_greedy, b.max_spec_len, VOCAB, None, True, False,
        )  # fmt: skip
        make_random(native._rejection_random_sample_kernel_impl)(ported, *rnd)
        native._rejection_random_sample_kernel_impl(direct, *rnd)
        assert torch.equal(ported, direct)


def test_a_synthetic_call_without_the_port_is_vllms_refusal() -> None:
    from vllm.utils import cpu_triton_utils as native

    b = Batch(
        cu_num_draft_tokens=torch.tensor([1], dtype=torch.int32),
        draft_token_ids=torch.tensor([3], dtype=torch.int32),
        target_argmax=torch.tensor([3], dtype=torch.int64),
        bonus_token_ids=torch.tensor([[1]], dtype=torch.int64),
        recovered_token_ids=torch.tensor([2], dtype=torch.int32),
        target_probs=torch.full((1, VOCAB), 1.0 / VOCAB),
        uniform_probs=torch.tensor([0.1], dtype=torch.float64),
        is_greedy=None,
        rates=torch.tensor([0.5]),
        max_spec_len=1,
    )
    with pytest.raises(AssertionError, match="Synthetic acceptance not supported with CPU sampling"):
        _run(b, native._rejection_greedy_sample_kernel_impl, native._rejection_random_sample_kernel_impl)


def test_another_vllm_version_is_refused_naming_both(monkeypatch: pytest.MonkeyPatch) -> None:
    import vllm

    plugin.check_version("0.32.0+cpu")
    plugin.check_version("0.32.0")
    with pytest.raises(plugin.VersionMismatchError, match=r"vLLM 0\.32\.0.*this is vLLM 0\.33\.1"):
        plugin.check_version("0.33.1")
    monkeypatch.setenv(plugin.ENABLE_ENV, "1")
    monkeypatch.setattr(vllm, "__version__", "0.31.2")
    with pytest.raises(
        plugin.VersionMismatchError, match=r"ports the rejection kernels of vLLM 0\.32\.0.*0\.31\.2"
    ):
        plugin.register()


def test_disabled_plugin_registers_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm.platforms.cpu import CpuPlatform

    monkeypatch.delenv(plugin.ENABLE_ENV, raising=False)
    before = CpuPlatform.__dict__["register_triton_kernel_overrides"]
    plugin.register()
    assert CpuPlatform.__dict__["register_triton_kernel_overrides"] is before


def test_enabled_plugin_registers_through_vllms_dispatcher_after_the_platform(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The hook runs the platform's own registration, then registers the port over its two rejection kernels,
    and vLLM's rejection_sample() (the real caller, through the dispatcher) then samples synthetically."""
    import vllm.v1.sample.rejection_sampler as rs
    from vllm.platforms import current_platform
    from vllm.v1.sample.metadata import SamplingMetadata

    _c_kernels_loaded()
    monkeypatch.setenv(plugin.ENABLE_ENV, "1")
    plugin.register()
    plugin.register()  # idempotent: vLLM loads general plugins once per process, but may call twice
    current_platform.register_triton_kernel_overrides()
    assert (
        getattr(rs.rejection_greedy_sample_kernel, "func", None).__name__
        == "rejection_greedy_sample_synthetic_cpu"
    )
    assert (
        getattr(rs.rejection_random_sample_kernel, "func", None).__name__
        == "rejection_random_sample_synthetic_cpu"
    )
    assert (
        rs.expand_kernel.func.__module__ == "vllm.utils.cpu_triton_utils"
    )  # the platform's other fallbacks stay

    torch.manual_seed(0)
    k, batch = 3, 4
    conditional = torch.tensor([1.0, 0.3, 0.0], dtype=torch.float32)  # min-variance at AL 2.3
    drafts = torch.randint(0, VOCAB, (batch * k,), dtype=torch.int32)
    logits = torch.randn(batch * k, VOCAB)
    meta = SamplingMetadata(
        temperature=None,
        all_greedy=True,
        all_random=False,
        top_p=None,
        top_k=None,
        generators={},
        max_num_logprobs=None,
        no_penalties=True,
        prompt_token_ids=None,
        frequency_penalties=torch.tensor([]),
        presence_penalties=torch.tensor([]),
        repetition_penalties=torch.tensor([]),
        output_token_ids=[],
        allowed_token_ids_mask=None,
        bad_words_token_ids={},
        logitsprocs=None,
    )
    accepted: list[int] = []
    for _ in range(50):
        out = rs.rejection_sample(
            drafts,
            [k] * batch,
            k,
            torch.tensor([k * (i + 1) for i in range(batch)], dtype=torch.int32),
            None,
            logits,
            torch.zeros((batch, 1), dtype=torch.int64),
            meta,
            synthetic_mode=True,
            synthetic_conditional_rates=conditional,
        )
        emitted = (out != PLACEHOLDER).sum(dim=1)
        accepted += (emitted - 1).tolist()
    # min-variance schedule at AL 2.3, K = 3: every step accepts 1 or 2 drafts, never 0 or 3
    assert set(accepted) <= {1, 2}
    assert 0.15 < sum(a == 2 for a in accepted) / len(accepted) < 0.45
