"""prefect.yaml without a server: entrypoints load, parameters validate (short forms resolve over their presets), crons parse."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from prefect.client.schemas.schedules import CronSchedule
from prefect.exceptions import ParameterTypeError
from pydantic import BaseModel

from alflow.config import (
    BenchmarkParams,
    CalibrateParams,
    GateParams,
    ServerConfig,
    SweepParams,
    SyntheticAcceptance,
)
from alflow.frameworks.recipes import build_launch
from alflow.frameworks.versions import CapabilityError
from alflow.methods.common import point_server
from alflow.reference.table import ReferenceTableError, load_reference
from alflow_deployments.serve import load_deployments, load_flow, schedules
from alflow_flows.presets import m0_params, m1_params, m2_params, sweep_params_of

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
DEPLOYMENTS = load_deployments(ROOT / "prefect.yaml")

SHORT_FORMS = {
    "flows/calibrate.py:calibrate": m0_params,
    "flows/gate.py:gate": m1_params,
    "flows/benchmark.py:benchmark": m2_params,
    "flows/sweep.py:sweep": sweep_params_of,
}
"""Flows with a short form -> what turns their parameters into the full configuration."""

SHORT_FORM_DEPLOYMENTS = (
    "m1-gate",
    "m2-benchmark",
    "gpu-m1-gate",
    "gpu-m2-benchmark",
    "gpu-m2-benchmark-sglang",
    "gpu-m2-benchmark-trtllm",
    "sweep-nightly",
)
"""Deployments whose UI form is the short form alone (preset, model, K, target AL/thinking, concurrencies)."""


@pytest.fixture(autouse=True)
def _project_root(monkeypatch: pytest.MonkeyPatch) -> None:
    """Presets are read under $ALFLOW_HOME, as a worker's runs read them (the pull step sets it)."""
    monkeypatch.setenv("ALFLOW_HOME", str(ROOT))


def _full(spec: dict[str, object], parameters: dict[str, object] | None = None) -> list[BaseModel]:
    """The full configurations a run of ``spec`` would use: the short form resolved, or the models given."""
    flow = load_flow(str(spec["entrypoint"]))
    given = dict(spec.get("parameters") or {}) if parameters is None else parameters  # type: ignore[call-overload]
    validated = flow.validate_parameters(given)  # what a deployment run does with the UI's values
    validated.pop("dry_run", None)  # the plan-only switch, not part of the configuration
    resolve = SHORT_FORMS.get(str(spec["entrypoint"]))
    if resolve is not None:
        return [resolve(**validated)]
    return [value for value in validated.values() if isinstance(value, BaseModel)]


def test_expected_deployments_exist() -> None:
    names = {d["name"] for d in DEPLOYMENTS}
    assert {"m0-calibrate", "m1-gate", "m2-benchmark", "sweep-nightly", "demo"} <= names
    assert next(d for d in DEPLOYMENTS if d["name"] == "sweep-nightly")["schedules"][0]["cron"]


@pytest.mark.parametrize("spec", DEPLOYMENTS, ids=lambda d: d["name"])
def test_entrypoint_loads_and_parameters_validate(spec: dict[str, object]) -> None:
    full = _full(spec)
    if spec["name"] != "demo":
        assert len(full) == 1, f"{spec['name']}: {full}"
    for schedule in schedules(spec):  # type: ignore[arg-type]
        assert isinstance(schedule, CronSchedule)


def test_bad_parameters_are_rejected_like_a_deployment_run() -> None:
    spec = next(d for d in DEPLOYMENTS if d["name"] == "m2-benchmark")
    flow = load_flow(str(spec["entrypoint"]))
    params = copy.deepcopy(spec["parameters"])
    params["concurrencies"] = ["many"]
    with pytest.raises(ParameterTypeError, match="concurrencies"):
        flow.validate_parameters(params)


def test_the_ui_forms_of_m1_and_m2_deployments_are_short_forms() -> None:
    """The advanced ``params`` stays empty in these deployments: the custom-run form opens short."""
    for name in SHORT_FORM_DEPLOYMENTS:
        spec = next(d for d in DEPLOYMENTS if d["name"] == name)
        parameters = spec.get("parameters") or {}
        assert "params" not in parameters, name
        assert parameters.get("preset"), name


def test_invalid_cron_is_rejected() -> None:
    with pytest.raises(ValueError, match="Invalid cron"):
        schedules({"schedules": [{"cron": "61 * * * *"}]})


def _undescribed(schema: dict[str, object]) -> list[str]:
    """``Model.field`` of every field of every model in a Prefect parameter schema that has no description."""
    missing = []
    definitions = schema.get("definitions") or {}
    assert isinstance(definitions, dict)
    for name, model in definitions.items():
        if not isinstance(model, dict) or model.get("type") != "object":
            continue  # an enum or a literal: its values are the form's choices
        for field, prop in (model.get("properties") or {}).items():
            if not (isinstance(prop, dict) and str(prop.get("description") or "").strip()):
                missing.append(f"{name}.{field}")
    return missing


def test_flow_parameters_give_a_ui_form() -> None:
    """Every deployed flow takes pydantic models whose fields all carry descriptions (the UI form's help)."""
    for spec in DEPLOYMENTS:
        flow = load_flow(str(spec["entrypoint"]))
        schema = flow.parameters.model_dump()
        assert schema["properties"], spec["name"]
        assert schema.get("definitions"), f"{spec['name']}: no pydantic model behind the parameters"
        assert _undescribed(schema) == [], spec["name"]
        if str(spec["entrypoint"]) in SHORT_FORMS:  # each short-form field says what it does in the form
            top = {
                name: str(prop.get("description") or "").strip()
                for name, prop in schema["properties"].items()
            }
            assert all(top.values()), f"{spec['name']}: top-level parameters without a description: {top}"
            assert list(top)[-1] == "params", f"{spec['name']}: the advanced params is not last: {list(top)}"


def test_the_description_check_finds_a_field_without_one() -> None:
    schema = {"definitions": {"M": {"type": "object", "properties": {"a": {"description": "A."}, "b": {}}}}}
    assert _undescribed(schema) == ["M.b"]


def _launches(params: BaseModel) -> list[tuple[str, ServerConfig]]:
    """Every server configuration a flow would launch for ``params``: (what, config), synthetic knobs set for M2.

    An M2 target comes from ``target_al``, else from its reference table where the repository has it,
    else (a GPU reference that an M0 run writes) a fractional AL: the strictest gate (TensorRT-LLM's float
    parser) applies to it.
    """
    out: list[tuple[str, ServerConfig]] = []
    if isinstance(params, SweepParams):
        for k in params.ks:
            out += _launches(params.gate.model_copy(update={"k": k}))
            out += _launches(params.benchmark.model_copy(update={"k": k}))
    elif isinstance(params, CalibrateParams):
        for model in params.models:
            for k in params.ks:
                server = point_server(
                    params.server, model.id, params.method, k, draft_model=params.draft_model
                )
                out.append((f"m0 {model.id} K={k}", server))
    elif isinstance(params, GateParams):
        server = point_server(
            params.server, params.model.id, params.method, params.k, draft_model=params.draft_model
        )
        out.append((f"m1 K={params.k}", server))
    elif isinstance(params, BenchmarkParams):
        target = params.target_al
        if target is None:
            assert params.reference_path is not None
            path = ROOT / params.reference_path
            name = params.reference_model or params.model.id
            try:
                target = load_reference(path).lookup(name, params.method, params.thinking, params.k).al
            except (FileNotFoundError, ReferenceTableError):
                # no table here (a GPU reference is written by M0): rendering needs a target, and a
                # fractional one is the strictest
                target = 1.0 + 0.61 * params.k
        synthetic = SyntheticAcceptance(target_al=target, scheme=params.scheme)
        server = point_server(
            params.server,
            params.model.id,
            params.method,
            params.k,
            draft_model=params.draft_model,
            synthetic=synthetic,
        )
        out.append((f"m2 K={params.k} target {target:.3f}", server))
    return out


@pytest.mark.parametrize("spec", DEPLOYMENTS, ids=lambda d: d["name"])
def test_every_deployment_passes_the_release_gates_and_renders(spec: dict[str, object]) -> None:
    """What each deployment would start: its recipe renders it and its image is new enough for its knobs."""
    launches = [item for value in _full(spec) for item in _launches(value)]
    if spec["name"] == "demo":
        assert launches == []
        return
    assert launches, spec["name"]
    for what, server in launches:
        launch = build_launch(server)  # a too-old image raises CapabilityError naming the minimum
        if server.image is not None and server.framework != "sim":
            gates = [*launch.image_warnings, *launch.warnings]
            assert not [w for w in gates if "version unknown" in w], (spec["name"], what, gates)
        if server.synthetic is not None:
            assert launch.synthetic is not None, (spec["name"], what)


def test_one_gpu_m2_deployment_per_framework_with_images_new_enough() -> None:
    frameworks = {}
    for spec in DEPLOYMENTS:
        if str(spec["name"]).startswith("gpu-m2-"):
            [params] = _full(spec)
            assert isinstance(params, BenchmarkParams)
            frameworks[params.server.framework] = params.server.image
    assert set(frameworks) == {"vllm", "sglang", "trtllm"}
    # an image too old for its knobs is refused at rendering: v0.11.0 (the old pin) has no synthetic mode
    old = next(d for d in DEPLOYMENTS if d["name"] == "gpu-m2-benchmark")
    [full] = _full(old)
    assert isinstance(full, BenchmarkParams)
    data = full.model_dump(mode="json")
    data["server"]["image"] = "vllm/vllm-openai:v0.11.0"
    # the advanced form from the UI: the full configuration as params, the preset emptied
    [params] = _full(old, {**old["parameters"], "preset": None, "params": data})
    [(_, server)] = _launches(params)
    with pytest.raises(CapabilityError, match=r"older than v0\.20\.0"):
        build_launch(server)


def test_k_sweeps_cover_k_1_to_7_sim_active_and_one_inactive_gpu_sweep_per_framework() -> None:
    sweeps = {str(d["name"]): d for d in DEPLOYMENTS if str(d["entrypoint"]).startswith("flows/sweep.py")}
    names = {f"{d['entrypoint'].split(':')[1]}/{d['name']}" for d in DEPLOYMENTS}  # type: ignore[union-attr]
    nightly = sweeps["sweep-nightly"]
    assert nightly["work_pool"]["name"] == "local"  # type: ignore[index]
    assert [s["active"] for s in nightly["schedules"]] == [True]  # type: ignore[union-attr]
    [resolved] = _full(nightly)
    assert isinstance(resolved, SweepParams)
    assert resolved.ks == (1, 2, 3, 4, 5, 6, 7)
    frameworks = set()
    for name, spec in sweeps.items():
        if not name.startswith("gpu-"):
            continue
        params = SweepParams.model_validate(spec["parameters"]["params"])  # type: ignore[index]
        assert params.ks == (1, 2, 3, 4, 5, 6, 7), name
        assert [s["active"] for s in spec["schedules"]] == [False], name  # type: ignore[union-attr]
        # the sweep itself never takes a GPU node's only worker slot: its children need it
        assert spec["work_pool"]["name"] != "gpu-h200", name  # type: ignore[index]
        assert params.fan_out is not None, name
        for child in (params.fan_out.gate_deployment, params.fan_out.benchmark_deployment):
            flow_name, deployment = child.split("/")
            assert f"{ {'m1-gate': 'gate', 'm2-benchmark': 'benchmark'}[flow_name] }/{deployment}" in names, (
                child
            )
        assert len({n.gpu_host for n in params.fan_out.nodes}) == len(params.fan_out.nodes) >= 2
        frameworks.add(params.benchmark.server.framework)
    assert frameworks == {"vllm", "sglang", "trtllm"}
