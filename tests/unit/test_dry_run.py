"""The dry run's plan (alflow.methods.dry_run): every server a flow would start, built by the real run's code."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from alflow.config import BenchmarkParams, CalibrateParams, GateParams, SweepParams
from alflow.errors import RecipeError
from alflow.frameworks.versions import CapabilityError
from alflow.methods.dry_run import Plan, plan_of, unit_params

pytestmark = pytest.mark.unit

MODEL = {"id": "org/target", "sampling_thinking_off": {"temperature": 0.0, "max_tokens": 64}}
DOCKER = {"runner": {"kind": "docker", "secrets": ["HF_TOKEN"]}, "results_root": "results"}


def m2(server: dict[str, Any], **fields: Any) -> BenchmarkParams:
    data: dict[str, Any] = {"model": MODEL, "k": 3, "target_al": 2.78, "server": server, "placement": DOCKER}
    return BenchmarkParams.model_validate(data | fields)


SGLANG_DFLASH = {"framework": "sglang", "model": "org/target", "image": "lmsysorg/sglang:v0.5.23"}


def test_an_sglang_dflash_m2_plan_shows_the_forced_length_the_gate_and_the_secret_by_name() -> None:
    params = m2(
        SGLANG_DFLASH,
        method="dflash",
        draft_model="org/dflash-drafter",
        concurrencies=[4, 16],
    )
    plan = plan_of("m2", params)
    (server,) = plan.servers
    text = plan.text()
    assert "SGLANG_SIMULATE_ACC_LEN=2.78" in text
    assert "--speculative-algorithm DFLASH" in text
    assert "image: lmsysorg/sglang:v0.5.23" in text
    assert "PR #32595" in text
    assert "passes on the image tag (v0.5.23)" in text
    assert "synthetic target AL 2.7800 (given" in text
    assert "concurrencies 4, 16" in text
    assert "secret (passed by name, value never read): HF_TOKEN" in text
    assert server.step == "m2"
    assert server.runner == "docker"
    assert plan.to_dict()["dry_run"] is True


def test_a_trtllm_draft_target_plan_shows_the_fractional_forced_value_in_env_and_options_file() -> None:
    server = {
        "framework": "trtllm",
        "model": "org/target",
        "image": "nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc19",
    }
    plan = plan_of("m2", m2(server, method="draft_model", draft_model="org/small"))
    text = plan.text()
    assert "TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS=1.78" in text
    assert "decoding_type: DraftTarget" in text  # the options file, shown in full
    assert "PR #11758" in text


def test_every_refusal_of_a_real_run_is_the_same_refusal_in_the_plan() -> None:
    ngram = {
        "framework": "trtllm",
        "model": "org/target",
        "image": "nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc19",
    }
    with pytest.raises(RecipeError, match=r"two-model path \(method ngram\)"):
        plan_of("m2", m2(ngram, method="ngram"))
    compaction = {
        "framework": "vllm",
        "model": "org/target",
        "extra_env": {"VLLM_KIMI_K3_SYNTHETIC_VERIFY_COMPACTION": "1"},
    }
    with pytest.raises(RecipeError, match="VLLM_KIMI_K3_SYNTHETIC_VERIFY_COMPACTION"):
        plan_of("m2", m2(compaction))
    with pytest.raises(CapabilityError, match=r"older than v0\.5\.19"):
        plan_of(
            "m2",
            m2(SGLANG_DFLASH | {"image": "lmsysorg/sglang:v0.5.16"}, method="dflash", draft_model="org/d"),
        )
    routing = SGLANG_DFLASH | {"extra_env": {"SGLANG_SIMULATE_ROUND_ROBIN_EXPERTS": "1"}}
    with pytest.raises(RecipeError, match="SGLANG_SIMULATE_ROUND_ROBIN_EXPERTS='1': refused"):
        plan_of("m2", m2(routing))
    relaxed = SGLANG_DFLASH | {"extra_args": ["--speculative-accept-threshold-single", "0.7"]}
    gate = GateParams.model_validate(
        {
            "model": MODEL,
            "k": 3,
            "server": relaxed,
            "placement": DOCKER,
            "reference_path": "references/examples.yaml",
        }
        | {"reference_model": "Qwen3.5", "thinking": "on"}
    )
    with pytest.raises(RecipeError, match="refused with real acceptance"):
        plan_of("m1", gate)
    assert plan_of("m2", m2(relaxed)).servers  # synthetic acceptance decides instead of the threshold


def test_m0_plans_every_model_and_k_and_a_sweep_its_m1_and_m2_per_k() -> None:
    sim = {"framework": "sim", "model": "org/target", "extra_args": ["--time-scale", "0"]}
    process = {"runner": {"kind": "process"}, "results_root": "results"}
    m0 = CalibrateParams.model_validate(
        {
            "models": [MODEL, MODEL | {"id": "org/other"}],
            "ks": [1, 3],
            "thinking": ["off", "on"],
            "server": sim,
            "placement": process,
            "reference_path": "results/reference.yaml",
        }
    )
    plan = plan_of("m0", m0)
    assert [s.point.split(",")[0] for s in plan.servers] == ["model org/target"] * 2 + ["model org/other"] * 2
    assert [" K=1," in s.point for s in plan.servers] == [True, False, True, False]
    # M0 measures a model that does not reason with thinking off only, as the flow does
    assert all("thinking off; real acceptance" in s.point for s in plan.servers)
    assert all(s.server.synthetic is None for s in plan.servers)
    reference = {"reference_path": "references/examples.yaml", "reference_model": "Qwen3.5", "thinking": "on"}
    gate = GateParams.model_validate(
        {"model": MODEL, "k": 3, "server": sim, "placement": process} | reference
    )
    benchmark = m2(sim, placement=process, target_al=None, **reference)
    sweep = SweepParams.model_validate(
        {"ks": [1, 2], "gate": gate.model_dump(), "benchmark": benchmark.model_dump()}
    )
    assert [(type(u).__name__, u.k) for u in unit_params(sweep)] == [
        ("GateParams", 1),
        ("BenchmarkParams", 1),
        ("GateParams", 2),
        ("BenchmarkParams", 2),
    ]
    steps = plan_of("sweep", sweep).servers
    assert [s.step for s in steps] == ["m1", "m2", "m1", "m2"]
    assert all("(reference references/examples.yaml" in s.point for s in steps if s.step == "m2")


def test_the_markdown_fence_outlasts_any_backtick_run_in_user_text() -> None:
    server = {
        "framework": "sim",
        "model": "org/target",
        "extra_args": ["--time-scale", "0", "--seed", "7"],
    }
    plan = plan_of("m2", m2(server, placement={"runner": {"kind": "process"}, "results_root": "results"}))
    plan = Plan(
        plan.flow, tuple(replace(s, point=s.point + " a````b") for s in plan.servers)
    )  # a user's string
    markdown = plan.markdown()
    assert markdown.count("`````text\n") == 1  # one block, fenced by five: the text's longest run is four
    assert markdown.rstrip().endswith("`````")


def test_slurm_runs_its_own_image_and_an_external_servers_key_is_a_secret_by_name() -> None:
    vllm = {"framework": "vllm", "model": "org/target", "image": "vllm/vllm-openai:v0.33.0"}
    slurm = {
        "runner": {"kind": "slurm", "container_image": "registry.local/vllm:v0.33.0"},
        "results_root": "r",
    }
    (server,) = plan_of("m2", m2(vllm, placement=slurm)).servers
    assert server.server.image == "registry.local/vllm:v0.33.0"
    bare = {"runner": {"kind": "slurm"}, "results_root": "r"}
    (server,) = plan_of("m2", m2(vllm, placement=bare)).servers
    assert server.server.image is None  # a bare program: no image, so no tag judges the gates
    assert all("no image" in g.verdict for g in server.gates)
    external = {
        "runner": {
            "kind": "external",
            "base_url": "http://10.0.0.5:8000",
            "dialect": "vllm",
            "api_key_env": "VLLM_API_KEY",
        },
        "results_root": "r",
    }
    (server,) = plan_of("m2", m2(vllm, placement=external)).servers
    assert "VLLM_API_KEY" in server.secrets
    assert server.runner.startswith("external server at http://10.0.0.5:8000")
