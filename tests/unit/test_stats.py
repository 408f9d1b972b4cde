"""AL statistics from counters and per-step data; chi-square machinery."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from alflow.acceptance import stats
from alflow.acceptance import synthetic as syn
from alflow.errors import InvalidInputError
from alflow.util.rows import dump_row

pytestmark = pytest.mark.unit


def test_from_counters_with_per_position_counts() -> None:
    s = stats.from_counters(100, 150, draft_tokens=300, accepted_per_position=[80, 50, 20])
    assert s.observed
    assert s.k == 3
    assert s.al == pytest.approx(2.5)
    assert s.acceptance_rate == pytest.approx(0.5)
    assert s.per_position_rates == pytest.approx((0.8, 0.5, 0.2))
    assert s.conditional_rates == pytest.approx((0.8, 0.625, 0.4))
    assert s.histogram == {1: 20, 2: 30, 3: 30, 4: 20}
    assert s.ci is not None
    assert s.ci.method == "histogram-iid"
    assert "approximation" in s.ci.note
    assert s.ci.low < 2.5 < s.ci.high


def test_counters_accept_prometheus_floats() -> None:
    s = stats.from_counters(1.234567e06, 2.469134e06, draft_tokens=3.703701e06)
    assert s.num_drafts == 1_234_567
    assert s.al == pytest.approx(3.0)
    assert s.ci is not None
    assert s.ci.method == "variance-bound"


def test_zero_drafts_is_a_clear_result_not_a_division_error() -> None:
    s = stats.from_counters(0, 0, draft_tokens=0, accepted_per_position=[0, 0, 0])
    assert not s.observed
    assert s.al is None
    assert s.acceptance_rate is None
    assert s.ci is None
    assert "no speculative steps observed" in s.note
    assert dump_row(s)["al"] is None


def test_negative_delta_is_a_counter_reset() -> None:
    with pytest.raises(stats.CounterResetError, match="num_drafts went backwards by 5"):
        stats.from_counters(-5, 0)
    with pytest.raises(stats.CounterResetError, match="vllm:spec_decode_num_drafts went backwards"):
        stats.counter_delta("vllm:spec_decode_num_drafts", 1000.0, 10.0)
    assert stats.counter_delta("x", 10.0, 1.5e6) == 1_499_990


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        (
            {"num_drafts": 10, "accepted_tokens": 5, "accepted_per_position": [4, 6]},
            "accepted_per_position[1]=6",
        ),
        ({"num_drafts": 10, "accepted_tokens": 50, "k": 3}, "exceeds num_drafts x K"),
        ({"num_drafts": 0, "accepted_tokens": 5}, "num_drafts=0 but accepted_tokens=5"),
        ({"num_drafts": 10.5, "accepted_tokens": 5}, "num_drafts=10.5 is not a whole number"),
        ({"num_drafts": float("nan"), "accepted_tokens": 5}, "not a finite number"),
    ],
)
def test_inconsistent_counters_are_named(kwargs: dict[str, object], fragment: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        stats.from_counters(**kwargs)  # type: ignore[arg-type]
    assert fragment in str(info.value)


def test_per_position_sum_mismatch_is_noted() -> None:
    s = stats.from_counters(10, 9, accepted_per_position=[6, 4])
    assert "sum to 10" in s.note
    assert s.al == pytest.approx(1.9)


def test_from_steps_matches_counters_and_histogram() -> None:
    accepted = [0, 1, 2, 3, 3, 2]
    s = stats.from_steps(accepted, 3)
    assert s.al == pytest.approx(1 + 11 / 6)
    assert s.histogram == {1: 1, 2: 1, 3: 2, 4: 2}
    assert s.accepted_per_position == (5, 4, 2)
    assert s.ci is not None
    assert s.ci.method == "per-step-iid"
    with pytest.raises(InvalidInputError, match=r"accepted\[1\]=4 is not an integer in \[0, 3\]"):
        stats.from_steps([1, 4], 3)


def test_clustered_interval_is_wider_when_requests_are_correlated() -> None:
    rng = random.Random(5)
    accepted: list[int] = []
    ids: list[int] = []
    for rid in range(40):
        a = rng.randint(0, 3)  # every step of a request accepts the same number: strong correlation
        accepted += [a] * 50
        ids += [rid] * 50
    iid = stats.from_steps(accepted, 3).ci
    clustered = stats.from_steps(accepted, 3, request_ids=ids).ci
    assert iid is not None
    assert clustered is not None
    assert clustered.method == "per-step-clustered"
    assert (clustered.high - clustered.low) > 4 * (iid.high - iid.low)


def test_interval_coverage_is_close_to_nominal() -> None:
    sampler = syn.sampler("constant-conditional", 3, al=2.2, seed=11)
    covered = 0
    for _ in range(300):
        steps = [sampler.draw_step(1)[0] for _ in range(200)]
        ci = stats.from_steps(steps, 3).ci
        assert ci is not None
        covered += ci.low <= 2.2 <= ci.high
    assert 0.91 <= covered / 300 <= 0.99


@pytest.mark.parametrize(
    ("x", "dof", "p"),
    [
        (3.841458820694124, 1, 0.05),
        (11.070497693516351, 5, 0.05),
        (6.634896601021214, 1, 0.01),
        (2.0, 2, 0.36787944),
    ],
)
def test_chi_square_sf_golden(x: float, dof: int, p: float) -> None:
    assert stats.chi_square_sf(x, dof) == pytest.approx(p, rel=1e-6)


def test_chi_square_sf_edges() -> None:
    assert stats.chi_square_sf(0.0, 3) == 1.0
    assert stats.chi_square_sf(500.0, 3) < 1e-100
    with pytest.raises(InvalidInputError):
        stats.chi_square_sf(1.0, 0)


def test_goodness_of_fit_flags_impossible_lengths() -> None:
    fit = stats.goodness_of_fit({1: 5, 2: 95}, (0.0, 1.0))
    assert fit.p_value == 0.0
    fit = stats.goodness_of_fit({2: 100}, (0.0, 1.0))
    assert fit.p_value == 1.0
    with pytest.raises(InvalidInputError, match="no steps observed"):
        stats.goodness_of_fit({}, (1.0,))


# --- properties: counters built from random per-step accept counts ------------------------------------------


@st.composite
def _steps(draw: st.DrawFn) -> tuple[int, list[int]]:
    """K and a list of accepted-draft counts (0..K), one per step that carried drafts."""
    k = draw(st.integers(min_value=1, max_value=8))
    return k, draw(st.lists(st.integers(min_value=0, max_value=k), min_size=1, max_size=200))


def _counters(k: int, steps: list[int]) -> tuple[int, int, list[int]]:
    """What a vLLM-style server counts: steps, accepted tokens, and per position how often it was accepted."""
    per_position = [sum(1 for a in steps if a > i) for i in range(k)]
    return len(steps), sum(steps), per_position


@given(_steps())
@settings(max_examples=300, deadline=None)
def test_al_is_one_plus_the_mean_accepted_drafts_and_positions_sum_to_accepted(
    case: tuple[int, list[int]],
) -> None:
    k, steps = case
    n, accepted, per_position = _counters(k, steps)
    got = stats.from_counters(n, accepted, draft_tokens=n * k, accepted_per_position=per_position, k=k)
    assert got.al == pytest.approx(1 + sum(steps) / len(steps), abs=1e-12)
    assert sum(got.accepted_per_position or ()) == got.accepted_tokens == accepted
    assert got.acceptance_rate == pytest.approx(accepted / (n * k), abs=1e-12)
    assert got.note == ""  # consistent counters: nothing to warn about


@given(_steps())
@settings(max_examples=300, deadline=None)
def test_histogram_from_positions_recovers_the_accept_lengths(case: tuple[int, list[int]]) -> None:
    k, steps = case
    n, accepted, per_position = _counters(k, steps)
    got = stats.from_counters(n, accepted, accepted_per_position=per_position, k=k)
    expected = {a + 1: steps.count(a) for a in range(k + 1) if steps.count(a)}
    assert {j: c for j, c in (got.histogram or {}).items() if c} == expected
    rates = got.per_position_rates or ()
    assert all(a >= b for a, b in itertools.pairwise(rates))  # unconditional rates never rise
    assert got.ci is not None
    assert got.ci.low <= (got.al or 0) <= got.ci.high


@given(_steps(), st.integers(min_value=1, max_value=5))
@settings(max_examples=200, deadline=None)
def test_al_over_merged_windows_is_the_step_weighted_mean(case: tuple[int, list[int]], cut: int) -> None:
    k, steps = case
    at = min(len(steps) - 1, cut) if len(steps) > 1 else 1
    whole = stats.from_counters(*_counters(k, steps)[:2], k=k)
    parts = [steps[:at], steps[at:]] if len(steps) > 1 else [steps]
    weighted = sum(len(p) * (1 + sum(p) / len(p)) for p in parts if p) / len(steps)
    assert whole.al == pytest.approx(weighted, abs=1e-12)
