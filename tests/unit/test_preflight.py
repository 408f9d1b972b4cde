"""The pre-flight's verdict on a burst (pure): what passes, what fails, and the causes it names."""

from __future__ import annotations

from dataclasses import replace

import pytest

from alflow.acceptance.stats import from_counters, from_steps
from alflow.acceptance.synthetic import distribution
from alflow.metrics.dialects import SpeculativeInfo
from alflow.metrics.prometheus import parse_exposition
from alflow.metrics.readers import get_dialect
from alflow.preflight import Expectation, judge

pytestmark = pytest.mark.unit

HINTS = ("an image too old", "the two-model path ran")


def test_synthetic_on_target_passes() -> None:
    dist = distribution("vllm", 3, al=2.5)
    stats = from_steps([1, 2] * 300, 3)  # the min-variance schedule of AL 2.5: 1 or 2 drafts accepted
    ok, message, expected, allowed = judge(stats, None, None, Expectation(3, dist, HINTS), "x")
    assert ok, message
    assert expected == 2.5
    assert allowed is not None
    assert "pre-flight passed for x: synthetic AL 2.5000 over 600 steps" in message


def test_a_knob_that_did_not_take_effect_fails_naming_the_causes() -> None:
    dist = distribution("vllm", 3, al=2.5)
    natural = from_steps([0, 1, 3, 2, 0, 1] * 100, 3)  # real acceptance: every length, mean 2.17
    ok, message, _, _ = judge(natural, None, None, Expectation(3, dist, HINTS), "vllm K=3")
    assert not ok
    assert message.startswith("pre-flight FAILED for vllm K=3: ")
    assert "achieved AL 2.1667" in message
    assert "Likely causes: an image too old; the two-model path ran" in message


def test_no_steps_fails_unless_the_drafter_may_propose_nothing() -> None:
    none = from_counters(0, 0, k=3)
    ok, message, _, _ = judge(none, None, None, Expectation(3, None, HINTS), "m1")
    assert not ok
    assert "no speculative steps observed" in message
    ok, message, _, _ = judge(none, None, None, Expectation(3, None, HINTS, drafts_optional=True), "ngram")
    assert ok
    assert "n-gram" in message
    ok, message, _, _ = judge(None, "aborted: the server died", None, Expectation(3), "x")
    assert not ok
    assert "the server died" in message


def test_k_mismatch_is_caught_from_the_counters_and_the_servers_info() -> None:
    five = from_counters(100, 150, draft_tokens=500, accepted_per_position=[60, 40, 25, 15, 10])
    ok, message, _, _ = judge(five, None, None, Expectation(3), "x")
    assert not ok
    assert "per-position counters have 5 positions, not K=3" in message
    three = from_counters(100, 150, draft_tokens=300, accepted_per_position=[70, 50, 30], k=3)
    info = SpeculativeInfo(enabled=True, method="MTP", num_tokens=4)
    ok, message, _, _ = judge(three, None, info, Expectation(3), "x")
    assert not ok
    assert "drafts 4 tokens per step, not K=3" in message
    ok, message, _, _ = judge(three, None, replace(info, num_tokens=3, enabled=False), Expectation(3), "x")
    assert not ok
    assert "speculation off" in message
    ok, _, _, _ = judge(three, None, replace(info, num_tokens=3), Expectation(3), "x")
    assert ok


def test_speculative_info_reads_tensorrt_llms_info_gauge() -> None:
    text = (
        "# HELP trtllm_speculative_config_info Speculative decoding configuration.\n"
        "# TYPE trtllm_speculative_config_info gauge\n"
        'trtllm_speculative_config_info{model_name="m",spec_enabled="true",spec_method="MTP",spec_num_tokens="3"} 1.0\n'
    )
    info = get_dialect("trtllm").speculative_info(parse_exposition(text, mono_ns=1))
    assert info is not None
    assert info.method == "MTP"
    assert info.num_tokens == 3
    assert get_dialect("vllm").speculative_info(parse_exposition(text, mono_ns=1)) is None


def test_the_method_the_server_reports_must_be_the_one_asked_for() -> None:
    three = from_counters(100, 150, draft_tokens=300, accepted_per_position=[70, 50, 30], k=3)
    info = SpeculativeInfo(enabled=True, method="DraftTarget", num_tokens=3)
    ok, message, _, _ = judge(three, None, info, Expectation(3, spec_method="MTP"), "x")
    assert not ok
    assert "runs speculative method 'DraftTarget', not 'MTP'" in message
    ok, _, _, _ = judge(three, None, replace(info, method="mtp"), Expectation(3, spec_method="MTP"), "x")
    assert ok


def test_tensorrt_llms_label_comes_from_its_recipe() -> None:
    from alflow.config import SpeculativeConfig, server_config
    from alflow.frameworks.recipes import speculative_label

    spec = SpeculativeConfig(method="dflash", k=4, draft_model="org/d")
    assert speculative_label(server_config(framework="trtllm", model="m", speculative=spec)) == "DFlash"
    assert (
        speculative_label(server_config(framework="sim", model="m", sim_dialect="trtllm", speculative=spec))
        == "DFlash"
    )
    assert speculative_label(server_config(framework="vllm", model="m", speculative=spec)) is None
