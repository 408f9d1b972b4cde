"""A starved client says so: `alflow bench` pinned to one core with a busy burner beside it.

The sim (real HTTP, K=3, synthetic AL) runs on the other core. The client runs at nice 19 on core 0 next to a
burner at nice 0 on the same core (bounded: killed in ``finally``, and by ``timeout`` after 120 s), so it is
scheduled in small slices: its reads come late and carry several chunks. The run must print the client-bound
verdict, and its summary must hold no ITL median or percentile, only the mean and the reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from alflow.sim.process import SimProcess

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
        reason="needs two cores to pin the client and the server apart",
    ),
]

ALFLOW = Path(sys.executable).with_name("alflow")


def _pin(core: int, nice: int) -> None:
    os.sched_setaffinity(0, {core})
    os.nice(nice)


def test_a_starved_client_is_judged_client_bound_and_prints_no_itl_percentile(tmp_path: Path) -> None:
    cores = sorted(os.sched_getaffinity(0))
    client_core, server_core = cores[0], cores[1]
    with SimProcess(["--dialect", "vllm", "--k", "3", "--synthetic-al", "2.0", "--time-scale", "0.2"]) as sim:
        os.sched_setaffinity(sim.pid, {server_core})
        burner = subprocess.Popen(
            ["timeout", "120", sys.executable, "-c", "while True: pass"],
            preexec_fn=lambda: _pin(client_core, 0),  # noqa: PLW1509
        )
        try:
            out = tmp_path / "bench"
            args = [str(ALFLOW), "bench", "--base-url", sim.base_url, "--endpoint", "completions", "--isl", "16",
                    "--osl", "64", "--concurrency", "128", "--num-prompts", "256", "--k", "3", "--no-progress",
                    "--out", str(out)]  # fmt: skip
            env = dict(os.environ, COLUMNS="400")
            run = subprocess.run(
                args,
                check=False,
                capture_output=True,
                text=True,
                timeout=240,
                env=env,
                preexec_fn=lambda: _pin(client_core, 19),
            )
        finally:
            burner.kill()
            burner.wait(10)
    assert run.returncode == 0, run.stdout + run.stderr
    summary = json.loads((out / "summary.json").read_text())
    timing = summary["client_timing"]
    assert timing["verdict"] == "client-bound", timing
    assert "client-bound" in run.stdout
    assert summary["mean_itl_ms"] is not None
    if not timing["itl_measurable"]:
        assert summary["median_itl_ms"] is None
        assert summary["p99_itl_ms"] is None
        assert "not measurable" in run.stdout
    assert "ITL (ms) mean / median / p99" in run.stdout
    itl_line = next(line for line in run.stdout.splitlines() if "ITL (ms) mean / median / p99" in line)
    assert " 0.00 " not in itl_line  # never a median of 0 from coalesced reads
