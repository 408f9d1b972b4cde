"""What could fail after measuring is checked before, and the last steps never lose a measured run.

A Japanese model id with a bidi control through a real M2 against the sim: every Prefect key is derived
(:func:`alflow.util.names.safe_key`), the id stays data, and the run ends complete with report.html written.
An M0 whose reference table sits under a regular file is refused before a server starts.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prefect.client.orchestration import get_client

from alflow.config import CalibrateParams, ModelSpec, SamplingParams, ServerPlacement, server_config
from alflow_flows.calibrate import calibrate
from tests.integration.sim_runs import flow_run_of, quick_m2, run_artifacts

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("prefect_harness")]

NAME = "日本語モデル/テスト-8B"  # Japanese letters (a zero-width space or a bidi override is refused)
MODEL = ModelSpec(id=NAME, sampling_thinking_off=SamplingParams(temperature=0.0, max_tokens=32))
SERVER = server_config(framework="sim", model=NAME, extra_args=("--time-scale", "0", "--seed", "5"))


def _artifact_keys(state: object) -> list[str]:
    with get_client(sync_client=True) as client:
        run = client.read_flow_run(flow_run_of(state))
    return [str(a.key) for a in run_artifacts(state) if a.key] + [f"run-name:{run.name}"]


def test_m2_with_a_japanese_model_id_completes_and_writes_report_html(tmp_path: Path) -> None:
    state = quick_m2(MODEL, SERVER, tmp_path / "results", k=3, target_al=2.5, isl=32, osl=16)
    run_dir = Path(state.result().run_dir)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    assert {"report.md", "report.html", "summary.json", "spec_stats.parquet"} <= set(manifest["files"])
    assert (run_dir / "report.html").stat().st_size > 0
    assert manifest["config"]["model"]["id"] == NAME  # the name is data, kept as typed
    keys = _artifact_keys(state)
    assert any(k.startswith("m2-") and k.endswith("-html") for k in keys), keys
    for key in keys:
        assert key.isascii(), key  # keys and the run name are derived, never the raw id


def test_m0_under_a_regular_file_is_refused_before_a_server_starts(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    params = CalibrateParams(
        models=(MODEL,),
        ks=(2,),
        server=SERVER,
        placement=ServerPlacement(results_root=str(tmp_path / "results")),
        reference_path=str(afile / "ref.yaml"),
    )
    state = calibrate(params=params, return_state=True)
    assert state.is_failed()
    assert f"reference_path '{afile / 'ref.yaml'}': its folder" in str(state.message)
    assert not (tmp_path / "results").exists()  # refused before the run directory, before measuring
