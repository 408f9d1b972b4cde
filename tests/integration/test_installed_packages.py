"""The layers above the core install under alflow's own names: nothing generic lands on the import path."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

CHECK = """
import importlib, json
found = {}
for name in ("tasks", "flows", "infra", "deployments", "alflow_tasks", "alflow_flows", "alflow_infra",
             "alflow_deployments", "alflow_flows.entry", "alflow_infra.runners"):
    try:
        importlib.import_module(name)
        found[name] = True
    except ModuleNotFoundError:
        found[name] = False
print(json.dumps(found))
"""


def test_the_layers_import_by_alflows_names_and_the_generic_names_do_not(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHECK],
        cwd=tmp_path,  # not the project's root, whose folders would come first on the path of ``-c``
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    found = json.loads(done.stdout)
    assert found == {
        "tasks": False,
        "flows": False,
        "infra": False,
        "deployments": False,
        "alflow_tasks": True,
        "alflow_flows": True,
        "alflow_infra": True,
        "alflow_deployments": True,
        "alflow_flows.entry": True,
        "alflow_infra.runners": True,
    }
