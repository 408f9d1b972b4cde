"""Every local (sim) deployment in prefect.yaml runs to completion with its own parameters (issue 19, item 2 in part).

Each runs as a worker runs it: from the project root (the deployments' pull step sets the working
directory to ``$ALFLOW_HOME``), with the parameters exactly as prefect.yaml gives them, short forms and
presets included. The project root here is a copy in ``tmp_path`` (``presets/`` and ``references/``), so
the runs' stores and M0's table land there, not in the repository.

``m1-gate`` and ``sweep-nightly`` used to stop with "no reference AL for Qwen3.5 ... thinking=off": the example
table holds thinking=on curves only, so they now ask for thinking on (the sim's demo model reasons). The
demo has its own tests; M0's write a table under ``results/``, checked in tests/integration/test_flows.py.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from alflow_deployments.serve import load_deployments, load_flow

ROOT = Path(__file__).resolve().parents[2]
DEPLOYMENTS = {d["name"]: d for d in load_deployments(ROOT / "prefect.yaml")}

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("prefect_harness")]


@pytest.mark.parametrize("name", ["m0-calibrate", "m1-gate", "m2-benchmark", "sweep-nightly"])
def test_a_local_deployment_runs_to_completion_with_its_parameters(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = DEPLOYMENTS[name]
    assert spec["work_pool"]["name"] == "local"
    flow = load_flow(str(spec["entrypoint"]))
    home = tmp_path / "home"
    for folder in ("presets", "references"):
        shutil.copytree(ROOT / folder, home / folder)
    monkeypatch.setenv("ALFLOW_HOME", str(home))
    monkeypatch.chdir(home)
    params = flow.validate_parameters(dict(spec.get("parameters") or {}))
    state = flow(**params, return_state=True)
    assert state.is_completed(), state.message
    manifests = list((home / "results").rglob("manifest.json"))
    assert manifests, f"{name}: no run stored under the project root's results/"
