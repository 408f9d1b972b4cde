"""The console script refuses to run when a layer package (``tasks``, ``flows``, ...) would not be alflow's own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from alflow.cli.entry import LAYERS, layer_problem

pytestmark = pytest.mark.integration


def test_in_this_install_every_layer_is_alflows_own() -> None:
    assert layer_problem() is None


def test_another_distribution_installing_a_layer_name_is_named() -> None:
    def claims() -> dict[str, list[str]]:
        return {"alflow": ["alflow"], "tasks": ["alflow", "celery-tasks"], "flows": ["alflow"]}

    problem = layer_problem(claims=claims)
    assert problem is not None
    assert "package 'tasks' is installed by celery-tasks as well as by alflow" in problem


def test_a_layer_package_that_comes_first_on_the_path_stops_the_command(tmp_path: Path) -> None:
    shadow = tmp_path / "flows"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", "from alflow.cli import main; main(['--version'])"],
        env=env,
        cwd=tmp_path.parent,  # not the project's root, whose folders come first on the path of ``-c``
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith(
        f"error: package 'flows' would be imported from {shadow.resolve()}, not from alflow's"
    )


def test_the_layers_checked_are_the_projects_packages_above_alflow() -> None:
    from tests.unit.test_architecture import LAYERS as ALL_LAYERS

    assert ("alflow", *LAYERS) == ALL_LAYERS


def test_the_package_main_stays_the_console_scripts_entry_after_the_command_tree_loads() -> None:
    import alflow.cli
    from alflow.cli import entry

    assert alflow.cli.app is not None  # loads the command tree (alflow.cli.root)
    from alflow.cli import main

    assert main is entry.main
