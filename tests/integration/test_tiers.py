"""The tiers of tests/conftest.py on small test folders run by a real pytest (with and without workers).

A test with no tier marker stops a run without workers in one message, and fails with that message on a
worker (where stopping the run would show pytest-xdist's crash instead); a unit test that starts a process
fails naming the tier to move it to; the tiers' times are printed after the run; the workers keep a module
on one worker.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import realtime_allowed

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
INI = """[pytest]
addopts = -p no:cacheprovider
markers =
    unit: u
    integration: i
    engines: e
    services: s
    timing: t
    alone: a
"""


def _pytest(folder: Path, tests: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    (folder / "pytest.ini").write_text(INI, encoding="utf-8")
    (folder / "conftest.py").write_text('pytest_plugins = ["tests.conftest"]\n', encoding="utf-8")
    for name, text in tests.items():
        (folder / name).write_text("import os, subprocess, sys\n\nimport pytest\n\n" + text, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("ALFLOW_TEST_GROUPS_FILE", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", *args, str(folder)],
        capture_output=True,
        text=True,
        cwd=folder,
        env=env,
        timeout=180,
        check=False,
    )


def _run_with_workers(
    tmp_path: Path, tests: dict[str, str], workers: int = 2
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """Run ``tests`` on ``workers`` workers; each test may write what it saw into the folder named by ``$OUT``."""
    out = tmp_path / "out"
    out.mkdir()
    folder = tmp_path / "t"
    folder.mkdir()
    os.environ["OUT"] = str(out)
    try:
        return out, _pytest(
            folder, tests, "-n", str(workers), "--dist", "loadgroup", "--no-loadscope-reorder"
        )
    finally:
        del os.environ["OUT"]


UNMARKED = {"test_unmarked.py": "def test_plain():\n    assert True\n"}


def test_a_test_without_a_tier_stops_a_run_without_workers_in_one_message(tmp_path: Path) -> None:
    run = _pytest(tmp_path, UNMARKED, "-n", "0")
    assert run.returncode == 4, run.stdout + run.stderr  # pytest's usage error
    assert "every test carries exactly one tier marker" in run.stderr
    assert "test_unmarked.py::test_plain: no tier marker" in run.stderr


def test_a_test_without_a_tier_fails_with_the_message_on_a_worker(tmp_path: Path) -> None:
    run = _pytest(tmp_path, UNMARKED, "-n", "2", "--dist", "loadgroup")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "INTERNALERROR" not in run.stdout + run.stderr
    assert "every test carries exactly one tier marker" in run.stdout
    assert "1 error" in run.stdout


def test_two_tiers_are_refused(tmp_path: Path) -> None:
    two = {
        "test_two.py": "pytestmark = [pytest.mark.unit, pytest.mark.integration]\n\ndef test_x():\n    pass\n"
    }
    run = _pytest(tmp_path, two, "-n", "0")
    assert run.returncode == 4, run.stdout + run.stderr
    assert "test_two.py::test_x: tiers integration, unit" in run.stderr


def test_a_unit_test_that_starts_a_process_fails_and_an_integration_test_may(tmp_path: Path) -> None:
    spawn = "def test_spawn():\n    subprocess.run([sys.executable, '-c', 'pass'], check=True)\n"
    tests = {
        "test_unit.py": "pytestmark = pytest.mark.unit\n\n" + spawn,
        "test_integration.py": "pytestmark = pytest.mark.integration\n\n" + spawn,
    }
    run = _pytest(tmp_path, tests, "-n", "0", "-rA")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "a unit test started a process (subprocess.Popen" in run.stdout
    assert "FAILED test_unit.py::test_spawn" in run.stdout
    assert "PASSED test_integration.py::test_spawn" in run.stdout


def test_the_tiers_times_are_printed_and_a_module_stays_on_one_worker(tmp_path: Path) -> None:
    record = "def test_{n}():\n    (Path(os.environ['OUT']) / '{m}-{n}').write_text(str(os.getpid()))\n"
    tests = {
        f"test_{m}.py": f"from pathlib import Path\n\npytestmark = pytest.mark.{tier}\n\n"
        + "".join(record.format(m=m, n=n) for n in range(6))
        for m, tier in (("a", "unit"), ("b", "unit"), ("c", "integration"))
    }
    out, run = _run_with_workers(tmp_path, tests)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "time per tier" in run.stdout
    assert "unit            12 tests" in run.stdout, run.stdout
    assert "integration      6 tests" in run.stdout, run.stdout
    for module in "abc":
        pids = {(out / f"{module}-{n}").read_text() for n in range(6)}
        assert len(pids) == 1, (module, pids)  # one worker ran the whole module


def test_a_unit_test_that_spawns_a_multiprocessing_worker_fails(tmp_path: Path) -> None:
    spawn = (
        "import multiprocessing\n\npytestmark = pytest.mark.unit\n\n"
        "def test_spawn():\n"
        "    p = multiprocessing.get_context('spawn').Process(target=print)\n"
        "    p.start()\n"
        "    p.join()\n"
    )
    run = _pytest(tmp_path, {"test_spawn.py": spawn}, "-n", "0")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "a unit test started a process" in run.stdout


_SPAN = (
    "def test_{n}():\n"
    "    start = time.monotonic()\n"
    "    time.sleep({s})\n"
    "    (Path(os.environ['OUT']) / '{m}-{n}').write_text(f'{{start}} {{time.monotonic()}}')\n"
)
_HEAD = "import time\nfrom pathlib import Path\n\n"


def _module(marks: str, prefix: str, count: int, seconds: float) -> str:
    return (
        _HEAD
        + f"pytestmark = {marks}\n\n"
        + "".join(_SPAN.format(m=prefix, n=n, s=seconds) for n in range(count))
    )


def _overlapping(out: Path, alone: str) -> list[str]:
    """The tests (their files in ``out``) whose span overlaps the ``alone`` test's."""
    spans = {f.name: tuple(map(float, f.read_text().split())) for f in out.iterdir()}
    a_start, a_end = spans.pop(alone)
    return [name for name, (start, end) in spans.items() if start < a_end and end > a_start]


_POLICY = (
    "def test_policy():\n"
    "    (Path(os.environ['OUT']) / 'policy').write_text(str(os.sched_getscheduler(0)))\n"
    "    time.sleep(0.5)\n"
)
"""An alone module's test that records the scheduling policy it ran at."""


def _alone_module() -> str:
    return _module("[pytest.mark.integration, pytest.mark.alone]", "a", 1, 1.0) + _POLICY


_CHILD = (
    "def test_child():\n"
    "    child = subprocess.Popen(['sleep', '60'])\n"
    "    (Path(os.environ['OUT']) / 'child').write_text(str(child.pid))\n"
)
"""An alone module's test that leaves a process running past its end (its priority must be set back too)."""


def test_an_alone_test_runs_at_real_time_priority_beside_no_timing_test(tmp_path: Path) -> None:
    """Where real-time priority is allowed (root, as CI runs) the other tests run beside an alone one; timing ones
    never do, and what the alone test started is back at normal priority afterwards.

    Three workers, each handed one module at the start (each holds more than two tests, so none is handed a second):
    the alone module, then the timing one (which must wait for the lock), then the plain one (which must not).
    """
    if not realtime_allowed():
        pytest.skip("real-time priority is refused here (not root): the next test checks that case")
    tests = {
        "test_alone.py": _module("[pytest.mark.integration, pytest.mark.alone]", "a", 3, 0.5)
        + _POLICY
        + _CHILD,
        "test_b_timing.py": _module("[pytest.mark.integration, pytest.mark.timing]", "t", 8, 0.3),
        "test_c_others.py": _module("pytest.mark.integration", "o", 8, 0.3),
        "test_units.py": _module("pytest.mark.unit", "u", 4, 0.3),
    }
    out, run = _run_with_workers(tmp_path, tests, workers=3)
    child = int((out / "child").read_text())
    try:
        assert run.returncode == 0, run.stdout + run.stderr
        assert int((out / "policy").read_text()) == os.SCHED_RR
        assert os.sched_getscheduler(child) == os.SCHED_OTHER
    finally:
        os.kill(child, signal.SIGKILL)
    for name in ("policy", "child"):
        (out / name).unlink()
    beside = {name for a in ("a-0", "a-1", "a-2") for name in _overlapping(out, a)}
    assert not [name for name in beside if name.startswith("t-")], sorted(beside)
    assert [name for name in beside if name.startswith("o-")], f"no plain test ran beside: {sorted(beside)}"


def test_without_real_time_priority_an_alone_test_runs_while_no_other_test_above_the_unit_tier_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ALFLOW_TEST_NO_REALTIME", "1")
    tests = {
        "test_alone.py": _alone_module(),
        "test_others.py": _module("pytest.mark.integration", "o", 8, 0.3),
        # still running when the first ends
        "test_more.py": _module("pytest.mark.integration", "p", 16, 0.3),
        "test_units.py": _module("pytest.mark.unit", "u", 4, 0.3),
    }
    out, run = _run_with_workers(tmp_path, tests)
    assert run.returncode == 0, run.stdout + run.stderr
    assert int((out / "policy").read_text()) == os.SCHED_OTHER
    (out / "policy").unlink()
    assert len(list(out.iterdir())) == 29
    assert not [name for name in _overlapping(out, "a-0") if not name.startswith("u-")]


def test_unit_tests_run_beside_an_alone_test(tmp_path: Path) -> None:
    tests = {
        "test_alone.py": _module("[pytest.mark.integration, pytest.mark.alone]", "a", 1, 2.0),
        "test_units.py": _module("pytest.mark.unit", "u", 8, 0.3),
    }
    out, run = _run_with_workers(tmp_path, tests)
    assert run.returncode == 0, run.stdout + run.stderr
    assert _overlapping(out, "a-0"), "no unit test ran beside the alone test"
