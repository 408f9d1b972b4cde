"""The peer benchmark's client-CPU accounting: a /proc trace of a process tree, read on the shared clock.

``benchmarks/peer_vllm_bench.py`` compares alflow's client CPU per token with ``vllm bench serve``'s over
each client's measured phase; these checks run its ``_timed`` on a child whose CPU use is known.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "peer_vllm_bench", ROOT / "benchmarks" / "peer_vllm_bench.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


# sleep 0.6 s, burn 0.6 s of CPU in a grandchild, sleep 0.6 s; print the perf_counter bounds of the burn
CHILD = """
import subprocess, sys, time
time.sleep(0.6)
out = subprocess.run([sys.executable, "-c", '''
import time
t0 = time.perf_counter()
c0 = time.process_time()
while time.process_time() - c0 < 0.6:
    pass
print(t0, time.perf_counter())
'''], capture_output=True, text=True, check=True).stdout
time.sleep(0.6)
print(out.strip())
"""


def test_the_trace_counts_a_grandchilds_cpu_inside_its_window_and_not_outside(bench: ModuleType) -> None:
    started = time.perf_counter()
    total, wall, stdout, trace = bench._timed([sys.executable, "-c", CHILD])
    burn_start, burn_end = (float(x) for x in stdout.split())
    assert started < burn_start < burn_end
    assert wall >= 1.8
    assert total >= 0.6
    inside = trace.between(burn_start, burn_end)
    # sampled every POLL_S: the interval around the burn's end is interpolated (under a 0.15 s error here)
    assert 0.6 - 0.15 <= inside <= total, (inside, total)
    # after the first sample past the burn: the sleep and two interpreter exits, next to no CPU
    after = next(t for t in trace.times if t > burn_end)
    assert trace.between(after, trace.times[-1]) < 0.15
    assert trace.cpu[-1] == pytest.approx(total)
    assert list(trace.times) == sorted(trace.times)


def test_cpu_trace_interpolates_between_samples_and_clamps_outside(bench: ModuleType) -> None:
    trace = bench.CpuTrace((1.0, 2.0, 3.0), (0.5, 1.5, 1.5))
    assert trace.at(0.0) == 0.5
    assert trace.at(1.5) == pytest.approx(1.0)
    assert trace.at(9.0) == 1.5
    assert trace.between(1.0, 3.0) == pytest.approx(1.0)


def test_a_client_that_fails_stops_the_benchmark_with_its_stderr(bench: ModuleType) -> None:
    with pytest.raises(SystemExit, match=r"exited 3:\n.*no such prompts"):
        bench._timed([sys.executable, "-c", "import sys; sys.stderr.write('no such prompts'); sys.exit(3)"])


def _run(bench: ModuleType, client: str, repeat: int, tpots: tuple[float, ...]) -> object:
    return bench.ClientRun(
        client, 4, repeat, len(tpots), len(tpots), 100, 64 * len(tpots), 9.0, 4000.0,
        sorted(tpots)[len(tpots) // 2], sum(tpots) / len(tpots), 400.0, 3.5, 3.5, 100, 1.0, 0.1, 0.5, 60.0,
        tpots,
    )  # fmt: skip


def test_the_pooled_median_ratio_pools_every_repeat_and_brackets_itself(bench: ModuleType) -> None:
    runs = [
        _run(bench, "alflow bench", 0, (100.0, 200.0, 300.0)),
        _run(bench, "alflow bench", 1, (400.0, 500.0)),
        _run(bench, "vllm bench serve", 0, (100.0, 200.0, 300.0, 400.0, 500.0, 600.0)),
    ]
    ratio, low, high = bench._pooled_median_ratio(runs, 4, resamples=500)
    assert ratio == 300.0 / 350.0  # alflow's five requests vs vLLM's six, each pooled over its repeats
    assert low <= ratio <= high
    assert low < 1.0 < high  # six requests cannot tell these two apart
    assert bench._pooled_median_ratio(runs, 1) != bench._pooled_median_ratio(runs, 1)  # nan: no runs at c=1
