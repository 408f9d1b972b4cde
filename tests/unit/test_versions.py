"""Release gates: version parsing, and each recipe's capability (too old, unknown, new enough) with its source."""

from __future__ import annotations

import pytest

from alflow.config import ServerConfig, SpeculativeConfig, SyntheticAcceptance, server_config
from alflow.frameworks.recipes import build_launch
from alflow.frameworks.sglang.recipe import (
    SGLANG_DFLASH2_CAP,
    SGLANG_DFLASH_SYNTHETIC_CAP,
    SGLANG_RAGGED_VERIFY_ENV,
    SGLANG_TOKEN_MODE_CAP,
)
from alflow.frameworks.trtllm.recipe import (
    TRTLLM_DFLASH,
    TRTLLM_DRAFT_TARGET_ONE_ENGINE,
    TRTLLM_EXACT_AL,
    TRTLLM_FRACTIONAL,
)
from alflow.frameworks.versions import CapabilityError, FrameworkVersion, check_capabilities
from alflow.frameworks.vllm.recipe import VLLM_BLOCK_VERIFY, VLLM_DSPARK, VLLM_SYNTHETIC
from alflow_infra.errors import RecipeError
from alflow_infra.lifecycle import LiveVersion, check_live_version

pytestmark = pytest.mark.unit


def cfg(**kwargs: object) -> ServerConfig:
    values: dict[str, object] = {"model": "org/model", "port": 8000}
    values.update(kwargs)
    return server_config(values)


@pytest.mark.parametrize(
    ("text", "release", "pre"),
    [
        ("0.20.0", (0, 20, 0), (4, 0)),
        ("v0.5.16", (0, 5, 16), (4, 0)),
        ("v0.5.16-cu129", (0, 5, 16), (4, 0)),
        ("0.5.16.post1", (0, 5, 16), (4, 0)),
        ("1.3.0rc15", (1, 3, 0), (3, 15)),
        ("1.3.0rc14.post2", (1, 3, 0), (3, 14)),
        ("0.20.1.dev45+gabcdef", (0, 20, 1), (0, 45)),
        ("v0.6", (0, 6, 0), (4, 0)),
    ],
)
def test_versions_parse(text: str, release: tuple[int, int, int], pre: tuple[int, int]) -> None:
    v = FrameworkVersion.parse(text)
    assert v is not None
    assert (v.release, v.pre) == (release, pre)


@pytest.mark.parametrize("text", [None, "", "latest", "dev-nightly", "alflow-sim", "sha256:abc"])
def test_no_version_in_text(text: str | None) -> None:
    assert FrameworkVersion.parse(text) is None


def test_pre_releases_sort_before_their_release() -> None:
    order = ["1.2.0", "1.3.0.dev1", "1.3.0rc12", "1.3.0rc14", "1.3.0rc15", "1.3.0", "1.3.1"]
    parsed = [FrameworkVersion.parse(t) for t in order]
    assert all(p is not None for p in parsed)
    assert parsed == sorted(parsed)  # type: ignore[type-var]


def test_capability_constants_cite_their_source() -> None:
    for cap in (
        VLLM_SYNTHETIC,
        VLLM_BLOCK_VERIFY,
        VLLM_DSPARK,
        SGLANG_TOKEN_MODE_CAP,
        TRTLLM_FRACTIONAL,
        TRTLLM_DFLASH,
    ):
        assert "PR #" in cap.source, cap
    assert str(VLLM_SYNTHETIC.minimum) == "v0.20.0"  # PR #40662, merged 2026-04-24
    assert str(VLLM_BLOCK_VERIFY.minimum) == "v0.25.0"  # PR #46781
    assert str(VLLM_DSPARK.minimum) == "v0.25.0"  # PR #46995
    assert str(SGLANG_TOKEN_MODE_CAP.minimum) == "v0.5.16"  # PR #29645
    assert str(TRTLLM_FRACTIONAL.minimum) == "v1.3.0rc15"  # PR #13569 (rc14 not verified)
    assert str(TRTLLM_DFLASH.minimum) == "v1.3.0rc14"  # PR #12794


def test_check_capabilities_three_ways() -> None:
    assert check_capabilities([VLLM_SYNTHETIC], "0.20.0", "x") == ()
    assert check_capabilities([VLLM_SYNTHETIC], "0.21.3", "x") == ()
    with pytest.raises(CapabilityError, match=r"v0\.19\.1, older than v0\.20\.0.*PR #40662"):
        check_capabilities([VLLM_SYNTHETIC], "0.19.1", "x")
    warnings = check_capabilities([VLLM_SYNTHETIC], "latest", "image 'vllm/vllm-openai:latest'")
    assert len(warnings) == 1
    assert "version unknown" in warnings[0]
    assert check_capabilities([], "0.1.0", "x") == ()  # nothing asked, nothing checked


# ---------------------------------------------------------------- vLLM

SYN = SyntheticAcceptance(target_al=2.5)
SGL_IMAGE = "lmsysorg/sglang:{}"
MTP3 = SpeculativeConfig(method="mtp", k=3)


def test_vllm_synthetic_on_too_old_an_image_is_refused_naming_the_minimum() -> None:
    with pytest.raises(
        CapabilityError, match=r"vLLM image 'vllm/vllm-openai:v0\.11\.0' is v0\.11\.0, older than v0\.20\.0"
    ):
        build_launch(cfg(framework="vllm", image="vllm/vllm-openai:v0.11.0", speculative=MTP3, synthetic=SYN))


def test_vllm_synthetic_new_enough_has_no_gate_warning() -> None:
    launch = build_launch(
        cfg(framework="vllm", image="vllm/vllm-openai:v0.20.0", speculative=MTP3, synthetic=SYN)
    )
    assert not any("version" in w for w in launch.warnings)
    assert launch.requirements == (VLLM_SYNTHETIC,)
    assert launch.version_paths == ("/version",)


def test_vllm_old_image_is_fine_without_synthetic() -> None:
    launch = build_launch(cfg(framework="vllm", image="vllm/vllm-openai:v0.11.0", speculative=MTP3))
    assert launch.requirements == ()
    assert launch.warnings == ()


def test_vllm_block_verification_and_dspark_need_v025() -> None:
    block = SpeculativeConfig(method="mtp", k=3, rejection_sample_method="block")
    with pytest.raises(CapabilityError, match=r"older than v0\.25\.0.*block verification"):
        build_launch(cfg(framework="vllm", image="vllm/vllm-openai:v0.24.1", speculative=block))
    launch = build_launch(cfg(framework="vllm", image="vllm/vllm-openai:v0.25.0", speculative=block))
    assert '"rejection_sample_method":"block"' in launch.command_line()
    dspark = SpeculativeConfig(method="dspark", k=4)
    with pytest.raises(CapabilityError, match=r"DSpark"):
        build_launch(cfg(framework="vllm", image="vllm/vllm-openai:v0.20.0", speculative=dspark))


def test_vllm_block_verification_cannot_go_with_synthetic() -> None:
    block = SpeculativeConfig(method="mtp", k=3, rejection_sample_method="block")
    with pytest.raises(RecipeError, match="synthetic mode is itself a rejection sample method"):
        build_launch(
            cfg(framework="vllm", image="vllm/vllm-openai:v0.25.0", speculative=block, synthetic=SYN)
        )


def test_vllm_draft_sample_method_is_rendered_and_refused_elsewhere() -> None:
    spec = SpeculativeConfig(method="eagle3", k=3, draft_model="org/d", draft_sample_method="probabilistic")
    launch = build_launch(cfg(framework="vllm", image="vllm/vllm-openai:v0.25.0", speculative=spec))
    assert '"draft_sample_method":"probabilistic"' in launch.command_line()
    for fw in ("sglang", "trtllm"):
        with pytest.raises(Exception, match=r"draft_sample_method='probabilistic' is a vLLM setting"):
            build_launch(cfg(framework=fw, speculative=spec))


# ---------------------------------------------------------------- SGLang


def test_sglang_token_mode_gate_three_ways() -> None:
    with pytest.raises(CapabilityError, match=r"older than v0\.5\.16.*silent no-op"):
        build_launch(
            cfg(framework="sglang", image="lmsysorg/sglang:v0.5.14", speculative=MTP3, synthetic=SYN)
        )
    ok = build_launch(
        cfg(framework="sglang", image="lmsysorg/sglang:v0.5.16-cu129", speculative=MTP3, synthetic=SYN)
    )
    assert not any("version unknown" in w for w in ok.image_warnings)
    assert ok.version_paths == ("/server_info", "/get_server_info")
    unknown = build_launch(
        cfg(framework="sglang", image="lmsysorg/sglang:latest", speculative=MTP3, synthetic=SYN)
    )
    assert any("version unknown" in w for w in unknown.image_warnings)


def test_sglang_dspark_synthetic_sets_the_verify_all_schedule() -> None:
    dspark = SpeculativeConfig(method="dspark", k=4, draft_model="org/dspark")
    launch = build_launch(
        cfg(
            framework="sglang",
            image="lmsysorg/sglang:v0.5.16",
            speculative=dspark,
            synthetic=SyntheticAcceptance(target_al=3.0),
        )
    )
    assert launch.env[SGLANG_RAGGED_VERIFY_ENV] == "static"
    argv = list(launch.argv)
    assert argv[argv.index("--speculative-algorithm") + 1] == "DSPARK"
    assert argv[argv.index("--speculative-dspark-block-size") + 1] == "4"
    frac = build_launch(
        cfg(
            framework="sglang",
            image="lmsysorg/sglang:v0.5.16",
            speculative=dspark,
            synthetic=SyntheticAcceptance(target_al=2.7),
        )
    )
    assert any("PR #33463" in w for w in frac.warnings)
    with pytest.raises(Exception, match=r"SGLANG_RAGGED_VERIFY_MODE='compact'"):
        build_launch(
            cfg(
                framework="sglang",
                speculative=dspark,
                synthetic=SyntheticAcceptance(target_al=3.0),
                extra_env={SGLANG_RAGGED_VERIFY_ENV: "compact"},
            )
        )


def test_sglang_dflash_synthetic_needs_the_release_with_pr_32595() -> None:
    dflash = SpeculativeConfig(method="dflash", k=4, draft_model="org/dflash")
    launch = build_launch(
        cfg(framework="sglang", image=SGL_IMAGE.format("v0.5.23"), speculative=dflash, synthetic=SYN)
    )
    assert float(launch.env["SGLANG_SIMULATE_ACC_LEN"]) == SYN.target_al
    assert SGLANG_DFLASH_SYNTHETIC_CAP in launch.requirements
    argv = list(launch.argv)
    assert argv[argv.index("--speculative-algorithm") + 1] == "DFLASH"
    assert argv[argv.index("--speculative-num-draft-tokens") + 1] == "5"
    with pytest.raises(CapabilityError, match=r"v0\.5\.16, older than v0\.5\.19.*PR #32595") as info:
        build_launch(
            cfg(framework="sglang", image=SGL_IMAGE.format("v0.5.16"), speculative=dflash, synthetic=SYN)
        )
    assert "\n" not in str(info.value)
    unknown = build_launch(cfg(framework="sglang", speculative=dflash, synthetic=SYN))  # the :latest tag
    assert any("PR #32595" in w for w in unknown.image_warnings)
    # real acceptance with DFLASH is not gated on it
    real = build_launch(cfg(framework="sglang", image=SGL_IMAGE.format("v0.5.16"), speculative=dflash))
    assert SGLANG_DFLASH_SYNTHETIC_CAP not in real.requirements


def test_sglang_dflash2_is_its_own_algorithm_from_v0_5_19_and_other_frameworks_refuse_it_by_name() -> None:
    dflash2 = SpeculativeConfig(method="dflash2", k=7, draft_model="org/dflash2")
    launch = build_launch(
        cfg(framework="sglang", image=SGL_IMAGE.format("v0.5.19"), speculative=dflash2, synthetic=SYN)
    )
    argv = list(launch.argv)
    assert argv[argv.index("--speculative-algorithm") + 1] == "DFLASH2"
    assert argv[argv.index("--speculative-num-draft-tokens") + 1] == "8"
    assert "SGLANG_SIMULATE_ACC_LEN" in launch.env
    assert SGLANG_DFLASH2_CAP in launch.requirements
    with pytest.raises(CapabilityError, match=r"v0\.5\.18, older than v0\.5\.19.*PR #35371"):
        build_launch(cfg(framework="sglang", image=SGL_IMAGE.format("v0.5.18"), speculative=dflash2))
    for framework, where in (
        ("vllm", "vllm/config/speculative.py"),
        ("trtllm", "tensorrt_llm/llmapi/llm_args.py"),
        ("atom", "atom/model_engine/arg_utils.py"),
    ):
        with pytest.raises(
            RecipeError, match=rf"no speculative method 'dflash2'; it offers .*mtp.*{where}"
        ) as info:
            build_launch(cfg(framework=framework, speculative=dflash2))
        assert "\n" not in str(info.value)
    with pytest.raises(
        RecipeError, match=r"the simulated engine has no speculative method 'dflash2'; it offers mtp"
    ):
        build_launch(cfg(framework="sim", sim_dialect="sglang", speculative=dflash2))


# ---------------------------------------------------------------- TensorRT-LLM

TRT_IMAGE = "nvcr.io/nvidia/tensorrt-llm/release:{}"


def test_trtllm_fractional_value_needs_the_float_parser() -> None:
    frac = SyntheticAcceptance(target_al=2.78)
    with pytest.raises(
        CapabilityError, match=r"v1\.3\.0rc14, older than v1\.3\.0rc15.*measure real acceptance"
    ):
        build_launch(
            cfg(framework="trtllm", image=TRT_IMAGE.format("1.3.0rc14"), speculative=MTP3, synthetic=frac)
        )
    launch = build_launch(
        cfg(framework="trtllm", image=TRT_IMAGE.format("1.3.0rc19"), speculative=MTP3, synthetic=frac)
    )
    assert launch.requirements == (TRTLLM_FRACTIONAL, TRTLLM_EXACT_AL)
    # a whole AL parses as an integer on every release: only the AL counters are gated
    whole = build_launch(
        cfg(
            framework="trtllm",
            image=TRT_IMAGE.format("1.3.0rc19"),
            speculative=MTP3,
            synthetic=SyntheticAcceptance(target_al=3.0),
        )
    )
    assert whole.requirements == (TRTLLM_EXACT_AL,)


def test_trtllm_draft_target_takes_a_fraction_on_its_one_engine_path_and_ngram_never() -> None:
    draft = SpeculativeConfig(method="draft_model", k=3, draft_model="org/small")
    frac = SyntheticAcceptance(target_al=2.78)
    launch = build_launch(
        cfg(framework="trtllm", image=TRT_IMAGE.format("1.3.0rc19"), speculative=draft, synthetic=frac)
    )
    assert launch.env["TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS"] == "1.78"
    assert launch.requirements == (TRTLLM_FRACTIONAL, TRTLLM_EXACT_AL)
    assert launch.warnings == (
        TRTLLM_DRAFT_TARGET_ONE_ENGINE,
    )  # its first release is not pinned: the pre-flight
    assert "PR #11758" in TRTLLM_DRAFT_TARGET_ONE_ENGINE
    with pytest.raises(RecipeError, match="DraftTarget runs as a one-engine external drafter"):
        build_launch(
            cfg(
                framework="trtllm",
                image=TRT_IMAGE.format("1.3.0rc19"),
                speculative=draft,
                two_model=True,
                synthetic=frac,
            )
        )
    with pytest.raises(RecipeError, match=r"two-model path \(method ngram\) parses .* as an integer") as info:
        build_launch(
            cfg(
                framework="trtllm",
                image=TRT_IMAGE.format("1.3.0rc19"),
                speculative=SpeculativeConfig(method="ngram", k=3),
                synthetic=frac,
            )
        )
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("synthetic", [None, SyntheticAcceptance(target_al=3.0)])
def test_trtllm_before_the_al_metrics_release_is_refused_before_launch(
    synthetic: SyntheticAcceptance | None,
) -> None:
    # every speculative run reads AL from the per-position counters of v1.3.0rc19 (PR #12636)
    with pytest.raises(CapabilityError, match=r"is v1\.3\.0rc18, older than v1\.3\.0rc19.*PR #12636") as info:
        build_launch(
            cfg(
                framework="trtllm", image=TRT_IMAGE.format("1.3.0rc18"), speculative=MTP3, synthetic=synthetic
            )
        )
    assert "\n" not in str(info.value)
    assert str(TRTLLM_EXACT_AL.minimum) == "v1.3.0rc19"
    # without speculation nothing reads AL: no gate
    assert build_launch(cfg(framework="trtllm", image=TRT_IMAGE.format("1.2.0"))).requirements == ()


def test_trtllm_block_drafters_render_their_decoding_type() -> None:
    for method, decoding in (("dspark", "DSpark"), ("dflash", "DFlash")):
        spec = SpeculativeConfig(method=method, k=4, draft_model="org/drafter")  # type: ignore[arg-type]
        launch = build_launch(cfg(framework="trtllm", image=TRT_IMAGE.format("1.3.0rc19"), speculative=spec))
        options = launch.files[0].content
        assert f"decoding_type: {decoding}" in options
        assert "speculative_model: org/drafter" in options
    with pytest.raises(CapabilityError, match="DFlash"):
        build_launch(
            cfg(
                framework="trtllm",
                image=TRT_IMAGE.format("1.3.0rc13"),
                speculative=SpeculativeConfig(method="dflash", k=4, draft_model="org/d"),
            )
        )


# ---------------------------------------------------------------- the live gate


def test_the_live_gate_refuses_a_server_older_than_its_tag_said() -> None:
    launch = build_launch(
        cfg(framework="vllm", image="vllm/vllm-openai:latest", speculative=MTP3, synthetic=SYN)
    )
    with pytest.raises(CapabilityError, match=r"live server \(GET /version\) is v0\.11\.0"):
        check_live_version(launch, LiveVersion("0.11.0", "/version"))
    assert check_live_version(launch, LiveVersion("0.20.0", "/version")) == ()
    unknown = check_live_version(launch, LiveVersion(None))
    assert len(unknown) == 1
    assert "no version at /version" in unknown[0]


def test_the_simulated_engine_is_gated_only_when_it_reports_a_framework_version() -> None:
    launch = build_launch(
        cfg(framework="sim", sim_dialect="vllm", speculative=MTP3, synthetic=SYN, model="m")
    )
    assert launch.requirements == (VLLM_SYNTHETIC,)
    assert check_live_version(launch, LiveVersion("alflow-sim", "/version", simulated=True)) == ()
    with pytest.raises(CapabilityError):
        check_live_version(launch, LiveVersion("0.11.0", "/version", simulated=True))


def test_the_image_label_stands_in_for_a_server_that_reports_no_version() -> None:
    frac = SyntheticAcceptance(target_al=2.78)
    launch = build_launch(
        cfg(
            framework="trtllm",
            image="nvcr.io/nvidia/tensorrt-llm/release:latest",
            speculative=MTP3,
            synthetic=frac,
        )
    )
    with pytest.raises(
        CapabilityError, match=r"image label '1\.3\.0rc12' \(it reports none itself\) is v1\.3\.0rc12"
    ):
        check_live_version(launch, LiveVersion("1.3.0rc12", "image label '1.3.0rc12'"))
