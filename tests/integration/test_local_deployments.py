"""Every local (sim) deployment in prefect.yaml runs to completion with its own parameters (issue 19, item 2 in part).

``m1-gate`` and ``sweep-nightly`` used to stop with "no reference AL for Qwen3.5 ... thinking=off": the example
table holds thinking=on curves only, so they now ask for thinking on (the sim's demo model reasons). The
demo has its own tests; M0's write a table under ``results/``, checked in tests/integration/test_flows.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from deployments.serve import load_deployments, load_flow

ROOT = Path(__file__).resolve().parents[2]
DEPLOYMENTS = {d["name"]: d for d in load_deployments(ROOT / "prefect.yaml")}

pytestmark = pytest.mark.usefixtures("prefect_harness")


def _absolute(value: Any, tmp_path: Path) -> Any:
    """The deployment's parameters with the run store in ``tmp_path`` and repository paths made absolute."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if key == "results_root":
                out[key] = str(tmp_path / "results")
            elif key == "reference_path" and isinstance(item, str) and (ROOT / item).exists():
                out[key] = str(ROOT / item)
            elif key == "reference_path":
                out[key] = str(tmp_path / Path(item).name)
            else:
                out[key] = _absolute(item, tmp_path)
        return out
    if isinstance(value, list):
        return [_absolute(item, tmp_path) for item in value]
    return value


@pytest.mark.parametrize("name", ["m0-calibrate", "m1-gate", "m2-benchmark", "sweep-nightly"])
def test_a_local_deployment_runs_to_completion_with_its_parameters(name: str, tmp_path: Path) -> None:
    spec = DEPLOYMENTS[name]
    assert spec["work_pool"]["name"] == "local"
    flow = load_flow(str(spec["entrypoint"]))
    params = flow.validate_parameters(_absolute(dict(spec.get("parameters") or {}), tmp_path))
    state = flow(**params, return_state=True)
    assert state.is_completed(), state.message
