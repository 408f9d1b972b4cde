"""Server presets (presets/*.yaml) and the flows' short forms: every preset validates, the merge rules, the errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from alflow.config import (
    BenchmarkParams,
    CalibrateParams,
    GateParams,
    ModelSpec,
    RandomWorkload,
    ServerPlacement,
    ServerPreset,
    SyntheticAcceptance,
    ThinkingMode,
    benchmark_params,
    calibrate_params,
    gate_params,
    load_preset,
    preset_names,
    presets_root,
    server_config,
)
from alflow.config.presets import preset_from_data
from alflow.errors import InvalidInputError
from alflow.frameworks.recipe_kit import image_tag
from alflow.frameworks.recipes import build_launch
from alflow.frameworks.versions import FrameworkVersion
from alflow.methods.common import point_server

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = {"sim", "vllm-h200", "sglang-h200", "trtllm-h200", "atom-mi355x"}
NAMES = preset_names(ROOT)


def test_the_shipped_presets_are_there() -> None:
    assert set(NAMES) >= SHIPPED
    assert sorted(p.stem for p in (ROOT / "presets").glob("*.yaml")) == NAMES  # no file skipped by its name


@pytest.mark.parametrize("name", NAMES)
def test_every_preset_validates_and_gives_usable_m0_m1_m2_runs(name: str) -> None:
    """Each preset is a valid base for M2 and M0 (and M1 when it names a reference table); its servers render."""
    preset = load_preset(name, ROOT)
    assert preset.description.strip()
    m2 = benchmark_params(preset=preset)
    m0 = calibrate_params(preset=preset)
    assert m0.models == (preset.model,)
    servers = [point_server(m0.server, preset.model.id, m0.method, k) for k in m0.ks]
    if preset.reference_path is not None:
        m1 = gate_params(preset=preset)
        assert (m1.server, m1.placement, m1.model, m1.k) == (
            preset.server,
            preset.placement,
            preset.model,
            preset.k,
        )
        servers.append(point_server(m1.server, m1.model.id, m1.method, m1.k))
    target = (
        m2.target_al if m2.target_al is not None else 1.0 + 0.61 * m2.k
    )  # a fractional target is the strictest
    servers.append(
        point_server(m2.server, m2.model.id, m2.method, m2.k, synthetic=SyntheticAcceptance(target_al=target))
    )
    for server in servers:
        build_launch(server)  # an image too old for its knobs raises CapabilityError


def _definitions() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    definitions: dict[str, Any] = data["definitions"]
    return definitions


def test_the_sim_preset_is_the_sim_deployments_engine() -> None:
    """presets/sim.yaml is the engine, placement and model that prefect.yaml's sim deployments share."""
    d = _definitions()
    sim = load_preset("sim", ROOT)
    assert sim.server == server_config(d["sim_fast"])
    assert sim.placement == ServerPlacement.model_validate(d["local_placement"])
    assert sim.model == ModelSpec.model_validate(d["model"])
    assert sim.server.extra_args == ("--time-scale", "0")
    assert sim.placement.runner.kind == "process"


@pytest.mark.parametrize(
    ("name", "image"),
    [
        ("vllm-h200", "vllm/vllm-openai:v0.33.0"),
        ("sglang-h200", "lmsysorg/sglang:v0.5.23"),
        ("trtllm-h200", "nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc19"),
    ],
)
def test_the_gpu_presets_are_the_gpu_deployments_servers(name: str, image: str) -> None:
    d = _definitions()
    preset = load_preset(name, ROOT)
    assert preset.server == server_config(
        {**d["gpu_vllm"], "framework": preset.server.framework, "image": image}
    )
    assert preset.placement == ServerPlacement.model_validate(d["gpu_placement"])
    assert preset.placement.runner.kind == "docker"
    assert preset.placement.gpu_host == "gpu-h200-node-1"
    assert preset.model == ModelSpec.model_validate(d["gpu_model"])
    m2 = benchmark_params(preset=preset)
    assert m2.workload == RandomWorkload.model_validate(d["gpu_workload"])
    assert list(m2.concurrencies) == d["gpu_concurrencies"]
    assert (m2.method.value, m2.thinking, m2.reference_path) == (
        "mtp",
        ThinkingMode.OFF,
        "references/speed-bench-coding.yaml",
    )


@pytest.mark.parametrize("name", sorted(p.stem for p in (ROOT / "presets").glob("*.yaml")))
def test_every_presets_image_passes_every_gate_its_knobs_and_metrics_need(name: str) -> None:
    """Real acceptance (M0/M1) and synthetic at a whole and a fractional AL (M2).

    A versioned tag passes each gate with no warning; an unversioned one (ATOM's nightly ``latest``, the sim's
    local image) is left to the live server's version.
    """
    preset = load_preset(name, ROOT)
    m2 = benchmark_params(preset=preset)
    for synthetic in (
        None,
        SyntheticAcceptance(target_al=float(m2.k)),
        SyntheticAcceptance(target_al=m2.k + 0.5),
    ):
        server = point_server(
            m2.server, m2.model.id, m2.method, m2.k, draft_model=m2.draft_model, synthetic=synthetic
        )
        launch = build_launch(server)  # a tag older than a gate's release is refused here
        if FrameworkVersion.parse(image_tag(launch.image)) is not None:
            assert launch.image_warnings == (), (name, synthetic, launch.image_warnings)


# --- the rules ---------------------------------------------------------------------------------------------


def _sim() -> ServerPreset:
    return load_preset("sim", ROOT)


def _gpu() -> ServerPreset:
    return load_preset("vllm-h200", ROOT)


def test_the_short_form_wins_over_the_preset() -> None:
    params = benchmark_params(preset=_sim(), model="other-model", k=2, target_al=2.5, concurrencies=[1, 2])
    assert params.model.id == "other-model"
    assert params.server.model == "other-model"
    assert params.model.reasoning  # the rest of the preset's model settings stay
    assert (params.k, params.target_al, params.reference_path, params.concurrencies) == (2, 2.5, None, (1, 2))
    assert params.workload == _sim().benchmark.workload


def test_an_empty_short_form_is_the_preset() -> None:
    sim = _sim()
    params = benchmark_params(preset=sim)
    assert (params.model, params.server, params.placement, params.k) == (
        sim.model,
        sim.server,
        sim.placement,
        3,
    )
    assert params.reference_path == "references/examples.yaml"
    assert params.target_al is None
    assert params.concurrencies == (4, 16)


def test_params_is_the_base_and_the_short_form_wins_over_it() -> None:
    base = benchmark_params(preset=_sim(), target_al=2.2, concurrencies=[8])
    base = base.model_copy(
        update={"prompts_per_concurrency": 3, "model": base.model.model_copy(update={"revision": "abc"})}
    )
    same = benchmark_params(params=base)
    assert same == base
    changed = benchmark_params(params=base, k=4, concurrencies=[2])
    assert (changed.k, changed.concurrencies, changed.prompts_per_concurrency) == (4, (2,), 3)
    assert changed.model.revision == "abc"  # the same model keeps its pinned revision
    other = benchmark_params(params=base, model="m2")
    assert (other.model.id, other.server.model, other.model.revision) == ("m2", "m2", "main")


def test_a_preset_with_params_replaces_their_server_and_placement_only() -> None:
    base = benchmark_params(preset=_sim(), target_al=2.2, concurrencies=[8])
    moved = benchmark_params(preset=_gpu(), params=base)
    assert moved.server == _gpu().server.model_copy(update={"model": base.model.id})
    assert moved.placement == _gpu().placement
    assert (moved.model, moved.target_al, moved.concurrencies, moved.workload) == (
        base.model,
        2.2,
        (8,),
        base.workload,
    )


def test_target_al_drops_the_reference_table_and_k_is_checked_against_it() -> None:
    assert benchmark_params(preset=_gpu(), target_al=3.1).reference_path is None
    with pytest.raises(InvalidInputError, match=r"m2-benchmark's parameters: .*(target|AL|K)"):
        benchmark_params(preset=_gpu(), k=1, target_al=3.5)  # AL above K + 1
    with pytest.raises(InvalidInputError, match=r"^m2-benchmark's parameters: k: .*less than or equal to 16"):
        benchmark_params(preset=_sim(), k=17)


def test_neither_preset_nor_params_is_one_line_naming_both() -> None:
    for build in (benchmark_params, gate_params, calibrate_params):
        with pytest.raises(
            InvalidInputError, match=r"give preset \(.*\) or params \(the full configuration\)"
        ) as err:
            build()
        assert "\n" not in str(err.value)


def test_a_preset_without_a_target_asks_for_one() -> None:
    bare = _gpu().model_copy(update={"reference_path": None})
    with pytest.raises(InvalidInputError, match="give target_al"):
        benchmark_params(preset=bare)
    assert benchmark_params(preset=bare, target_al=2.0).target_al == 2.0
    with pytest.raises(InvalidInputError, match="reference_path"):
        gate_params(preset=bare)


def test_gate_short_form() -> None:
    sim = _sim()
    params = gate_params(preset=sim, model="x", k=5, thinking=ThinkingMode.OFF)
    assert (params.model.id, params.server.model, params.k, params.thinking) == (
        "x",
        "x",
        5,
        ThinkingMode.OFF,
    )
    assert (params.reference_path, params.reference_model) == ("references/examples.yaml", "Qwen3.5")
    assert params.gsm8k == sim.gate.gsm8k
    assert params.load == sim.gate.load
    assert gate_params(params=params) == params
    moved = gate_params(preset=_gpu(), params=params)
    assert moved.placement == _gpu().placement
    assert (moved.server.framework, moved.server.model) == ("vllm", "x")
    assert isinstance(moved, GateParams)


def test_calibrate_short_form() -> None:
    sim = _sim()
    params = calibrate_params(preset=sim, models=["demo-llama-70b", "another"], ks=[2])
    assert params.ks == (2,)
    assert params.models[0] == sim.model
    assert params.models[1] == sim.model.model_copy(update={"id": "another"})
    assert params.reference_path == "results/reference-sim.yaml"
    assert isinstance(calibrate_params(params=params, ks=[1, 3]), CalibrateParams)
    with pytest.raises(InvalidInputError, match=r"models=\[\] is empty"):
        calibrate_params(preset=sim, models=[])


def test_an_unknown_preset_names_the_input_the_value_and_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(
        InvalidInputError,
        match=r"^preset='nope' is not a known preset; known: atom-mi355x, sglang-h200, sim, ",
    ) as err:
        load_preset("nope", ROOT)
    assert f"{ROOT / 'presets'}/*.yaml" in str(err.value)
    with pytest.raises(InvalidInputError, match=r"known: none"):
        load_preset("sim", tmp_path)
    for bad in ("../sim", "Sim", "", "a b", "x" * 65):
        with pytest.raises(InvalidInputError, match=r"is not a preset name"):
            load_preset(bad, ROOT)


def test_a_bad_preset_file_names_the_file_and_the_field(tmp_path: Path) -> None:
    (tmp_path / "presets").mkdir()
    text = (ROOT / "presets" / "sim.yaml").read_text().replace("k: 3", "k: 17")
    (tmp_path / "presets" / "broken.yaml").write_text(text)
    with pytest.raises(InvalidInputError, match=r"broken\.yaml: k: .*less than or equal to 16"):
        load_preset("broken", tmp_path)
    mismatch = yaml.safe_load((ROOT / "presets" / "sim.yaml").read_text())
    mismatch["server"]["model"] = "other"
    with pytest.raises(InvalidInputError, match=r"server\.model 'other' differs from model\.id"):
        preset_from_data(mismatch, "variable x")


def test_presets_are_read_under_alflow_home_else_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert presets_root({"ALFLOW_HOME": str(tmp_path)}) == tmp_path
    monkeypatch.chdir(tmp_path)
    assert presets_root({}) == tmp_path
    assert presets_root({"ALFLOW_HOME": ""}) == tmp_path


def test_a_preset_from_a_variable_value_as_an_object_or_yaml_text() -> None:
    text = (ROOT / "presets" / "sim.yaml").read_text()
    assert preset_from_data(text, "Prefect Variable alflow-preset-x") == _sim()
    assert preset_from_data(yaml.safe_load(text), "Prefect Variable alflow-preset-x") == _sim()
    with pytest.raises(InvalidInputError, match=r"^Prefect Variable alflow-preset-x: not valid YAML"):
        preset_from_data("a: [", "Prefect Variable alflow-preset-x")
    with pytest.raises(
        InvalidInputError, match=r"^Prefect Variable alflow-preset-x: expected a YAML mapping"
    ):
        preset_from_data("just text", "Prefect Variable alflow-preset-x")


def test_the_short_form_keeps_the_full_configuration_valid() -> None:
    full = benchmark_params(preset=_sim(), target_al=2.5)
    assert BenchmarkParams.model_validate(full.model_dump(mode="json")) == full
