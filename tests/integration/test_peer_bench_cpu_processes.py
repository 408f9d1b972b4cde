"""The peer benchmark's client runs (``_timed``): a child's CPU trace, its failure and its CPU pinning; they start processes."""

from __future__ import annotations

import sys
import time
from types import ModuleType

import pytest

from tests.unit.test_peer_bench_cpu import bench  # noqa: F401  (fixture reuse)

pytestmark = pytest.mark.integration

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


def test_the_trace_counts_a_grandchilds_cpu_inside_its_window_and_not_outside(bench: ModuleType) -> None:  # noqa: F811
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


def test_a_client_that_fails_stops_the_benchmark_with_its_stderr(bench: ModuleType) -> None:  # noqa: F811
    with pytest.raises(SystemExit, match=r"exited 3:\n.*no such prompts"):
        bench._timed([sys.executable, "-c", "import sys; sys.stderr.write('no such prompts'); sys.exit(3)"])


def test_client_cpus_pin_the_client_and_what_it_starts(bench: ModuleType) -> None:  # noqa: F811
    import os

    allowed = sorted(os.sched_getaffinity(0))
    cpu = allowed[-1]
    child = (
        "import os, subprocess, sys; print(sorted(os.sched_getaffinity(0))); "
        "print(subprocess.run([sys.executable, '-c', 'import os; print(sorted(os.sched_getaffinity(0)))'],"
        " capture_output=True, text=True, check=True).stdout.strip())"
    )
    _, _, stdout, _ = bench._timed([sys.executable, "-c", child], cpus=frozenset({cpu}))
    assert stdout.split("\n")[:2] == [f"[{cpu}]", f"[{cpu}]"]
    assert sorted(os.sched_getaffinity(0)) == allowed  # this process stays unpinned
    _, _, unpinned, _ = bench._timed([sys.executable, "-c", child])
    assert unpinned.split("\n")[0] == str(allowed)
