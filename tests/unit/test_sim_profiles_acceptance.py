"""Timing profiles (roofline) and natural acceptance (prompt-dependent rates)."""

from __future__ import annotations

import random

import pytest

from alflow.errors import InvalidInputError
from alflow.sim.acceptance import NaturalAcceptance, category_al, classify_prompt, draw_natural
from alflow.sim.profiles import PROFILES, get_profile, predicted_tpot_s

pytestmark = pytest.mark.unit


def test_dense_step_is_weights_over_bandwidth_at_batch_one() -> None:
    p = get_profile("h200-llama70b")
    memory_s = (p.dense_weight_bytes + 1000 * p.kv_bytes_per_token) / p.effective_bw
    draft_s = 3 * (p.draft_weight_bytes / p.effective_bw + p.draft_overhead_s)
    assert p.decode_step_s(1, 3, 1000) == pytest.approx(memory_s + draft_s + p.step_overhead_s)
    assert 0.015 < p.decode_step_s(1, 3, 1000) < 0.030


def test_step_time_grows_with_batch_context_and_becomes_compute_bound() -> None:
    for p in PROFILES.values():
        times = [p.decode_step_s(b, 3, b * 1000) for b in (1, 8, 64, 512)]
        assert times == sorted(times)
        big = p.decode_step_s(4096, 7, 0)
        compute = 4096 * 8 * 2 * p.active_params / p.effective_flops
        assert big >= compute


def test_moe_reads_more_experts_with_more_tokens() -> None:
    p = get_profile("h200-moe-large")
    assert p.weights_read_bytes(1) < p.weights_read_bytes(64) < p.weights_read_bytes(10_000)
    assert p.weights_read_bytes(10_000) == pytest.approx(
        p.dense_weight_bytes + p.expert_weight_bytes, rel=1e-3
    )


def test_predicted_tpot() -> None:
    p = get_profile("h200-llama70b")
    tpot = predicted_tpot_s(p, 3, 3.0, 1000, 1000)
    assert tpot == pytest.approx(p.decode_step_s(1, 3, 1500) / 3.0)
    assert predicted_tpot_s(p, 3, 4.0, 1000, 1000) < tpot
    with pytest.raises(InvalidInputError):
        predicted_tpot_s(p, 3, 0.5, 1, 1)
    with pytest.raises(InvalidInputError, match="known"):
        get_profile("nope")


@pytest.mark.parametrize(
    ("text", "category"),
    [
        ("def f(x):\n    return x  # fix this python bug", "coding"),
        ("Solve the equation 3x + 4 = 19. How many solutions?", "math"),
        ("Write a poem about the sea", "writing"),
        ("Pretend you are a pirate captain and stay in character", "roleplay"),
        ("Summarize the key points of this article", "summarization"),
    ],
)
def test_classify_prompt(text: str, category: str) -> None:
    assert classify_prompt(text) == category


def test_calibrated_to_speed_bench_figures_at_k3() -> None:
    # DOMAIN.md section 6: coding / roleplay means for n-gram, EAGLE3, MTP
    assert category_al("ngram", "coding", 3) == pytest.approx(1.54, abs=0.1)
    assert category_al("ngram", "roleplay", 3) == pytest.approx(1.15, abs=0.1)
    assert category_al("eagle3", "coding", 3) == pytest.approx(2.46, abs=0.1)
    assert category_al("eagle3", "roleplay", 3) == pytest.approx(1.87, abs=0.1)
    assert category_al("mtp", "coding", 3) == pytest.approx(3.34, abs=0.1)
    assert category_al("mtp", "roleplay", 3) == pytest.approx(2.09, abs=0.1)


def test_natural_rates_deterministic_and_ordered() -> None:
    nat = NaturalAcceptance("mtp", 5, seed=7)
    code = "Implement quicksort in Python: def quicksort(arr): ..."
    assert nat.conditional_rates(code) == NaturalAcceptance("mtp", 5, seed=7).conditional_rates(code)
    rates = nat.conditional_rates(code)
    assert list(rates) == sorted(rates, reverse=True)
    assert nat.expected_al(code) > nat.expected_al("Write a story about a dragon") + 0.5
    assert NaturalAcceptance("mtp", 5, quality=0.5).expected_al(code) < nat.expected_al(code) - 1.0
    assert nat.expected_al(code, temperature=1.0) < nat.expected_al(code)


def test_draw_natural_matches_expected_al() -> None:
    rates = NaturalAcceptance("eagle3", 3).conditional_rates("Write a poem")
    rng = random.Random(1)
    n = 50_000
    mean = 1 + sum(draw_natural(rates, rng) for _ in range(n)) / n
    expected = 1 + rates[0] + rates[0] * rates[1] + rates[0] * rates[1] * rates[2]
    assert mean == pytest.approx(expected, abs=0.02)


def test_drafter_cost_depends_on_method() -> None:
    p = get_profile("h200-llama70b")
    ngram, mtp, draft = (p.decode_step_s(1, 3, 1000, m) for m in ("ngram", "mtp", "draft_model"))
    assert ngram < mtp < draft
    assert ngram == pytest.approx(p.decode_step_s(1, 0, 1000))


def test_a_block_drafter_costs_one_pass_whatever_k() -> None:
    """MTP drafts K tokens one head call each; DSpark/DFlash draft the block in one pass: cost grows far slower with K."""
    from alflow.sim.profiles import DEFAULT_PROFILE, get_profile

    p = get_profile(DEFAULT_PROFILE)

    def drafter_s(method: str, k: int) -> float:  # the step time beyond the same step without drafting cost
        return p.decode_step_s(8, k, 8 * 2048, method) - p.decode_step_s(8, k, 8 * 2048, "ngram")

    mtp_growth = drafter_s("mtp", 7) / drafter_s("mtp", 1)
    assert mtp_growth == pytest.approx(7.0)
    for block in ("dspark", "dflash"):
        growth = drafter_s(block, 7) / drafter_s(block, 1)
        assert 1.0 < growth < 1.5, (block, growth)
        assert drafter_s(block, 7) < drafter_s("mtp", 7)
