"""A starved client says so: `alflow bench` pinned to one core with a busy burner beside it.

The sim (real HTTP, K=3, synthetic AL) runs on the other core. The client runs at nice 19 on core 0 next to a
burner at nice 0 on the same core (bounded: killed in ``finally``, and ending by itself after 45 s), so it is
scheduled in small slices: its reads come late and carry several chunks. The run must print the client-bound
verdict, and its summary must hold no ITL median or percentile, only the mean and the reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from alflow.sim.process import SimProcess

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
        reason="needs two cores to pin the client and the server apart",
    ),
]

STARVED_CLI = (
    "import os, sys\n"
    "from alflow.cli import main\n"  # imports first, at full priority: only the load is starved
    "import alflow.bench, alflow.loadgen.multiproc\n"
    "cores = os.environ.get('STARVE_CORES')\n"
    "if cores: os.sched_setaffinity(0, {int(c) for c in cores.split(',')})\n"
    "os.nice(19)\n"
    "main(sys.argv[1:])\n"
)
"""``alflow`` at nice 19 (and pinned where ``STARVE_CORES`` says) once it has imported everything."""


def burn(seconds: float) -> str:
    """A busy loop that ends by itself after ``seconds`` (and is killed directly: no wrapper that could orphan it)."""
    return f"import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end: pass\n"


def _pin(core: int, nice: int) -> None:
    os.sched_setaffinity(0, {core})
    os.nice(nice)


def test_a_starved_client_is_judged_client_bound_and_prints_no_itl_percentile(tmp_path: Path) -> None:
    cores = sorted(os.sched_getaffinity(0))
    client_core, server_core = cores[0], cores[1]
    with SimProcess(["--dialect", "vllm", "--k", "3", "--synthetic-al", "2.0", "--time-scale", "0.2"]) as sim:
        os.sched_setaffinity(sim.pid, {server_core})
        burner = subprocess.Popen(
            [sys.executable, "-c", burn(45)],
            preexec_fn=lambda: _pin(client_core, 0),  # noqa: PLW1509
        )
        try:
            out = tmp_path / "bench"
            args = [sys.executable, "-c", STARVED_CLI, "bench", "--base-url", sim.base_url, "--endpoint", "completions", "--isl", "16",
                    "--osl", "32", "--concurrency", "64", "--num-prompts", "64", "--k", "3", "--no-progress",
                    "--out", str(out)]  # fmt: skip
            env = dict(os.environ, COLUMNS="400", STARVE_CORES=str(client_core))
            run = subprocess.run(args, check=False, capture_output=True, text=True, timeout=240, env=env)
        finally:
            burner.kill()
            burner.wait(10)
    assert run.returncode == 0, run.stdout + run.stderr
    summary = json.loads((out / "summary.json").read_text())
    timing = summary["client_timing"]
    assert timing["verdict"] == "client-bound", timing
    assert "client-bound" in run.stdout
    if not timing["itl_measurable"]:
        assert summary["median_itl_ms"] is None
        assert summary["p99_itl_ms"] is None
        assert "not measurable" in run.stdout
    assert "ITL (ms) mean / median / p99" in run.stdout
    itl_line = next(line for line in run.stdout.splitlines() if "ITL (ms) mean / median / p99" in line)
    assert "│ 0.00 " not in itl_line, itl_line  # no figure of 0 from coalesced reads
    assert " / 0.00 " not in itl_line, itl_line


def test_auto_client_processes_splits_the_measured_phase_when_the_warm_up_finds_the_client_starved(
    tmp_path: Path,
) -> None:
    """Two burners at nice 0, one per core, for the first 15 s, and the client at nice 19: its warm-up is judged
    client-bound, so the measured phase runs in one process per core, and the warm-up's records stay flagged."""
    cores = sorted(os.sched_getaffinity(0))[:2]
    with SimProcess(["--dialect", "vllm", "--k", "3", "--synthetic-al", "2.0", "--time-scale", "0.2"]) as sim:
        burners = [
            subprocess.Popen(
                [sys.executable, "-c", burn(15)],  # the warm-up's time: then gone
                preexec_fn=lambda core=core: _pin(core, 0),  # type: ignore[misc]  # noqa: PLW1509
            )
            for core in cores
        ]
        try:
            out = tmp_path / "bench"
            args = [sys.executable, "-c", STARVED_CLI, "bench", "--base-url", sim.base_url, "--endpoint", "completions", "--isl", "16",
                    "--osl", "8", "--concurrency", "32", "--num-prompts", "32", "--warmup", "32", "--k", "3",
                    "--auto-client-processes", "--no-progress", "--out", str(out)]  # fmt: skip
            run = subprocess.run(
                args,
                check=False,
                capture_output=True,
                text=True,
                timeout=240,
                env=dict(os.environ, COLUMNS="400"),
                preexec_fn=lambda: os.nice(19),
            )
        finally:
            for burner in burners:
                burner.kill()
                burner.wait(10)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "the warm-up found the client to be the bottleneck" in run.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["client_timing"]["client_load"]["processes"] == 2
    assert summary["completed"] == 32
    records = pl.read_parquet(out / "records.parquet")
    assert records.height == 64
    assert records["warmup"].sum() == 32
    assert records["request_id"].n_unique() == 64
