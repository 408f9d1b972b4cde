"""An external server's API key by the name of its variable (``api_key_env``): only the name is stored.

The value is read from the environment where requests are built (:func:`alflow_infra.runners.base.handle_api_key`); a
name that is not one (a pasted key, ``KEY=value``) is refused without being echoed; an unset or empty variable
fails in one line naming it, when the server is attached and before ``alflow run`` starts a flow.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError
from typer.testing import CliRunner

from alflow.cli import app
from alflow.config import BenchmarkParams, ExternalServer, ServerPlacement
from alflow.errors import InvalidInputError
from alflow.util.rows import dump_row
from alflow_infra.runners import ExternalRunner
from alflow_infra.runners.base import api_key_from_env, handle_api_key
from tests.bad_inputs import BASES

pytestmark = pytest.mark.unit

VAR = "ALFLOW_TEST_EXTERNAL_KEY"
CANARY = "sk-CanaryExternalKey-7f3a"


def _external(**fields: Any) -> ExternalServer:
    return ExternalServer(base_url="http://10.0.0.5:8000", dialect="vllm", **fields)


def test_api_key_env_is_a_name_and_the_stored_config_holds_only_the_name() -> None:
    assert _external().api_key_env is None
    runner = _external(api_key_env="VLLM_API_KEY")
    assert runner.api_key_env == "VLLM_API_KEY"
    assert runner.model_dump(mode="json")["api_key_env"] == "VLLM_API_KEY"
    placement = ServerPlacement.model_validate({"runner": {**runner.model_dump(mode="json")}})
    assert isinstance(placement.runner, ExternalServer)
    assert placement.runner.api_key_env == "VLLM_API_KEY"
    assert _external(api_key_env="_key_2").api_key_env == "_key_2"


@pytest.mark.parametrize(
    "value",
    ["", CANARY, f"{VAR}={CANARY}", f"{CANARY} ", "2KEY", "MY KEY", "KEY\x00X", "KEY\nX", "CLÉ"],
)
def test_a_value_that_is_not_a_variable_name_is_refused_without_being_echoed(value: str) -> None:
    with pytest.raises(ValidationError) as info:
        _external(api_key_env=value)
    text = str(info.value)
    assert "api_key_env" in text
    assert "NAME of an environment variable" in text
    assert CANARY not in text
    (error,) = info.value.errors()
    assert "\n" not in error["msg"]
    if value:
        assert repr(value) not in text


def test_the_refusal_of_credentials_in_a_base_url_points_to_api_key_env() -> None:
    with pytest.raises(ValidationError) as info:
        ExternalServer(base_url=f"http://u:{CANARY}@10.0.0.5:8000", dialect="vllm")
    assert "placement.runner.api_key_env" in str(info.value)
    assert CANARY not in str(info.value)


def test_the_handle_carries_the_name_and_the_key_is_read_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(VAR, CANARY)
    handle = ExternalRunner(_external(api_key_env=VAR)).attach()
    assert handle.api_key_env == VAR
    assert handle_api_key(handle) == CANARY
    assert dump_row(handle)["api_key_env"] == VAR
    assert CANARY not in repr(handle)
    assert CANARY not in str(dump_row(handle))
    assert handle_api_key(ExternalRunner(_external()).attach()) is None
    assert api_key_from_env(None) is None


@pytest.mark.parametrize(("value", "said"), [(None, "not set"), ("", "empty")])
def test_an_unset_or_empty_variable_fails_at_attach_in_one_line_naming_it(
    monkeypatch: pytest.MonkeyPatch, value: str | None, said: str
) -> None:
    if value is None:
        monkeypatch.delenv(VAR, raising=False)
    else:
        monkeypatch.setenv(VAR, value)
    with pytest.raises(InvalidInputError) as info:
        ExternalRunner(_external(api_key_env=VAR)).attach()
    message = str(info.value)
    assert "\n" not in message
    assert f"api_key_env names {VAR}, which is {said}" in message
    assert "the Prefect worker" in message


def test_a_value_that_cannot_be_a_header_is_refused_without_being_echoed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for bad in (f"{CANARY}\r\nX-Injected: 1", f" {CANARY}", f"{CANARY}é"):
        monkeypatch.setenv(VAR, bad)
        with pytest.raises(InvalidInputError) as info:
            api_key_from_env(VAR)
        assert f"the value of {VAR} (api_key_env) must be printable ASCII" in str(info.value)
        assert CANARY not in str(info.value)


def test_check_launchable_refuses_an_unset_variable_before_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from alflow_flows.common import check_launchable

    data = copy.deepcopy(BASES["m2"])
    data["placement"] = {
        "runner": {
            "kind": "external",
            "base_url": "http://127.0.0.1:9",
            "dialect": "vllm",
            "api_key_env": VAR,
        },
        "results_root": str(tmp_path / "results"),
    }
    data["target_al"] = 2.5
    params = BenchmarkParams.model_validate(data)
    monkeypatch.delenv(VAR, raising=False)
    with pytest.raises(InvalidInputError, match=f"api_key_env names {VAR}, which is not set"):
        check_launchable(params)
    monkeypatch.setenv(VAR, CANARY)
    check_launchable(params)


def test_alflow_run_names_the_unset_variable_in_one_line_with_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = copy.deepcopy(BASES["m2"])
    data.setdefault("placement", {})["runner"] = {
        "kind": "external",
        "base_url": "http://127.0.0.1:9",
        "dialect": "vllm",
        "api_key_env": VAR,
    }
    data["placement"]["results_root"] = str(tmp_path / "results")
    path = tmp_path / "m2.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    monkeypatch.delenv(VAR, raising=False)
    result = CliRunner().invoke(app, ["run", "m2", "--config", str(path)])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.output
    assert f"api_key_env names {VAR}, which is not set" in errors[0]
    assert "Traceback" not in result.output
    assert not (tmp_path / "results").exists()
