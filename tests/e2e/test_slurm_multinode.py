"""Issue 10's acceptance on the real single-host cluster (two slurmd "nodes" n1 and n2 on 127.0.0.1).

- a 2-node sim job (one data-parallel engine per node, each node with its own metrics endpoint)
  starts through the Slurm runner, serves a short ``alflow bench`` (the CLI, in a subprocess, reading
  both endpoints) and is cancelled;
- a 2-node job that fails at start fails the wait within seconds with its log tail;
- an M2 run (``alflow run m2 --config``, in a subprocess) on the 2-node configuration completes with
  per-GPU figures over both nodes' GPUs;
- no alflow job is left in ``squeue`` (module and session fixtures).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from alflow.config import (
    Parallelism,
    ServerConfig,
    SlurmOptions,
    SpeculativeConfig,
    SyntheticAcceptance,
    server_config,
)
from alflow.frameworks.recipes import build_launch
from alflow.frameworks.vllm import names as vllm_names
from alflow.metrics.prometheus import scrape_all
from alflow_infra.errors import ServerStartError
from alflow_infra.lifecycle import alflow_slurm_jobs
from alflow_infra.runners import SlurmRunner, running_server
from alflow_infra.runners.base import health_ok
from tests.e2e.conftest import slurm_nodes

pytestmark = pytest.mark.services

RUN_ID = f"e2e-2n-{uuid.uuid4().hex[:8]}"
ALFLOW = str(Path(sys.executable).with_name("alflow"))
TARGET_AL = 2.5


@pytest.fixture(scope="module", autouse=True)
def two_nodes(slurm_cluster: None) -> Iterator[None]:
    """The cluster must have two nodes; afterwards no job of this module may be left in squeue."""
    del slurm_cluster
    assert slurm_nodes() >= 2, "the e2e cluster needs two slurmd nodes (scripts/slurm-up.sh starts n1 and n2)"
    yield
    left = [job for job, run in alflow_slurm_jobs() if run.startswith(RUN_ID)]
    for job in left:
        subprocess.run(["scancel", job], capture_output=True, timeout=20, check=False)
    assert not left, f"Slurm jobs left behind: {left}"


def two_node_server(model: str, *extra: str) -> ServerConfig:
    """The 2-node sim configuration: DP 2 (one engine and one metrics endpoint per node), synthetic AL."""
    return server_config(
        framework="sim",
        model=model,
        nodes=2,
        parallelism=Parallelism(dp=2),
        speculative=SpeculativeConfig(method="mtp", k=3),
        synthetic=SyntheticAcceptance(target_al=TARGET_AL),
        readiness_timeout_s=60.0,
        extra_args=("--time-scale", "0", "--heartbeat-interval", "0.2", "--peer-timeout", "3", *extra),
    )


def slurm_options(tmp_path: Path) -> SlurmOptions:
    return SlurmOptions(
        nodes=2,
        time_limit="00:10:00",
        log_dir=str(tmp_path / "jobs"),
        poll_interval_s=0.2,
        queue_timeout_s=60.0,
        stop_timeout_s=20.0,
        command_timeout_s=20.0,
    )


def in_queue(job_id: str) -> bool:
    return any(job == job_id for job, _ in alflow_slurm_jobs())


def test_two_node_sim_job_serves_alflow_bench_and_is_cancelled(tmp_path: Path) -> None:
    launch = build_launch(two_node_server("slurm-2n-bench"))
    runner = SlurmRunner(slurm_options(tmp_path), run_id=f"{RUN_ID}-bench")
    started = time.monotonic()
    with running_server(runner, launch, timeout_s=60.0) as handle:
        ready_s = time.monotonic() - started
        assert handle.nodes == 2
        urls = handle.all_metrics_urls
        assert len(urls) == 2, urls
        assert all(health_ok(u) for u in urls)
        slurm = handle.provenance.slurm
        assert isinstance(slurm, dict)
        assert slurm["hosts"] == ["n1", "n2"]
        assert in_queue(handle.id)
        bench = subprocess.run(
            [
                ALFLOW,
                "bench",
                "--base-url",
                handle.base_url,
                *(arg for url in urls for arg in ("--metrics-url", url)),
                "--dataset",
                "random",
                "--vocab-size",
                "20000",
                "--num-prompts",
                "24",
                "--concurrency",
                "4",
                "--isl",
                "32",
                "--osl",
                "48",
                "--ignore-eos",
                "--k",
                "3",
                "--dp",
                "2",
                "--nodes",
                "2",
                "--scrape-interval",
                "0",
                "--json",
                "--no-progress",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert bench.returncode == 0, bench.stderr[-3000:]
        summary = json.loads(bench.stdout)
        # each node's endpoint on its own: only its engine's share of the drafts
        parts = [asyncio.run(scrape_all(url)) for url in urls]
    assert not in_queue(handle.id)
    assert not health_ok(handle.health_url, timeout_s=1.0)
    client, spec = summary, summary["spec_decode"]
    assert client["completed"] == 24
    assert client["failed"] == 0
    assert (client["num_gpus"], client["num_nodes"]) == (2, 2)
    assert client["output_throughput_per_gpu"] == pytest.approx(client["output_throughput"] / 2)
    assert spec["metrics_urls"] == list(urls)
    stats = spec["stats"]
    node_drafts = [p.counter(vllm_names.VLLM_NUM_DRAFTS) or 0.0 for p in parts]
    assert all(d > 0 for d in node_drafts), node_drafts
    # no other traffic reached the engines (no warm-up): the window's drafts are both nodes' together
    assert stats["num_drafts"] == sum(node_drafts)
    assert abs(stats["al"] - TARGET_AL) < 0.35
    print(f"2-node job healthy after {ready_s:.1f} s")


def test_two_node_job_that_fails_at_start_fails_the_wait_within_seconds_with_its_log(tmp_path: Path) -> None:
    launch = build_launch(two_node_server("slurm-2n-broken", "--fail-startup"))
    runner = SlurmRunner(slurm_options(tmp_path), run_id=f"{RUN_ID}-broken")
    started = time.monotonic()
    with pytest.raises(ServerStartError) as err, running_server(runner, launch, timeout_s=60.0):
        pass
    assert time.monotonic() - started < 20.0
    assert "Slurm job" in str(err.value)
    assert "simulated startup failure (--fail-startup)" in err.value.log_tail


def m2_config(tmp_path: Path) -> dict[str, Any]:
    server = two_node_server("slurm-2n-m2")
    return {
        "model": {"id": "slurm-2n-m2"},
        "k": 3,
        "target_al": TARGET_AL,
        "server": server.model_dump(mode="json"),
        "placement": {
            "runner": slurm_options(tmp_path).model_dump(mode="json"),
            "results_root": str(tmp_path / "results"),
        },
        "workload": {"isl": 32, "osl": 48},
        "concurrencies": [2, 4],
        "prompts_per_concurrency": 4,
        "warmup_per_concurrency": 1,
    }


def test_m2_on_the_two_node_configuration_divides_per_gpu_figures_by_both_nodes_gpus(tmp_path: Path) -> None:
    config = tmp_path / "m2.yaml"
    config.write_text(yaml.safe_dump(m2_config(tmp_path)), encoding="utf-8")
    env = {
        **os.environ,
        "PREFECT_HOME": str(tmp_path / "prefect"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_LOGGING_LEVEL": "WARNING",
    }
    env.pop("PREFECT_API_URL", None)
    started = time.monotonic()
    run = subprocess.run(
        [ALFLOW, "run", "m2", "--config", str(config), "--json"],
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
        env=env,
    )
    if run.returncode != 0:  # pytest.fail: the whole message (an assertion's repr is cut in its middle)
        pytest.fail(f"exit {run.returncode}\nstdout: {run.stdout[-2000:]}\nstderr: {run.stderr[-6000:]}")
    out = json.loads(run.stdout[run.stdout.index("{") :])
    assert (out["nodes"], out["num_gpus"]) == (2, 2)
    assert [p["concurrency"] for p in out["points"]] == [2, 4]
    for point in out["points"]:
        assert point["valid"], point["audit"]
        assert (point["nodes"], point["num_gpus"]) == (2, 2)
        assert point["output_throughput_per_gpu"] == pytest.approx(point["output_throughput"] / 2)
        assert abs(point["achieved_al"] - TARGET_AL) < 0.35
    manifest = json.loads((Path(out["run_dir"]) / "manifest.json").read_text())
    server = manifest["provenance"]["server"]
    assert server["nodes"] == 2
    assert len(server["metrics_urls"]) == 2
    assert server["runner"] == "slurm"
    print(f"M2 on 2 nodes took {time.monotonic() - started:.1f} s")
