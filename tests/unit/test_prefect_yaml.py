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


def test_flow_parameters_give_a_ui_form() -> None:
    """Every deployed flow takes pydantic models whose fields all carry descriptions."""
    for spec in DEPLOYMENTS:
        flow = load_flow(str(spec["entrypoint"]))
        schema = flow.parameters.model_dump()
        assert schema["properties"], spec["name"]
