"""Recipes: pinned command lines and environments per framework (DOMAIN.md sections 3 and 8)."""

from __future__ import annotations

import json
import sys
from dataclasses import replace

import pytest
import yaml
from pydantic import ValidationError

from alflow.config import Parallelism, ServerConfig, SpeculativeConfig, SyntheticAcceptance, server_config
from alflow.frameworks.launch import DEFAULT_FILES_DIR, REDACTED, Launch, LaunchFile, free_port
from alflow.frameworks.recipe_kit import image_tag
from alflow.frameworks.recipes import build_launch, check_install, get_recipe, recipes
from alflow.frameworks.sglang.knobs import SGLANG_LEN_ENV, SGLANG_METHOD_ENV, SGLANG_TOKEN_MODE_ENV
from alflow.frameworks.sglang.names import SGLANG_METRICS_PATH
from alflow.frameworks.trtllm.knobs import TRTLLM_ENV
from alflow.frameworks.trtllm.names import TRTLLM_METRICS_PATH
from alflow.frameworks.trtllm.recipe import TRTLLM_OPTIONS_FILE
from alflow.frameworks.versions import FrameworkVersion
from alflow.frameworks.vllm.names import VLLM_METRICS_PATH
from alflow.frameworks.vllm.recipe import VLLM_SYNTHETIC_ONLY_ENV
from alflow.plugins import BUILTIN
from alflow_infra.errors import RecipeError
from alflow_infra.runners.base import inherited_env
from tests.simconfig import DIALECTS

pytestmark = pytest.mark.unit

MTP3 = SpeculativeConfig(method="mtp", k=3)
SYN = SyntheticAcceptance(target_al=2.5)
EAGLE3_5 = SpeculativeConfig(method="eagle3", k=5, draft_model="org/eagle3-drafter")


def cfg(**kwargs: object) -> ServerConfig:
    values: dict[str, object] = {"model": "org/model", "port": 8000}
    values.update(kwargs)
    return server_config(values)


def spec_config(launch: Launch) -> dict[str, object]:
    i = launch.argv.index("--speculative-config")
    out: dict[str, object] = json.loads(launch.argv[i + 1])
    return out


def trtllm_options(launch: Launch) -> dict[str, object]:
    (options,) = launch.files
    assert options.name == TRTLLM_OPTIONS_FILE
    out: dict[str, object] = yaml.safe_load(options.content)
    return out


# --- vLLM ---------------------------------------------------------------------------------------------


def test_vllm_mtp_k3_real_command_line() -> None:
    launch = build_launch(cfg(framework="vllm", speculative=MTP3, parallelism=Parallelism(tp=8)))
    assert launch.argv == (
        "vllm",
        "serve",
        "org/model",
        "--host",
        "127.0.0.1",  # no host in the config: loopback
        "--port",
        "8000",
        "--speculative-config",
        '{"method":"mtp","num_speculative_tokens":3}',
        "--no-enable-prefix-caching",
        "--tensor-parallel-size",
        "8",
    )
    assert dict(launch.env) == {}
    assert launch.synthetic is None
    assert launch.dialect == "vllm"
    assert launch.metrics_path == VLLM_METRICS_PATH
    assert launch.health_path == "/health"
    assert launch.image is not None
    assert launch.image.startswith("vllm/vllm-openai:")


def test_vllm_eagle3_k5_synthetic_324() -> None:
    launch = build_launch(
        cfg(framework="vllm", speculative=EAGLE3_5, synthetic=SyntheticAcceptance(target_al=3.24))
    )
    assert spec_config(launch) == {
        "method": "eagle3",
        "num_speculative_tokens": 5,
        "model": "org/eagle3-drafter",
        "rejection_sample_method": "synthetic",
        "synthetic_acceptance_length": 3.24,
    }
    assert launch.env == {}
    # the default image's tag (latest) says no version: the release gate can only warn, about that image
    assert launch.warnings == ()
    assert len(launch.image_warnings) == 1
    assert "vLLM version unknown (image 'vllm/vllm-openai:latest')" in launch.image_warnings[0]
    assert "v0.20.0" in launch.image_warnings[0]
    assert launch.provenance().warnings == list(
        launch.image_warnings
    )  # where the run log and report read them
    assert launch.synthetic is not None
    expected = launch.synthetic["expected"]
    assert isinstance(expected, dict)
    assert expected["mean_al"] == pytest.approx(3.24)
    # the exact command is recorded in the provenance
    prov = launch.provenance()
    assert prov.argv == list(launch.argv)
    assert "synthetic_acceptance_length" in str(prov.command)


def test_vllm_rates_and_ngram_and_parallelism() -> None:
    launch = build_launch(
        cfg(
            framework="vllm",
            speculative=SpeculativeConfig(method="ngram", k=3, prompt_lookup_min=2, prompt_lookup_max=4),
            synthetic=SyntheticAcceptance(rates=(0.9, 0.5, 0.2)),
            parallelism=Parallelism(tp=2, pp=2, dp=2, ep=4),
            max_model_len=8192,
            enable_prefix_caching=True,
            revision="abc123",
            extra_args=("--gpu-memory-utilization", "0.9"),
        )
    )
    sc = spec_config(launch)
    assert any("fewer than K drafts" in w for w in launch.warnings)
    assert sc["synthetic_acceptance_rates"] == [0.9, 0.5, 0.2]
    assert "synthetic_acceptance_length" not in sc
    assert (sc["prompt_lookup_min"], sc["prompt_lookup_max"]) == (2, 4)
    argv = list(launch.argv)
    assert "--enable-prefix-caching" in argv
    assert "--no-enable-prefix-caching" not in argv
    for flag, value in [
        ("--pipeline-parallel-size", "2"),
        ("--data-parallel-size", "2"),
        ("--max-model-len", "8192"),
        ("--revision", "abc123"),
    ]:
        assert argv[argv.index(flag) + 1] == value
    assert "--enable-expert-parallel" in argv
    assert argv[-2:] == ["--gpu-memory-utilization", "0.9"]


def test_vllm_refuses_expert_parallel_size_it_cannot_honour() -> None:
    with pytest.raises(RecipeError, match="TP x DP = 2"):
        build_launch(cfg(framework="vllm", parallelism=Parallelism(tp=2, ep=8)))


# --- SGLang -------------------------------------------------------------------------------------------


def test_sglang_nextn_synthetic() -> None:
    launch = build_launch(
        cfg(
            framework="sglang",
            image="lmsysorg/sglang:v0.5.16-cu129",
            speculative=MTP3,
            synthetic=SyntheticAcceptance(target_al=2.5),
            parallelism=Parallelism(tp=8),
            port=30000,
        )
    )
    assert launch.argv == (
        "python3",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "org/model",
        "--host",
        "127.0.0.1",  # no host in the config: loopback
        "--port",
        "30000",
        "--tp-size",
        "8",
        "--speculative-algorithm",
        "NEXTN",
        "--speculative-num-steps",
        "3",
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        "4",
        "--enable-metrics",
        "--disable-radix-cache",
    )
    assert launch.env == {
        SGLANG_LEN_ENV: "2.5",
        SGLANG_METHOD_ENV: "match-expected",
        SGLANG_TOKEN_MODE_ENV: "real-draft-token",
    }
    assert launch.metrics_path == SGLANG_METRICS_PATH
    assert launch.dialect == "sglang"
    # the per-batch draw warning from the knob renderer travels with the launch
    assert any("whole batch" in w for w in launch.warnings)


def test_sglang_eagle3_real_with_drafter_and_ep() -> None:
    launch = build_launch(
        cfg(framework="sglang", speculative=EAGLE3_5, parallelism=Parallelism(tp=4, ep=4), max_model_len=4096)
    )
    argv = list(launch.argv)
    assert argv[argv.index("--speculative-algorithm") + 1] == "EAGLE3"
    assert argv[argv.index("--speculative-draft-model-path") + 1] == "org/eagle3-drafter"
    assert argv[argv.index("--speculative-num-draft-tokens") + 1] == "6"
    assert argv[argv.index("--ep-size") + 1] == "4"
    assert argv[argv.index("--context-length") + 1] == "4096"
    assert launch.env == {}


@pytest.mark.parametrize("image", ["lmsysorg/sglang:v0.5.15", "lmsysorg/sglang:v0.4.9-cu126", "sglang:0.5.2"])
def test_sglang_token_mode_on_old_image_is_refused(image: str) -> None:
    with pytest.raises(RecipeError, match=r"older than v0\.5\.16.*silent no-op"):
        build_launch(
            cfg(
                framework="sglang",
                image=image,
                speculative=MTP3,
                synthetic=SyntheticAcceptance(target_al=2.0),
            )
        )


@pytest.mark.parametrize("framework", DIALECTS)
def test_a_launch_from_an_installed_program_has_no_image_and_no_gate_on_its_tag(framework: str) -> None:
    """The process runner's view (``check_install`` with no known prefix): the recipe's default image was not used,
    so neither it nor its tag's "version unknown" warnings reach the provenance (the live version is checked)."""
    launch = build_launch(
        cfg(framework=framework, speculative=MTP3, synthetic=SyntheticAcceptance(target_al=2.0))
    )
    assert launch.image is not None
    assert any("version unknown" in w for w in launch.provenance().warnings)  # from an image: still warned
    process = check_install(launch, None)
    assert process.image is None
    assert process.image_warnings == ()
    unknown = [w for w in process.provenance().warnings if "version unknown" in w]
    # a framework with no version endpoint (ATOM) cannot have its live version checked either: the warning stays
    assert bool(unknown) == (not launch.version_paths)
    assert process.provenance().image is None
    assert process.argv == launch.argv


def test_vllms_synthetic_only_verify_compaction_is_refused_with_synthetic_acceptance(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    shortcut = {VLLM_SYNTHETIC_ONLY_ENV: "1"}
    with pytest.raises(
        RecipeError, match=r"VLLM_KIMI_K3_SYNTHETIC_VERIFY_COMPACTION='1': refused with synthetic"
    ):
        build_launch(cfg(framework="vllm", speculative=MTP3, synthetic=SYN, extra_env=shortcut))
    off = build_launch(
        cfg(framework="vllm", speculative=MTP3, synthetic=SYN, extra_env={VLLM_SYNTHETIC_ONLY_ENV: "0"})
    )
    assert off.env[VLLM_SYNTHETIC_ONLY_ENV] == "0"
    real = build_launch(
        cfg(framework="vllm", speculative=MTP3, extra_env=shortcut)
    )  # real acceptance: no effect
    assert real.env[VLLM_SYNTHETIC_ONLY_ENV] == "1"
    monkeypatch.setenv(VLLM_SYNTHETIC_ONLY_ENV, "1")  # a stray switch in the shell never reaches a server
    monkeypatch.setenv("ALFLOW_TEST_KEPT", "1")
    assert VLLM_SYNTHETIC_ONLY_ENV not in inherited_env()
    assert inherited_env()["ALFLOW_TEST_KEPT"] == "1"


def test_the_sims_image_stays_its_label_when_run_as_a_process() -> None:
    launch = build_launch(cfg(framework="sim", image="alflow-sim:nightly-1"))
    assert check_install(launch, None).image == "alflow-sim:nightly-1"  # a nightly's series is its image


@pytest.mark.parametrize(
    "image", ["lmsysorg/sglang:latest", "lmsysorg/sglang", "lmsysorg/sglang:dev-nightly"]
)
def test_sglang_token_mode_on_unknown_version_warns(image: str) -> None:
    launch = build_launch(
        cfg(framework="sglang", image=image, speculative=MTP3, synthetic=SyntheticAcceptance(target_al=2.0))
    )
    assert any("version unknown" in w and "v0.5.16" in w for w in launch.image_warnings)


def test_sglang_without_synthetic_needs_only_the_verify_step_counter() -> None:
    launch = build_launch(cfg(framework="sglang", image="lmsysorg/sglang:v0.5.15", speculative=MTP3))
    assert launch.warnings == ()
    # before sglang:spec_verify_calls_total (PR #25689) no run can read AL from the counters
    with pytest.raises(
        RecipeError, match=r"v0\.4\.0, older than v0\.5\.15.*spec_verify_calls_total.*PR #25689"
    ):
        build_launch(cfg(framework="sglang", image="lmsysorg/sglang:v0.4.0", speculative=MTP3))
    # without speculation nothing reads AL: no gate
    assert build_launch(cfg(framework="sglang", image="lmsysorg/sglang:v0.4.0")).requirements == ()


def test_sglang_ngram_synthetic_is_refused_and_ep_must_equal_tp() -> None:
    ngram = SpeculativeConfig(method="ngram", k=3)
    with pytest.raises(RecipeError, match="NGRAM"):
        build_launch(
            cfg(
                framework="sglang",
                image="x:v0.5.16",
                speculative=ngram,
                synthetic=SyntheticAcceptance(target_al=2),
            )
        )
    argv = list(build_launch(cfg(framework="sglang", speculative=ngram)).argv)
    assert argv[argv.index("--speculative-algorithm") + 1] == "NGRAM"
    assert "--speculative-eagle-topk" not in argv
    with pytest.raises(RecipeError, match="--ep-size equal to --tp-size"):
        build_launch(cfg(framework="sglang", parallelism=Parallelism(tp=4, ep=2)))


# --- TensorRT-LLM -------------------------------------------------------------------------------------


def test_trtllm_mtp_synthetic_278_is_178() -> None:
    launch = build_launch(
        cfg(framework="trtllm", speculative=MTP3, synthetic=SyntheticAcceptance(target_al=2.78))
    )
    assert launch.env == {TRTLLM_ENV: "1.78"}
    assert launch.argv == (
        "trtllm-serve",
        "org/model",
        "--host",
        "127.0.0.1",  # no host in the config: loopback
        "--port",
        "8000",
        "--config",
        f"{DEFAULT_FILES_DIR}/{TRTLLM_OPTIONS_FILE}",
        "--tp_size",
        "1",
    )
    assert trtllm_options(launch) == {
        "speculative_config": {"decoding_type": "MTP", "max_draft_len": 3, "num_nextn_predict_layers": 3},
        "enable_iter_perf_stats": True,
        "return_perf_metrics": True,
        "kv_cache_config": {"enable_block_reuse": False},
    }
    assert launch.metrics_path == TRTLLM_METRICS_PATH
    assert launch.provenance().files == {
        f"{DEFAULT_FILES_DIR}/{TRTLLM_OPTIONS_FILE}": launch.files[0].content
    }


def test_trtllm_eagle3_one_model_and_flags() -> None:
    launch = build_launch(
        cfg(
            framework="trtllm",
            speculative=EAGLE3_5,
            synthetic=SyntheticAcceptance(target_al=3.24),
            parallelism=Parallelism(tp=4, pp=2, ep=4, dp=4),
            max_model_len=9000,
            enable_prefix_caching=True,
        )
    )
    assert launch.env == {TRTLLM_ENV: "2.24"}
    opts = trtllm_options(launch)
    assert opts["speculative_config"] == {
        "decoding_type": "Eagle3",
        "max_draft_len": 5,
        "speculative_model": "org/eagle3-drafter",
        "eagle3_one_model": True,
    }
    assert opts["kv_cache_config"] == {"enable_block_reuse": True}
    assert opts["enable_attention_dp"] is True
    argv = list(launch.argv)
    for flag, value in [
        ("--pp_size", "2"),
        ("--ep_size", "4"),
        ("--max_seq_len", "9000"),
        ("--tp_size", "4"),
    ]:
        assert argv[argv.index(flag) + 1] == value


@pytest.mark.parametrize(
    ("spec", "two_model"),
    [
        (SpeculativeConfig(method="ngram", k=3), None),
        (EAGLE3_5, True),
    ],
)
def test_trtllm_fractional_value_on_two_model_path_is_refused(
    spec: SpeculativeConfig, two_model: bool | None
) -> None:
    with pytest.raises(RecipeError, match="integer"):
        build_launch(
            cfg(
                framework="trtllm",
                speculative=spec,
                two_model=two_model,
                synthetic=SyntheticAcceptance(target_al=2.5),
            )
        )
    # a whole AL is honoured on the same path
    launch = build_launch(
        cfg(
            framework="trtllm",
            speculative=spec,
            two_model=two_model,
            synthetic=SyntheticAcceptance(target_al=3),
        )
    )
    assert launch.env == {TRTLLM_ENV: "2"}
    assert any("eagle3_one_model back" in w for w in launch.warnings) == (spec.method.value == "eagle3")


def test_trtllm_refusals() -> None:
    with pytest.raises(RecipeError, match="MTP has no two-model mode"):
        build_launch(cfg(framework="trtllm", speculative=MTP3, two_model=True))
    with pytest.raises(RecipeError, match="dp must equal tp"):
        build_launch(cfg(framework="trtllm", parallelism=Parallelism(tp=4, dp=2)))
    with pytest.raises(RecipeError, match="prompt_lookup_min"):
        build_launch(
            cfg(framework="trtllm", speculative=SpeculativeConfig(method="ngram", k=3, prompt_lookup_min=2))
        )


def test_non_min_variance_rates_are_refused_where_a_framework_takes_one_al() -> None:
    for framework in ("sglang", "trtllm"):
        with pytest.raises(RecipeError, match="rates"):
            build_launch(
                cfg(
                    framework=framework,
                    image="x:v0.6.0",
                    speculative=MTP3,
                    synthetic=SyntheticAcceptance(rates=(0.9, 0.5, 0.2)),
                )
            )


# --- sim ----------------------------------------------------------------------------------------------


def test_sim_carries_each_frameworks_knob_path() -> None:
    base = {
        "framework": "sim",
        "model": "llama",
        "speculative": MTP3,
        "synthetic": SyntheticAcceptance(target_al=2.78),
    }
    vllm = build_launch(cfg(**base, sim_dialect="vllm"))
    assert vllm.argv[:4] == (sys.executable, "-m", "alflow.sim", "serve")
    assert spec_config(vllm) == spec_config(build_launch(cfg(**{**base, "framework": "vllm"})))
    assert vllm.metrics_path == VLLM_METRICS_PATH
    assert vllm.model == "sim/llama"
    trt = build_launch(cfg(**base, sim_dialect="trtllm"))
    assert trt.env[TRTLLM_ENV] == "1.78"
    assert "--speculative-config" not in trt.argv
    assert trt.metrics_path == TRTLLM_METRICS_PATH
    argv = list(trt.argv)
    assert argv[argv.index("--dialect") + 1] == "trtllm"
    assert argv[argv.index("--k") + 1] == "3"
    assert argv[argv.index("--method") + 1] == "mtp"
    sg = build_launch(cfg(**base, sim_dialect="sglang"))
    assert sg.env[SGLANG_LEN_ENV] == "2.78"
    assert sg.metrics_path == SGLANG_METRICS_PATH
    # the two-model refusal applies to the simulator too (same knob path)
    with pytest.raises(RecipeError, match="integer"):
        build_launch(
            cfg(**{**base, "speculative": SpeculativeConfig(method="ngram", k=3)}, sim_dialect="trtllm")
        )


# --- shared -------------------------------------------------------------------------------------------


def test_registry_has_every_framework_and_unknown_is_an_error() -> None:
    assert set(recipes()) == {spec.name for spec in BUILTIN}
    for name, recipe in recipes().items():
        assert recipe.framework == name
    with pytest.raises(RecipeError, match="known: vllm"):
        get_recipe("llamacpp")


def test_synthetic_needs_speculation_and_two_model_is_trtllm_only() -> None:
    with pytest.raises(ValidationError, match="needs speculative decoding"):
        cfg(framework="vllm", synthetic=SyntheticAcceptance(target_al=2.0))
    with pytest.raises(ValidationError, match="TensorRT-LLM only"):
        cfg(framework="vllm", speculative=MTP3, two_model=True)


def test_al_out_of_range_is_refused_at_load() -> None:
    # refused when the config is read, before any recipe or server runs
    with pytest.raises(ValidationError, match=r"target AL 4.5 is outside the allowed range \[1, 4\] for K=3"):
        cfg(framework="vllm", speculative=MTP3, synthetic=SyntheticAcceptance(target_al=4.5))


def test_port_zero_picks_a_free_port_and_env_secrets_are_redacted() -> None:
    launch = build_launch(
        cfg(framework="vllm", port=0, host="127.0.0.1", extra_env={"NCCL_DEBUG": "INFO"}),
    )
    assert 0 < launch.port < 65536
    assert launch.argv[launch.argv.index("--port") + 1] == str(launch.port)
    assert launch.base_url() == f"http://127.0.0.1:{launch.port}"
    # a secret-looking variable a recipe (not the user) puts in a Launch's env is still masked
    launch = replace(launch, env={**launch.env, "WANDB_API_KEY": "wk_abcdef"})
    prov = launch.provenance()
    assert prov.env == {"NCCL_DEBUG": "INFO", "WANDB_API_KEY": REDACTED}
    assert "wk_abcdef" not in json.dumps(prov.stored())


def test_launch_relocates_files_and_validates() -> None:
    launch = build_launch(cfg(framework="trtllm", speculative=MTP3))
    moved = launch.relocated("/tmp/run/files")
    assert f"/tmp/run/files/{TRTLLM_OPTIONS_FILE}" in moved.argv
    assert f"{DEFAULT_FILES_DIR}/{TRTLLM_OPTIONS_FILE}" not in moved.argv
    with pytest.raises(ValueError, match="plain file name"):
        LaunchFile("../x", "")
    with pytest.raises(ValueError, match="secret"):
        Launch(
            framework="x",
            dialect="vllm",
            model="m",
            argv=("a",),
            port=1,
            env={"HF_TOKEN": "v"},
            secret_env=("HF_TOKEN",),
        )
    with pytest.raises(ValueError, match="concrete port"):
        Launch(framework="x", dialect="vllm", model="m", argv=("a",), port=0)
    assert 0 < free_port() < 65536


@pytest.mark.parametrize(
    ("image", "tag", "version"),
    [
        ("lmsysorg/sglang:v0.5.16-cu129", "v0.5.16-cu129", (0, 5, 16)),
        ("lmsysorg/sglang:0.5.2", "0.5.2", (0, 5, 2)),
        ("registry:5000/sglang:v0.6", "v0.6", (0, 6, 0)),
        ("lmsysorg/sglang:latest", "latest", None),
        ("lmsysorg/sglang", None, None),
        ("registry:5000/sglang", None, None),
        ("lmsysorg/sglang@sha256:abcd", None, None),
        ("lmsysorg/sglang:v0.5.17@sha256:abcd", "v0.5.17", (0, 5, 17)),
        (None, None, None),
    ],
)
def test_image_tag_and_version(
    image: str | None, tag: str | None, version: tuple[int, int, int] | None
) -> None:
    assert image_tag(image) == tag
    found = FrameworkVersion.parse(image_tag(image))
    assert (None if found is None else found.release) == version


@pytest.mark.parametrize(
    ("framework", "arg"),
    [
        ("vllm", "--enable-prefix-caching"),
        ("vllm", "--speculative-config={}"),
        ("vllm", "--tensor-parallel-size"),
        ("sglang", "--speculative-num-steps"),
        ("trtllm", "--extra_llm_api_options"),
        ("sim", "--speculative-config={}"),
    ],
)
def test_extra_args_may_not_override_managed_flags(framework: str, arg: str) -> None:
    with pytest.raises(RecipeError, match="silently override"):
        build_launch(cfg(framework=framework, speculative=MTP3, extra_args=(arg, "1")))


@pytest.mark.parametrize("name", [TRTLLM_ENV, SGLANG_LEN_ENV, SGLANG_TOKEN_MODE_ENV])
@pytest.mark.parametrize("framework", [*DIALECTS, "sim"])
def test_knob_variables_only_come_from_synthetic(framework: str, name: str) -> None:
    with pytest.raises(RecipeError, match="synthetic-acceptance switch"):
        build_launch(cfg(framework=framework, speculative=MTP3, extra_env={name: "2"}))


def test_free_extra_args_and_env_pass_through() -> None:
    launch = build_launch(
        cfg(framework="sim", speculative=MTP3, extra_args=("--time-scale", "0"), extra_env={"FOO": "bar"})
    )
    assert launch.argv[-2:] == ("--time-scale", "0")
    assert launch.env["FOO"] == "bar"


def test_server_config_is_hashable_and_round_trips() -> None:
    a = cfg(framework="vllm", extra_env={"A": "1"}, speculative=MTP3)
    b = server_config(json.loads(a.model_dump_json()))
    assert a == b
    assert hash(a) == hash(b)
    assert len({a, b, cfg(framework="vllm", extra_env={"A": "2"}, speculative=MTP3)}) == 2


def test_sim_may_override_its_synthetic_target_as_a_visible_fault() -> None:
    launch = build_launch(
        cfg(
            framework="sim",
            speculative=MTP3,
            synthetic=SyntheticAcceptance(target_al=3.0),
            extra_args=("--synthetic-al", "2.0"),
        )
    )
    assert launch.argv[-2:] == ("--synthetic-al", "2.0")
    assert any("--synthetic-al override" in w for w in launch.warnings)


@pytest.mark.parametrize("name", ["SGLANG_SIMULATE_UNIFORM_EXPERTS", "SGLANG_SIMULATE_ROUND_ROBIN_EXPERTS"])
def test_sglangs_simulated_expert_routing_is_refused_in_every_flow_and_never_inherited(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for synthetic in (SYN, None):
        with pytest.raises(RecipeError, match=rf"^server\.extra_env\.{name}='1': refused: .*expert") as err:
            build_launch(
                cfg(framework="sglang", speculative=MTP3, synthetic=synthetic, extra_env={name: "1"})
            )
        assert "\n" not in str(err.value)
    off = build_launch(cfg(framework="sglang", speculative=MTP3, synthetic=SYN, extra_env={name: "0"}))
    assert off.env[name] == "0"
    monkeypatch.setenv(name, "1")  # a stray switch in the shell never reaches a server
    assert name not in inherited_env()


@pytest.mark.parametrize(
    "args",
    [
        ("--speculative-accept-threshold-single", "0.75"),
        ("--speculative-accept-threshold-acc=0.5",),
        ("--speculative-accept-threshold-acc", "2"),
        ("--speculative-accept-threshold-single", "x"),
        ("--speculative-accept-threshold-s", "0.5"),  # argparse reads an unambiguous prefix as the flag
    ],
)
def test_sglangs_relaxed_acceptance_is_refused_with_real_acceptance_only(args: tuple[str, ...]) -> None:
    with pytest.raises(
        RecipeError, match=r"refused with real acceptance: a threshold other than 1\.0.*lossy"
    ):
        build_launch(cfg(framework="sglang", speculative=MTP3, extra_args=args))
    synthetic = build_launch(cfg(framework="sglang", speculative=MTP3, synthetic=SYN, extra_args=args))
    assert synthetic.argv[-len(args) :] == args  # the forced accept decision replaces the kernel's: no effect
    lossless = ("--speculative-accept-threshold-single", "1.0", "--speculative-accept-threshold-acc=1")
    assert build_launch(cfg(framework="sglang", speculative=MTP3, extra_args=lossless)).argv[-3:] == lossless
