"""The live release gate against a real server process: the sim reporting a framework version in its dialect's way."""

from __future__ import annotations

from pathlib import Path

import pytest

from alflow.config import ProcessOptions, ServerConfig, SpeculativeConfig, SyntheticAcceptance, server_config
from alflow.frameworks.versions import CapabilityError
from alflow_infra.lifecycle import serving, start_server
from alflow_infra.runners.registry import entries

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("run_dirs_in_tmp_path")]


@pytest.fixture(autouse=True)
def _state_dir_in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALFLOW_STATE_DIR", str(tmp_path / "state"))


def sim(dialect: str, version: str | None, al: float = 2.78) -> ServerConfig:
    extra = ("--time-scale", "0", *(("--framework-version", version) if version else ()))
    return server_config(
        framework="sim",
        model="m",
        sim_dialect=dialect,  # type: ignore[arg-type]
        speculative=SpeculativeConfig(method="mtp", k=3),
        synthetic=SyntheticAcceptance(target_al=al),
        readiness_timeout_s=30,
        extra_args=extra,
    )


@pytest.mark.parametrize(
    ("dialect", "old", "minimum"),
    [
        ("vllm", "0.11.0", "v0.20.0"),
        ("sglang", "0.5.14", "v0.5.16"),
        ("trtllm", "1.3.0rc14", "v1.3.0rc15"),
        ("trtllm", "1.3.0rc18", "v1.3.0rc19"),  # the AL counters (PR #12636)
    ],
)
def test_a_live_server_older_than_its_knobs_is_refused_and_stopped(
    dialect: str, old: str, minimum: str
) -> None:
    with pytest.raises(CapabilityError, match=rf"live server \(GET /\w+\) is v{old}, older than {minimum}"):
        start_server(sim(dialect, old), ProcessOptions())
    assert list(entries()) == []  # the refused server was stopped (and left the registry)


def test_a_live_server_new_enough_records_its_version() -> None:
    with serving(sim("trtllm", "1.3.0rc19"), ProcessOptions()) as handle:
        assert handle.provenance.framework_version == "1.3.0rc19"
        assert not [w for w in handle.provenance.warnings if "version unknown" in str(w)]


def test_the_simulated_engine_without_a_framework_version_is_not_gated() -> None:
    with serving(sim("sglang", None), ProcessOptions()) as handle:
        assert handle.provenance.framework_version == "alflow-sim"
