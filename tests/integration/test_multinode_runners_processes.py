"""The process runner filling a Launch's node placeholders and listing its metrics URLs; it starts processes."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from alflow.config import ProcessOptions
from alflow.frameworks.launch import MetricsEndpoint
from alflow_infra.runners import ProcessRunner
from tests.unit.test_multinode_runners import launch

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("run_dirs_in_tmp_path")]


def test_process_runner_runs_the_filled_arguments_and_lists_metrics_urls(tmp_path: Path) -> None:
    runner = ProcessRunner(ProcessOptions(log_dir=str(tmp_path)))
    printing = launch(
        argv=("printf", "%s\\n"),
        host="127.0.0.1",
        metrics_endpoints=(MetricsEndpoint(0, 30000), MetricsEndpoint(0, 30002)),
    )
    handle = runner.start(printing)
    try:
        assert handle.nodes == 1
        assert handle.metrics_urls == ("http://127.0.0.1:30000/metrics", "http://127.0.0.1:30002/metrics")
        assert handle.all_metrics_urls == handle.metrics_urls
        assert handle.provenance.argv[-1] == "127.0.0.1:5000"  # type: ignore[index]
        deadline = time.monotonic() + 10
        while "5000" not in runner.logs(handle) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert runner.logs(handle).split() == [
            "--nnodes",
            "1",
            "--node-rank",
            "0",
            "--dist-init-addr",
            "127.0.0.1:5000",
        ]
    finally:
        runner.stop(handle)
