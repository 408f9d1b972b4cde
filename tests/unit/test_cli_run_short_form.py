"""``alflow run``'s short form: which options each flow takes, and how they land over --config / --preset."""

from __future__ import annotations

from pathlib import Path

import pytest

from alflow.cli.run import SHORT_FORM, load_params, resolve_params, short_form
from alflow.config import BenchmarkParams, SweepParams
from alflow.errors import InvalidInputError
from tests.bad_inputs import _with

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _project_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALFLOW_HOME", str(ROOT))  # presets/ of this project
    monkeypatch.delenv("PREFECT_API_URL", raising=False)  # no Prefect Variable is asked


def test_each_flow_takes_the_fields_of_its_ui_form() -> None:
    import inspect

    import alflow_flows.benchmark
    import alflow_flows.calibrate
    import alflow_flows.gate
    import alflow_flows.sweep

    for flow, fn in (
        ("m0", alflow_flows.calibrate.calibrate),
        ("m1", alflow_flows.gate.gate),
        ("m2", alflow_flows.benchmark.benchmark),
        ("sweep", alflow_flows.sweep.sweep),
    ):
        form = [
            name
            for name in inspect.signature(fn.fn).parameters
            if name not in ("preset", "params", "dry_run")
        ]
        assert list(SHORT_FORM[flow][1]) == form, flow


def test_an_option_of_another_flow_is_refused_naming_what_the_flow_takes() -> None:
    with pytest.raises(InvalidInputError) as err:
        short_form("m1", {"model": None, "ks": [1, 2]})
    assert str(err.value) == "--ks does not apply to flow m1 (it takes --model, --k, --thinking)"
    assert short_form("m2", {"model": None, "k": 2, "target_al": None}) == {"k": 2}


def test_neither_config_nor_preset_is_refused() -> None:
    with pytest.raises(InvalidInputError, match=r"give --config FILE\.yaml .* or --preset NAME"):
        resolve_params("m2", None, None, {"k": 2})


def test_the_preset_and_the_short_form_make_the_full_parameters() -> None:
    params = resolve_params("m2", None, "sim", {"k": 2, "target_al": 2.2, "concurrencies": [4]})
    assert isinstance(params, BenchmarkParams)
    assert (params.k, params.target_al, params.concurrencies) == (2, 2.2, (4,))
    assert params.server.framework == "sim"
    sweep = resolve_params("sweep", None, "sim", {"ks": [1, 2]})
    assert isinstance(sweep, SweepParams)
    assert sweep.ks == (1, 2)


def test_a_config_file_alone_is_the_flow_s_parameters_and_a_preset_replaces_its_server(
    tmp_path: Path,
) -> None:
    path = tmp_path / "m2.yaml"
    path.write_bytes(_with("m2", {"server": {"framework": "sim", "model": "demo-llama-70b"}}))
    loaded = load_params("m2", path)
    assert resolve_params("m2", loaded, None, {}) is loaded
    over = resolve_params("m2", loaded, "sim", {"k": 2})
    assert isinstance(over, BenchmarkParams)
    assert over.k == 2
    assert over.server.extra_args == ("--time-scale", "0")  # the preset's server, not the file's
    assert over.concurrencies == loaded.concurrencies  # the rest from the file
