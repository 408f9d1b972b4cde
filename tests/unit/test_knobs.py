"""Per-framework rendering of synthetic-acceptance knobs."""

from __future__ import annotations

import pytest

from alflow.acceptance import synthetic as syn
from alflow.acceptance.synthetic import SyntheticAcceptanceError
from alflow.frameworks.recipe_kit import render_knobs
from alflow.frameworks.registry import frameworks
from alflow.util.rows import dump_row

pytestmark = pytest.mark.unit


def test_trtllm_value_is_al_minus_one() -> None:
    knobs = render_knobs("trtllm", 3, al=2.78)
    assert knobs.env == {"TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS": "1.78"}
    assert dump_row(knobs)["expected"]["mean_al"] == 2.78
    assert render_knobs("trtllm", 3, al=3.0).env["TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS"] == "2"


def test_trtllm_two_model_path_refuses_fractional_values() -> None:
    with pytest.raises(SyntheticAcceptanceError, match=r"two-model path \(method ngram\).*value 1.5"):
        render_knobs("trtllm", 3, al=2.5, method="ngram")
    with pytest.raises(SyntheticAcceptanceError, match=r"method draft_model, two-model mode requested"):
        render_knobs("trtllm", 3, al=2.5, method="draft_model", two_model=True)
    # DraftTarget is a one-engine external drafter by default (PR #11758): the float parser reads its fraction
    assert render_knobs("trtllm", 3, al=2.5, method="draft_model").env == {
        "TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS": "1.5"
    }
    with pytest.raises(SyntheticAcceptanceError, match=r"method eagle3, two-model mode requested"):
        render_knobs("trtllm", 3, al=2.5, method="eagle3", two_model=True)
    assert render_knobs("trtllm", 3, al=3.0, method="draft_model").env
    assert render_knobs("trtllm", 3, al=2.5, method="mtp").env


@pytest.mark.parametrize("method", ["mtp", "draft_model"])
def test_trtllm_refuses_target_al_1_because_value_0_means_off(method: str) -> None:
    with pytest.raises(SyntheticAcceptanceError, match=r"cannot force AL 1: .* reads 0 as 'off'"):
        render_knobs("trtllm", 3, al=1.0, method=method)
    with pytest.raises(SyntheticAcceptanceError, match="cannot force AL 1"):
        render_knobs("trtllm", 3, rates=[0.0, 0.0, 0.0])
    # the other frameworks force AL 1 with a real mechanism (vLLM rates of 0, SGLang's length 1)
    assert render_knobs("vllm", 3, al=1.0).speculative_config is not None
    assert render_knobs("sglang", 3, al=1.0).env
    assert render_knobs("trtllm", 3, al=1.01, method="mtp").env == {
        "TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS": "0.01"
    }


def test_vllm_fragment_and_rates() -> None:
    knobs = render_knobs("vllm", 3, al=2.49)
    assert knobs.speculative_config == {
        "rejection_sample_method": "synthetic",
        "synthetic_acceptance_length": 2.49,
    }
    assert dump_row(knobs)["rates"] == [1.0, 0.49, 0.0]
    explicit = render_knobs("vllm", 3, rates=[0.9, 0.6, 0.3])
    assert explicit.speculative_config["synthetic_acceptance_rates"] == [0.9, 0.6, 0.3]
    assert "synthetic_acceptance_length" not in explicit.speculative_config


def test_sglang_defaults_and_multinomial_warning() -> None:
    knobs = render_knobs("sglang", 3, al=3.39)
    assert knobs.env == {
        "SGLANG_SIMULATE_ACC_LEN": "3.39",
        "SGLANG_SIMULATE_ACC_METHOD": "match-expected",
        "SGLANG_SIMULATE_ACC_TOKEN_MODE": "real-draft-token",
    }
    assert knobs.scheme == "sglang-match-expected"
    assert not any("bias" in w for w in knobs.warnings)
    multi = render_knobs("sglang", 3, al=3.39, scheme="sglang-multinomial")
    assert multi.env["SGLANG_SIMULATE_ACC_METHOD"] == "multinomial"
    assert any("3.2401" in w and "bias" in w for w in multi.warnings)


def test_rates_for_single_value_frameworks() -> None:
    assert render_knobs("sglang", 3, rates=[1.0, 0.49, 0.0]).env["SGLANG_SIMULATE_ACC_LEN"] == "2.49"
    assert (
        render_knobs("trtllm", 3, rates=[1.0, 0.49, 0.0]).env["TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS"]
        == "1.49"
    )
    with pytest.raises(SyntheticAcceptanceError, match="not a minimum-variance schedule"):
        render_knobs("sglang", 3, rates=[0.9, 0.6, 0.3])
    with pytest.raises(SyntheticAcceptanceError, match="not a minimum-variance schedule"):
        render_knobs("trtllm", 3, rates=[0.9, 0.6, 0.3])


def test_scheme_the_framework_cannot_realise() -> None:
    with pytest.raises(SyntheticAcceptanceError, match="'vllm' cannot realise scheme 'sglang-multinomial'"):
        render_knobs("vllm", 3, al=2.0, scheme="sglang-multinomial")
    with pytest.raises(SyntheticAcceptanceError, match="unknown framework 'tgi'"):
        render_knobs("tgi", 3, al=2.0)


@pytest.mark.parametrize("framework", sorted(f.name for f in frameworks() if f.knobs is not None))
def test_every_framework_validates_the_target(framework: str) -> None:
    with pytest.raises(SyntheticAcceptanceError, match=r"target AL 9\.0 is outside the allowed range"):
        render_knobs(framework, 3, al=9.0)


def test_stored_knobs_and_distribution_are_the_json_of_the_previous_release() -> None:
    """pydantic stores them (:func:`dump_row`) as the hand-written ``to_dict`` did: rounded, pmf keyed by length."""
    assert dump_row(render_knobs("vllm", 3, al=2.5)) == {
        "framework": "vllm", "k": 3, "scheme": "vllm", "env": {}, "warnings": [],
        "speculative_config": {"rejection_sample_method": "synthetic", "synthetic_acceptance_length": 2.5},
        "expected": {
            "mean_al": 2.5, "bias": 0.0, "variance": 0.25, "granularity": "per-request",
            "pmf": {"1": 0.0, "2": 0.5, "3": 0.5, "4": 0.0},
        },
        "rates": [1.0, 0.5, 0.0],
    }  # fmt: skip
    assert dump_row(syn.distribution("vllm", 5, al=3.3)) == {
        "scheme": "vllm", "k": 5, "target": "AL 3.3", "target_al": 3.3, "mean_al": 3.3, "bias": 0.0,
        "variance": 0.21, "std": 0.458257569496, "granularity": "per-request",
        "pmf": {"1": 0.0, "2": 0.0, "3": 0.7, "4": 0.3, "5": 0.0, "6": 0.0},
        "per_position_rates": [1.0, 1.0, 0.3, 0.0, 0.0], "conditional_rates": [1.0, 1.0, 0.3, 0.0, None],
    }  # fmt: skip
    compared = dump_row(syn.compare_schemes(4, rates=[0.9, 0.5, 0.3, 0.0]))
    assert (compared["k"], compared["target"], [s["scheme"] for s in compared["schemes"]]) == (
        4, "rates [0.9, 0.5, 0.3, 0]", ["vllm"],
    )  # fmt: skip
    assert compared["skipped"]["trtllm"] == "takes a target AL, not explicit rates"
