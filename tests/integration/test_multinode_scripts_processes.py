"""The recipes' multi-node sbatch scripts run with stand-in srun and framework programs; they start processes."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from alflow.config import ServerConfig
from alflow.frameworks.recipes import ALL_ADDRESSES, build_launch
from tests.integration.test_multinode_wrapper import node_output, run_script
from tests.unit.test_multinode_scripts import config

pytestmark = pytest.mark.integration

# --- the recipes' scripts run: stand-in framework programs print what each node received ---------------


def fake_program(tmp_path: Path, name: str) -> None:
    path = tmp_path / "bin" / name
    path.write_text('#!/bin/bash\nprintf "%s\\n" "$@"\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def run_with_fakes(tmp_path: Path, cfg: ServerConfig, programs: tuple[str, ...]) -> None:
    launch = build_launch(cfg, default_host=ALL_ADDRESSES)
    if launch.files:
        launch = launch.relocated(str(tmp_path / "files"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for program in programs:
        fake_program(tmp_path, program)
    # run_script puts its own bin (srun, scontrol) first; ours follows it, before the real PATH
    result = run_script(tmp_path / "job", launch, path_prefix=str(bin_dir))
    assert result.returncode in (0, 1), result.stderr


def test_vllm_workers_run_headless_and_every_node_joins_the_head(tmp_path: Path) -> None:
    run_with_fakes(tmp_path, config(framework="vllm", nodes=2, parallelism={"tp": 16, "ep": 16}), ("vllm",))
    head = node_output(tmp_path / "job", 0)
    worker = node_output(tmp_path / "job", 1)
    assert head[head.index("--node-rank") + 1] == "0"
    assert worker[worker.index("--node-rank") + 1] == "1"
    for lines in (head, worker):
        assert lines[lines.index("--master-addr") + 1] == "10.0.0.1"
        assert lines[lines.index("--nnodes") + 1] == "2"
    assert "--headless" not in head
    assert "--headless" in worker


def test_trtllm_runs_one_mpi_task_per_gpu_on_each_node(tmp_path: Path) -> None:
    run_with_fakes(
        tmp_path, config(framework="trtllm", nodes=2, parallelism={"tp": 4}), ("trtllm-llmapi-launch",)
    )
    for node in (0, 1):
        lines = node_output(tmp_path / "job", node)
        assert lines.count("trtllm-serve") == 2  # tp=4 over 2 nodes: 2 tasks per node
