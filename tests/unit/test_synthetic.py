"""Synthetic-acceptance schemes: exact distributions, samplers, validation."""

from __future__ import annotations

import itertools
import math
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from alflow.acceptance import synthetic as syn
from alflow.acceptance.stats import goodness_of_fit

pytestmark = pytest.mark.unit


@st.composite
def al_and_k(draw: st.DrawFn) -> tuple[float, int]:
    k = draw(st.integers(min_value=1, max_value=16))
    al = draw(
        st.one_of(
            st.floats(min_value=1.0, max_value=k + 1.0, allow_nan=False),
            st.sampled_from([1.0, float(k + 1), 1.5, min(k + 1.0, 2.0)]),
        )
    )
    return al, k


@given(al_and_k())
@settings(max_examples=300, deadline=None)
def test_unbiased_schemes_have_exact_mean_and_valid_pmf(case: tuple[float, int]) -> None:
    al, k = case
    for name in syn.UNBIASED_SCHEMES:
        d = syn.distribution(name, k, al=al)
        assert len(d.pmf) == k + 1
        assert all(p >= 0.0 for p in d.pmf)
        assert math.fsum(d.pmf) == pytest.approx(1.0, abs=1e-12)
        assert d.mean == pytest.approx(al, abs=1e-9), name
        assert abs(d.bias) <= 1e-9
        rates = d.per_position_rates
        assert all(a >= b - 1e-12 for a, b in itertools.pairwise(rates))
        assert 1.0 + math.fsum(rates) == pytest.approx(d.mean, abs=1e-9)


@given(al_and_k())
@settings(max_examples=200, deadline=None)
def test_multinomial_pmf_sums_to_one_and_stays_in_range(case: tuple[float, int]) -> None:
    al, k = case
    d = syn.distribution("sglang-multinomial", k, al=al)
    assert math.fsum(d.pmf) == pytest.approx(1.0, abs=1e-12)
    assert 1.0 <= d.mean <= k + 1


def _multinomial_mean_by_integration(al: float, k: int) -> float:
    """Independent computation: integrate the normal density, mapping x -> round(clamp(x, 1, K+1))."""
    lo, hi, n = al - 12.0, al + 12.0, 240_000
    h = (hi - lo) / n
    total = 0.0
    for i in range(n):
        x = lo + (i + 0.5) * h
        density = math.exp(-0.5 * (x - al) ** 2) / math.sqrt(2 * math.pi)
        total += density * h * math.floor(min(max(x, 1.0), k + 1.0) + 0.5)
    return total


@pytest.mark.parametrize(("al", "k", "about"), [(3.39, 3, 3.24), (1.79, 1, 1.61)])
def test_sglang_multinomial_bias_matches_independent_computation(al: float, k: int, about: float) -> None:
    d = syn.distribution("sglang-multinomial", k, al=al)
    assert d.mean == pytest.approx(_multinomial_mean_by_integration(al, k), abs=1e-6)
    assert d.mean == pytest.approx(about, abs=0.006)
    assert d.bias < -0.1


def test_min_variance_schedule_golden() -> None:
    assert syn.min_variance_rates(2.49, 3) == pytest.approx((1.0, 0.49, 0.0))
    assert syn.min_variance_rates(4.0, 3) == (1.0, 1.0, 1.0)
    assert syn.min_variance_rates(1.0, 3) == (0.0, 0.0, 0.0)
    d = syn.distribution("vllm", 3, al=2.49)
    assert d.pmf == pytest.approx((0.0, 0.51, 0.49, 0.0))


def test_constant_conditional_rate_solves_its_equation() -> None:
    for al, k in [(2.49, 3), (3.39, 7), (1.01, 16), (16.5, 16)]:
        p = syn.constant_conditional_rate(al, k)
        assert sum(p**i for i in range(1, k + 1)) == pytest.approx(al - 1, abs=1e-10)
        d = syn.distribution("constant-conditional", k, al=al)
        assert all(c == pytest.approx(p) for c in d.conditional_rates if c is not None)


def test_explicit_rates_for_vllm() -> None:
    d = syn.distribution("vllm", 3, rates=[0.8, 0.5, 0.2])
    assert d.mean == pytest.approx(2.5)
    assert d.pmf == pytest.approx((0.2, 0.3, 0.3, 0.2))
    assert d.conditional_rates == pytest.approx((0.8, 0.625, 0.4))


def test_same_mean_is_not_same_distribution() -> None:
    rows = {d.scheme: d for d in syn.compare_schemes(3, al=2.49).schemes}
    assert rows["vllm"].pmf == pytest.approx(rows["trtllm"].pmf)
    assert rows["vllm"].pmf == pytest.approx(rows["sglang-match-expected"].pmf)
    assert rows["constant-conditional"].variance > 5 * rows["vllm"].variance
    assert rows["sglang-match-expected"].granularity == "per-batch"
    assert rows["sglang-match-expected"].batch_mean_std(64) == pytest.approx(rows["vllm"].std)
    assert rows["vllm"].batch_mean_std(64) == pytest.approx(rows["vllm"].std / 8)


CASES = [(al, k) for k in (1, 3, 7) for al in (1.0, 1.85, 2.49, 3.39, k + 1.0) if al <= k + 1]


@pytest.mark.parametrize("scheme", list(syn.SCHEMES))
@pytest.mark.parametrize(("al", "k"), CASES)
def test_sampler_matches_exact_pmf(scheme: str, al: float, k: int) -> None:
    dist = syn.distribution(scheme, k, al=al)
    sampler = syn.sampler(scheme, k, al=al, seed=1234)
    counts: Counter[int] = Counter()
    for _ in range(4000):
        for a in sampler.draw_step(3):
            counts[a + 1] += 1
    if sampler.granularity == "per-batch":
        # one draw per step: three identical values per step, so test the steps, not the copies
        counts = Counter({j: c // 3 for j, c in counts.items()})
    fit = goodness_of_fit(counts, dist.pmf)
    assert fit.p_value > 1e-4, (scheme, al, k, fit)


@given(al_and_k(), st.integers(min_value=0, max_value=2**32))
@settings(max_examples=40, deadline=None, derandomize=True)
def test_sampler_matches_pmf_property(case: tuple[float, int], seed: int) -> None:
    al, k = case
    for scheme in syn.SCHEMES:
        dist = syn.distribution(scheme, k, al=al)
        sampler = syn.sampler(scheme, k, al=al, seed=seed)
        counts = Counter(sampler.draw_step(1)[0] + 1 for _ in range(3000))
        assert goodness_of_fit(counts, dist.pmf).p_value > 1e-6, (scheme, al, k, seed)


def test_sampler_with_explicit_rates_matches_pmf() -> None:
    rates = [0.9, 0.7, 0.4, 0.1]
    dist = syn.distribution("vllm", 4, rates=rates)
    sampler = syn.sampler("vllm", 4, rates=rates, seed=7)
    counts = Counter(a + 1 for _ in range(5000) for a in sampler.draw_step(2))
    assert goodness_of_fit(counts, dist.pmf).p_value > 1e-4


def test_sampler_detects_a_wrong_distribution() -> None:
    """The statistical test can fail: vLLM draws do not fit constant-conditional's pmf."""
    wrong = syn.distribution("constant-conditional", 3, al=2.49)
    sampler = syn.sampler("vllm", 3, al=2.49, seed=3)
    counts = Counter(sampler.draw_step(1)[0] + 1 for _ in range(3000))
    assert goodness_of_fit(counts, wrong.pmf).p_value < 1e-6


def test_per_batch_draw_is_shared_and_per_request_is_not() -> None:
    batch = syn.sampler("sglang-match-expected", 3, al=2.5, seed=0)
    request = syn.sampler("vllm", 3, al=2.5, seed=0)
    for _ in range(50):
        assert len(set(batch.draw_step(16))) == 1
    assert any(len(set(request.draw_step(16))) > 1 for _ in range(50))
    assert batch.draw_step(0) == []


def test_samplers_are_reproducible_from_the_seed() -> None:
    for scheme in syn.SCHEMES:
        a = syn.sampler(scheme, 5, al=3.3, seed=99)
        b = syn.sampler(scheme, 5, al=3.3, seed=99)
        assert [a.draw_step(4) for _ in range(100)] == [b.draw_step(4) for _ in range(100)]


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"k": 3, "al": 4.5}, "target AL 4.5 is outside the allowed range [1, 4] for K=3"),
        ({"k": 3, "al": 0.9}, "target AL 0.9 is outside"),
        ({"k": 3, "al": math.nan}, "not a finite number"),
        ({"k": 0, "al": 1.0}, "K=0 is not allowed"),
        ({"k": 17, "al": 2.0}, "K=17 is not allowed"),
        ({"k": 3, "rates": [1.0, 0.5]}, "rates has 2 value(s); K=3 needs exactly 3"),
        ({"k": 3, "rates": [1.0, 1.2, 0.0]}, "rate p_2=1.2 is outside the allowed range [0, 1]"),
        ({"k": 3, "rates": [0.5, 0.6, 0.1]}, "non-increasing: p_2=0.6 > p_1=0.5"),
        ({"k": 3, "rates": [0.5, -0.1, 0.0]}, "rate p_2=-0.1 is outside"),
        ({"k": 3}, "give exactly one"),
        ({"k": 3, "al": 2.0, "rates": [1.0, 0.0, 0.0]}, "give exactly one"),
    ],
)
def test_invalid_targets_name_the_value(kwargs: dict[str, object], fragment: str) -> None:
    with pytest.raises(syn.SyntheticAcceptanceError) as info:
        syn.distribution("vllm", **kwargs)  # type: ignore[arg-type]
    assert fragment in str(info.value)


def test_rates_only_for_schemes_that_take_them() -> None:
    with pytest.raises(syn.SyntheticAcceptanceError, match="takes a target AL"):
        syn.distribution("trtllm", 3, rates=[1.0, 0.5, 0.0])
    comparison = syn.compare_schemes(3, rates=[1.0, 0.5, 0.0])
    assert [r.scheme for r in comparison.schemes] == ["vllm"]
    assert set(comparison.skipped) == set(syn.SCHEMES) - {"vllm"}


def test_unknown_scheme() -> None:
    with pytest.raises(
        syn.SyntheticAcceptanceError, match="unknown synthetic-acceptance scheme 'foo'; known: vllm"
    ):
        syn.get_scheme("foo")


def test_min_variance_al_recognises_schedules() -> None:
    assert syn.min_variance_al([1.0, 0.49, 0.0]) == pytest.approx(2.49)
    assert syn.min_variance_al([0.8, 0.5, 0.2]) is None
