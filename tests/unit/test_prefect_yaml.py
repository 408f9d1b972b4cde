"""prefect.yaml without a server: entrypoints load, parameters validate, crons parse."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from prefect.client.schemas.schedules import CronSchedule
from prefect.exceptions import ParameterTypeError
from pydantic import BaseModel

from deployments.serve import load_deployments, load_flow, schedules

ROOT = Path(__file__).resolve().parents[2]
DEPLOYMENTS = load_deployments(ROOT / "prefect.yaml")


def test_expected_deployments_exist() -> None:
    names = {d["name"] for d in DEPLOYMENTS}
    assert {"m0-calibrate", "m1-gate", "m2-benchmark", "sweep-nightly", "demo"} <= names
    assert next(d for d in DEPLOYMENTS if d["name"] == "sweep-nightly")["schedules"][0]["cron"]


@pytest.mark.parametrize("spec", DEPLOYMENTS, ids=lambda d: d["name"])
def test_entrypoint_loads_and_parameters_validate(spec: dict[str, object]) -> None:
    flow = load_flow(str(spec["entrypoint"]))
    params = dict(spec.get("parameters") or {})  # type: ignore[call-overload]
    validated = flow.validate_parameters(params)  # what a deployment run does with the UI's values
    for name, value in validated.items():
        if value is None:  # an optional parameter left at its default
            continue
        assert isinstance(value, BaseModel), f"{spec['name']}: parameter {name} is not a pydantic model"
    for schedule in schedules(spec):  # type: ignore[arg-type]
        assert isinstance(schedule, CronSchedule)


def test_bad_parameters_are_rejected_like_a_deployment_run() -> None:
    spec = next(d for d in DEPLOYMENTS if d["name"] == "m2-benchmark")
    flow = load_flow(str(spec["entrypoint"]))
    params = copy.deepcopy(spec["parameters"])
    params["params"]["concurrencies"] = ["many"]
    with pytest.raises(ParameterTypeError, match="concurrencies"):
        flow.validate_parameters(params)


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


def test_the_description_check_finds_a_field_without_one() -> None:
    schema = {"definitions": {"M": {"type": "object", "properties": {"a": {"description": "A."}, "b": {}}}}}
    assert _undescribed(schema) == ["M.b"]
