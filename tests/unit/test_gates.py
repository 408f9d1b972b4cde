"""AL gate and synthetic-acceptance audit verdicts."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from pydantic import ValidationError

from alflow.acceptance import stats
from alflow.acceptance import synthetic as syn
from alflow.config import GateTolerances
from alflow.gates import AccuracyDetails, AlGateDetails, AuditDetails, Verdict, al_gate, audit_synthetic

pytestmark = pytest.mark.unit


def _steps(scheme: str, al: float, k: int, n: int, seed: int = 1) -> stats.SpecStats:
    sampler = syn.sampler(scheme, k, al=al, seed=seed)
    return stats.from_steps([sampler.draw_step(1)[0] for _ in range(n)], k)


def test_al_gate_passes_and_fails_naming_al_value_and_threshold() -> None:
    tol = GateTolerances(abs_tol=0.05, rel_tol=0.03, use_ci="point")
    good = al_gate(_steps("vllm", 2.5, 3, 4000), 2.5, tol, subject="vllm mtp K=3")
    assert good.passed
    bad = al_gate(_steps("vllm", 2.2, 3, 4000), 2.5, tol, subject="sglang mtp K=3")
    assert not bad.passed
    assert "AL gate FAILED for sglang mtp K=3: AL 2.2" in bad.message
    assert "< threshold 2.4250" in bad.message
    assert "reference 2.5000 - max(0.05, 0.03 x 2.5000)" in bad.message


def test_al_gate_upper_bound_mode_gives_the_benefit_of_the_doubt() -> None:
    few = _steps("constant-conditional", 2.42, 3, 200, seed=4)  # slightly low, noisy
    assert few.al is not None
    assert few.ci is not None
    threshold = GateTolerances(use_ci="point").al_threshold(2.5)
    assert few.ci.low < threshold < few.ci.high
    assert al_gate(few, 2.5, GateTolerances(use_ci="upper"), subject="x").passed
    point = al_gate(few, 2.5, GateTolerances(use_ci="point"), subject="x")
    assert point.passed is (few.al >= threshold)
    confidently_low = al_gate(_steps("vllm", 2.0, 3, 4000), 2.5, GateTolerances(use_ci="upper"), subject="x")
    assert not confidently_low.passed
    assert "upper CI bound of AL" in confidently_low.message


def test_al_gate_without_steps() -> None:
    verdict = al_gate(stats.from_counters(0, 0), 2.5, GateTolerances(), subject="x")
    assert not verdict.passed
    assert "no speculative steps observed" in verdict.message


@pytest.mark.parametrize("scheme", ["vllm", "trtllm", "constant-conditional"])
def test_audit_passes_on_target(scheme: str) -> None:
    dist = syn.distribution(scheme, 3, al=2.49)
    verdict = audit_synthetic(_steps(scheme, 2.49, 3, 5000), dist, subject="point")
    assert verdict.passed, verdict.message
    assert isinstance(verdict.details, AuditDetails)
    assert verdict.details.fit_p_value is not None
    assert verdict.details.fit_p_value > 1e-9


def test_audit_fails_off_target_and_on_wrong_shape() -> None:
    dist = syn.distribution("vllm", 3, al=2.49)
    off = audit_synthetic(_steps("vllm", 2.30, 3, 5000), dist, subject="c=64")
    assert not off.passed
    assert "achieved AL 2.29" in off.message
    assert "expected 2.4900" in off.message
    shape = audit_synthetic(_steps("constant-conditional", 2.49, 3, 5000), dist, subject="c=64")
    assert not shape.passed
    assert "does not fit scheme vllm" in shape.message


def test_steps_with_fewer_than_k_drafts_flag_the_shape_test_and_never_fail_it_alone() -> None:
    dist = syn.distribution("vllm", 3, al=2.49)  # min-variance: every full step accepts 1 or 2 of 3 drafts
    sampler = syn.sampler("vllm", 3, al=2.49, seed=4)
    full = [sampler.draw_step(1)[0] for _ in range(5000)]
    # 30 steps that carried one draft (an n-gram partial match) and accepted none: length 1, a cell of
    # probability 0 under the K-draft pmf
    pooled = stats.from_steps([*full, *([0] * 30)], 3)
    claimed = audit_synthetic(pooled, dist, subject="c=8")  # as if every step had carried K drafts
    assert not claimed.passed
    assert "does not fit scheme vllm" in claimed.message
    short = replace(pooled, draft_tokens=3 * 5000 + 30)  # what the counters say: drafts < K x steps
    verdict = audit_synthetic(short, dist, subject="c=8")
    assert verdict.passed, verdict.message
    assert "shape test not judged: 0.4% of the draft slots were empty" in verdict.message
    assert isinstance(verdict.details, AuditDetails)
    assert verdict.details.short_draft_share == pytest.approx(60 / 15090)
    off = audit_synthetic(replace(stats.from_steps([0] * 300, 3), draft_tokens=300), dist, subject="c=8")
    assert not off.passed  # the AL is still judged: short drafts excuse the shape, never an AL off target
    assert "achieved AL 1.0000 differs" in off.message


def test_with_counts_by_draft_length_the_full_k_steps_are_judged_short_drafts_pass_and_a_wrong_scheme_fails() -> (
    None
):
    """vLLM's ``detailed`` per-step arrays say each step's drafts: the shape test takes the full-K steps only."""
    dist = syn.distribution("vllm", 3, al=2.49)
    sampler = syn.sampler("vllm", 3, al=2.49, seed=4)
    full = [sampler.draw_step(1)[0] for _ in range(5000)]
    full_k = stats.from_steps(full, 3).histogram
    pooled = replace(stats.from_steps([*full, *([0] * 30)], 3), full_k_histogram=full_k)
    verdict = audit_synthetic(pooled, dist, subject="c=8")
    assert verdict.passed, verdict.message
    assert (
        "shape test on the 5000 steps that carried all K drafts; 30 of 5030 steps (0.6%) carried fewer"
        in (verdict.message)
    )
    assert isinstance(verdict.details, AuditDetails)
    assert verdict.details.fit_p_value is not None
    assert verdict.details.fit_p_value > 1e-8  # judged, not waived
    wrong_sampler = syn.sampler("constant-conditional", 3, al=2.49, seed=4)
    wrong = [wrong_sampler.draw_step(1)[0] for _ in range(5000)]
    wrong_pooled = replace(
        stats.from_steps([*wrong, *([0] * 30)], 3), full_k_histogram=stats.from_steps(wrong, 3).histogram
    )
    failed = audit_synthetic(wrong_pooled, dist, subject="c=8")
    assert not failed.passed  # short drafts no longer hide a wrong scheme
    assert "does not fit scheme vllm" in failed.message


def test_audit_flags_a_biased_scheme() -> None:
    dist = syn.distribution("sglang-multinomial", 3, al=3.39)
    sampler = syn.sampler("sglang-multinomial", 3, al=3.39, seed=2)
    observed = stats.from_steps([sampler.draw_step(1)[0] for _ in range(5000)], 3)
    verdict = audit_synthetic(observed, dist, subject="sglang")
    assert not verdict.passed
    assert "is biased" in verdict.message


def test_every_gates_verdict_reads_back_from_its_stored_form() -> None:
    tol = GateTolerances()
    al = al_gate(_steps("vllm", 2.5, 3, 4000), 2.5, tol, subject="vllm mtp K=3")
    audit = audit_synthetic(_steps("vllm", 2.5, 3, 4000), syn.distribution("vllm", 3, al=2.5), subject="s")
    for verdict in (al, audit):
        stored = json.loads(json.dumps(verdict.model_dump(mode="json")))
        back = Verdict.model_validate(stored)
        assert type(back.details) is type(verdict.details)
        assert back.model_dump(mode="json") == stored  # the stored form is a fixed point
        assert back == verdict
    assert isinstance(al.details, AlGateDetails)
    assert al.details.ci is not None
    # an older or damaged entry: what cannot be read becomes None, the verdict itself stays
    old = Verdict.model_validate({"gate": "al", "passed": False, "message": "AL gate FAILED", "al": 2.1})
    assert (old.gate, old.passed, old.details) == ("al", False, None)
    other = Verdict.model_validate({"gate": "custom", "passed": True, "message": "ok", "x": 1})
    assert other == Verdict(gate="custom", passed=True, message="ok")
    with pytest.raises(ValidationError, match="a verdict needs a gate name and passed"):
        Verdict.model_validate({"passed": True, "message": "no gate"})


def test_the_audit_expects_the_cut_of_counters_that_truncate_the_last_step() -> None:
    """SGLang's counters drop what a request's last verify step accepted past max_tokens: the audit expects it."""
    from dataclasses import replace

    from alflow.acceptance.stats import from_counters
    from alflow.acceptance.synthetic import distribution
    from alflow.gates import audit_synthetic

    dist = distribution("sglang-match-expected", 3, al=2.5)  # lengths 2 and 3, half each
    assert dist.mean_overshoot == pytest.approx((6.5 - 2.5) / 5.0)  # (E[L^2] - E[L]) / (2 E[L]) = 0.8
    steps, requests = 100_000, 4_000  # 25 steps per request
    low = from_counters(steps, steps * 1.5 - requests * 0.8)  # AL 2.468: the expected cut, 0.032 below
    assert audit_synthetic(low, dist, subject="x").passed is False  # read as exact, it fails
    verdict = audit_synthetic(replace(low, truncated_requests=requests), dist, subject="x")
    assert verdict.passed, verdict.message
    assert verdict.details is not None
    assert verdict.details.truncation == pytest.approx(0.032)
    # a fixed length (variance 0): the cut is set by the output length modulo L, anywhere in 0..L-1
    fixed = distribution("sglang-match-expected", 3, al=3.0)
    for cut in (0.0, 2.0):
        stats = from_counters(steps, steps * 2.0 - requests * cut)
        assert audit_synthetic(replace(stats, truncated_requests=requests), fixed, subject="x").passed


def test_a_stored_verdict_with_one_unreadable_field_keeps_the_rest_of_its_details() -> None:
    stored = {
        "gate": "gsm8k-accuracy",
        "passed": False,
        "message": "m",
        "threshold": 0.9,
        "scores": {"strict": None},
    }
    verdict = Verdict.model_validate(stored)
    assert isinstance(verdict.details, AccuracyDetails)
    assert (verdict.details.threshold, verdict.details.scores) == (0.9, {})
