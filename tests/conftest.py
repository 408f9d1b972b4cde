"""Shared test configuration: every test carries exactly one tier marker, and the unit tier starts no process.

The tiers, by cost (``pytest -m unit`` is the inner loop; the README's test command runs them all):

- ``unit``: pure logic; no process but the test's own (threads and loopback servers in-process are fine);
- ``integration``: the sim engine and Prefect over real HTTP, subprocesses of alflow;
- ``engines``: the tiny engine (llama.cpp) or a real vLLM on a small real model;
- ``services``: dockerd, Slurm, PostgreSQL with a real ``prefect server``, Prometheus, Chromium.

A test module says its tier with ``pytestmark = pytest.mark.<tier>`` (or a list holding it). A test with
no tier marker, or with two, fails collection: a new test is placed in a tier by whoever writes it. A unit
test that starts a process fails (an audit hook refuses ``subprocess``, ``os.posix_spawn``, ``os.fork``
and ``os.exec*`` while a unit test runs): such a test belongs in ``integration``.

Workers (pytest-xdist, ``--dist loadgroup``): a module's tests stay on one worker (its module-scoped
fixtures start once), and the tests that share one machine-wide resource stay on one worker together
(:data:`SHARED`): the Slurm cluster whose leftover-job check spans the session, and the vLLM processes
counted machine-wide. A worker starts its own ``prefect server`` (its own database, port and home) when
one of its tests asks for it. The longest groups are handed out first (:data:`FIRST`). Each worker has
its own alflow state folder.

A test marked ``timing`` measures real time or relies on how the processes are scheduled (a client-bound
verdict, a rate, a batch formed by requests sent together). While it runs, its worker and every process
below the worker (the servers it started, what the test starts) run at a raised CPU priority (nice -10)
where the tests may raise it (as root, as CI runs): the other workers' tests must not starve it, as a
benchmark client on cores of its own would not be. Without the right to raise it, nothing changes.

A test marked ``alone`` needs a client that is not starved at all (the nightly regression's four points are each
judged client-bound, and so not compared, by one event-loop stall of 10 ms at p99; at nice -10 beside the other
tests two of 16 points stalled 10.9 and 13.2 ms). While it runs, its worker and every process below it run at
real-time priority (``SCHED_RR``, :data:`REALTIME_PRIORITY`): they preempt any other test's processes at once, and
the kernel still leaves 5% of each second to the rest (``sched_rt_runtime_us``). No other ``timing`` or ``alone``
test runs meanwhile: they hold a run lock shared (a file lock beside the groups file), which an ``alone`` test takes
exclusively; the other tests take no lock and run beside it at what CPU it leaves (it uses about half a core). The
``alone`` tests are one group (one worker runs them one after another), handed out first. Where real-time priority
is refused (not root), or ``ALFLOW_TEST_NO_REALTIME`` is set, every test above the unit tier takes the lock instead,
so an ``alone`` test runs while only unit tests run, and the ``alone`` group is handed out after every other
group above the unit tier (what it waits for is then only the last tests already on the other workers).

The groups are this file's, not ``xdist_group`` markers: pytest-xdist 3.8 marks a group by rewriting
``item._nodeid``, which pytest 9.2 no longer reads (a node's id is ``item._id``), so its groups are
silently ignored. Here each worker writes the group of every test it collected to one file, and the
controller's scheduler (:func:`pytest_xdist_make_scheduler`) reads its work units from that file.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

TIERS = ("unit", "integration", "engines", "services")
"""The tier markers, cheapest first (the order ``.ci/run`` reports them in)."""

_PROCESS_EVENTS = frozenset(
    {"subprocess.Popen", "os.posix_spawn", "os.fork", "os.forkpty", "os.exec", "os.system"}
)
_in_unit_test = False
_GROUPS_FILE = "ALFLOW_TEST_GROUPS_FILE"
_WRONG_TIER = pytest.StashKey[str]()
TIER_RULE = f"every test carries exactly one tier marker of {', '.join(TIERS)} (pytestmark = pytest.mark.<tier> in its module)"


def _refuse_processes_in_unit_tests(event: str, args: tuple[Any, ...]) -> None:
    """Audit hook: a unit test that starts a process is refused (the tier promises none)."""
    if _in_unit_test and event in _PROCESS_EVENTS:
        raise RuntimeError(
            f"a unit test started a process ({event} {args[:2]!r}): mark the module "
            "pytest.mark.integration (or the tier it needs) instead of pytest.mark.unit"
        )


SHARED = (("slurm", "slurm_cluster"),)
"""(group, fixture): every test that uses the fixture runs on the worker of that group."""
FIRST = (
    "vllm",
    "tests/e2e/test_sweep_fanout.py",
    "tests/integration/test_tiny_flows.py",
    "tests/integration/test_local_deployments.py",
    "tests/integration/test_tiny_engine.py",
    "tests/integration/test_demo_sim.py",
    "tests/e2e/test_prefect_deployments.py",
    "tests/integration/test_bad_inputs_cli.py",
    "tests/integration/test_client_starved.py",
    "tests/e2e/test_m1_m2_trigger.py",
    "tests/integration/test_flows.py",
    "tests/integration/test_run_killed.py",
    "tests/integration/test_url_secrets_prefect.py",
    "slurm",
)
"""Groups handed to the workers first, longest first (by their time in a run with workers): a long group
started last would end the run alone."""
TIMING_NICE = -10
REALTIME_PRIORITY = 1
"""The ``SCHED_RR`` priority of an ``alone`` test's processes (the lowest real-time one: above every normal one)."""


def realtime_allowed() -> bool:
    """Whether this process may run at real-time priority (tried on itself and undone), and it is not turned off."""
    if os.environ.get("ALFLOW_TEST_NO_REALTIME") or not hasattr(os, "SCHED_RR"):
        return False
    policy, param = os.sched_getscheduler(0), os.sched_getparam(0)
    try:
        os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(REALTIME_PRIORITY))
    except PermissionError:
        return False
    os.sched_setscheduler(0, policy, param)
    return True


def tier_of(item: pytest.Item) -> list[str]:
    """The tier markers ``item`` carries (one, for a well-placed test)."""
    return sorted({m.name for m in item.iter_markers() if m.name in TIERS})


def group_of(item: pytest.Item) -> str:
    """The worker group of ``item``: ``alone``, the shared resource it uses, else its module."""
    if item.get_closest_marker("alone") is not None:
        return "alone"
    if item.get_closest_marker("vllm") is not None:
        return "vllm"
    fixtures = set(getattr(item, "fixturenames", ()))
    for group, fixture in SHARED:
        if fixture in fixtures:
            return group
    return item.nodeid.split("::", 1)[0]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Refuse a test with no tier marker, or more than one; group and order the tests for the workers."""
    wrong = []
    for item in items:
        tiers = tier_of(item)
        if len(tiers) != 1:
            wrong.append(f"{item.nodeid}: {'no tier marker' if not tiers else 'tiers ' + ', '.join(tiers)}")
            item.stash[_WRONG_TIER] = f"{TIER_RULE}: {wrong[-1]}"
        item.user_properties.append(("tier", tiers[0] if len(tiers) == 1 else "none"))  # for the controller
    if wrong and "PYTEST_XDIST_WORKER" not in os.environ:
        shown = "\n  ".join(wrong[:20]) + (f"\n  ... and {len(wrong) - 20} more" if len(wrong) > 20 else "")
        raise pytest.UsageError(f"{TIER_RULE}:\n  {shown}")
    # a worker cannot stop the run from here (pytest-xdist reports a crash, not the message): each such test
    # fails at its setup instead, with the message
    groups = {id(item): group_of(item) for item in items}
    rank = {group: i for i, group in enumerate(FIRST)}
    # at real-time priority the alone tests run beside the others, first; else after them, beside the unit tests
    alone = -1 if realtime_allowed() else len(FIRST) + 1
    units = len(FIRST) + 2  # handed out last: their single processes fill the cores the others leave

    def order(item: pytest.Item) -> int:
        if item.get_closest_marker("alone"):
            return alone
        return units if tier_of(item) == ["unit"] else rank.get(groups[id(item)], len(FIRST))

    items.sort(key=order)  # stable: collection order otherwise
    path = os.environ.get(_GROUPS_FILE)
    if path and "PYTEST_XDIST_WORKER" in os.environ:  # every worker collects the same tests: same content
        scratch = Path(f"{path}.{os.environ['PYTEST_XDIST_WORKER']}")
        scratch.write_text(json.dumps({item.nodeid: groups[id(item)] for item in items}), encoding="utf-8")
        scratch.replace(path)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``--dist loadgroup``: work units are :func:`group_of`'s groups, read from the workers' file."""
    if getattr(config.option, "dist", None) != "loadgroup" or not os.environ.get(_GROUPS_FILE):
        return None
    from xdist.scheduler import LoadScopeScheduling

    groups_file = Path(os.environ[_GROUPS_FILE])

    class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:  # first asked once every worker has collected, so the file is written
                try:
                    self.groups = json.loads(groups_file.read_text(encoding="utf-8"))
                except (OSError, ValueError):  # no worker wrote it: one unit per test, as plain load
                    self.groups = {}
            return self.groups.get(nodeid, nodeid)

    return GroupScheduling(config, log)


_REALTIME = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[object]:
    """On a worker: an ``alone`` test holds the run lock exclusively; a ``timing`` one (and, where real-time priority
    is refused, every test above the unit tier) holds it shared (see the module doc).

    A unit test takes no lock: it is one process on one core, which leaves the other core to the ``alone`` test.
    """
    path = os.environ.get(_GROUPS_FILE)
    alone = item.get_closest_marker("alone") is not None
    if _REALTIME not in item.config.stash:
        item.config.stash[_REALTIME] = realtime_allowed()
    shares = item.get_closest_marker("timing") is not None or not item.config.stash[_REALTIME]
    if (
        not path
        or "PYTEST_XDIST_WORKER" not in os.environ
        or not (alone or (shares and tier_of(item) != ["unit"]))
    ):
        return (yield)
    with Path(f"{path}.run").open("a") as run:
        fcntl.flock(run, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        try:
            return (yield)
        finally:
            fcntl.flock(run, fcntl.LOCK_UN)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test collected without exactly one tier marker (on a worker) fails here, naming the rule."""
    if _WRONG_TIER in item.stash:
        pytest.fail(item.stash[_WRONG_TIER], pytrace=False)


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A short folder under /tmp: pytest's own under xdist (``.../popen-gw1/test_an_output_file_that_canno0``) is
    long enough for alflow's one-line messages to cut the paths a test looks for in them."""
    path = Path(tempfile.mkdtemp(prefix="af-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(autouse=True)
def _unit_tier_starts_no_process(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """While a unit test runs (its function-scoped fixtures included), starting a process raises.

    The audit hook sees subprocess, fork and exec; multiprocessing's spawn and forkserver start their processes
    through ``_posixsubprocess.fork_exec`` without an audit event, so that is refused here too.
    """
    global _in_unit_test  # noqa: PLW0603 - the audit hook reads it; hooks cannot be removed or given state
    _in_unit_test = request.node.get_closest_marker("unit") is not None
    if _in_unit_test:
        import _posixsubprocess  # type: ignore[import-not-found]

        def refused(*args: Any, **kwargs: Any) -> Any:
            _refuse_processes_in_unit_tests("subprocess.Popen", ("_posixsubprocess.fork_exec",))

        monkeypatch.setattr(_posixsubprocess, "fork_exec", refused)
    try:
        yield
    finally:
        _in_unit_test = False


def _threads_below(pid: int) -> list[int]:
    """The thread ids of ``pid`` and of every process below it (from /proc; Linux)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry.name))
    tids: list[int] = []
    todo = [pid]
    while todo:
        proc = todo.pop()
        with contextlib.suppress(OSError):
            tids.extend(int(t.name) for t in Path(f"/proc/{proc}/task").iterdir())
        todo.extend(children.get(proc, []))
    return tids


def _renice(tids: list[int], value: int | dict[int, int]) -> None:
    """Set each thread's nice value (one for all, or each its own; a thread not in the dict: key 0's).

    A thread gone meanwhile is skipped; the first refusal (PermissionError) is raised, once every thread was tried.
    """
    refused: PermissionError | None = None
    for tid in tids:
        nice = value if isinstance(value, int) else value.get(tid, value.get(0, 0))
        try:
            os.setpriority(os.PRIO_PROCESS, tid, nice)
        except ProcessLookupError:
            continue
        except PermissionError as exc:
            refused = refused or exc
    if refused is not None and isinstance(value, int):
        raise refused


def _processes() -> list[int]:
    """Every process id in /proc."""
    return [int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()]


def _nice(pid: int) -> int | None:
    """The nice value of ``pid``'s main thread (None: gone)."""
    try:
        return os.getpriority(os.PRIO_PROCESS, pid)
    except OSError:
        return None


def _set_policy(tids: list[int], policy: int, priority: int) -> None:
    """Set each thread's scheduling policy (a thread gone meanwhile, or one that refuses, is skipped)."""
    for tid in tids:
        with contextlib.suppress(OSError):
            os.sched_setscheduler(tid, policy, os.sched_param(priority))


def _realtime_threads(pids: list[int]) -> list[int]:
    """The threads of ``pids`` and of every process below them that run at ``SCHED_RR``."""
    found = []
    for pid in pids:
        for tid in _threads_below(pid):
            with contextlib.suppress(OSError):
                if os.sched_getscheduler(tid) == os.SCHED_RR:
                    found.append(tid)
    return found


def _at_realtime() -> Iterator[None]:
    """The worker and every process below it at ``SCHED_RR`` while the test runs; back to normal afterwards.

    Processes started meanwhile inherit it; afterwards each one still at real-time priority is set back too, also
    one that left the worker's tree, and the scan is repeated until it finds none (a thread may start one while
    the others are set back).
    """
    existing = set(_processes())
    try:
        _set_policy(_threads_below(os.getpid()), os.SCHED_RR, REALTIME_PRIORITY)
        yield
    finally:
        for _ in range(10):
            started = [pid for pid in _processes() if pid not in existing]
            left = _realtime_threads([os.getpid(), *started])
            if not left:
                break
            _set_policy(left, os.SCHED_OTHER, 0)


@pytest.fixture(autouse=True)
def _timing_tests_are_not_starved(request: pytest.FixtureRequest) -> Iterator[None]:
    """A ``timing`` test's worker and every process below it run at :data:`TIMING_NICE` where allowed (an ``alone``
    test's at real-time priority, :func:`_at_realtime`, where that is allowed).

    Every thread is set, not only the test's: Prefect's task threads (which run the load) and the servers the
    worker started before the test (a ``prefect server``, the test harness) serve the test too. Afterwards each
    thread gets its old value back, and one started during the test the worker's own.
    """
    if not Path("/proc/self/task").is_dir():
        yield
        return
    if request.node.get_closest_marker("alone") is not None and request.config.stash.get(_REALTIME, False):
        yield from _at_realtime()
        return
    if request.node.get_closest_marker("timing") is None:
        yield
        return
    before = {0: os.getpriority(os.PRIO_PROCESS, 0)}
    for tid in _threads_below(os.getpid()):
        with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
            before[tid] = os.getpriority(os.PRIO_PROCESS, tid)
    existing = set(_processes())
    try:
        _renice(list(before), TIMING_NICE)
    except PermissionError:  # not allowed to raise a priority: leave every thread as it was
        _renice(list(before), before)
        yield
        return
    try:
        yield
    finally:
        # what was below the worker, and what the test started even if it left the worker's tree since
        started = [pid for pid in _processes() if pid not in existing and _nice(pid) == TIMING_NICE]
        tids = _threads_below(os.getpid())
        for pid in started:
            tids.extend(_threads_below(pid))
        _renice(tids, before)


_MADE_STATE_DIR: list[str] = []  # the state folder this process made, removed at its end when empty


def pytest_configure(config: pytest.Config) -> None:
    """Install the unit tier's audit hook; alflow's state folder in a folder of this test session.

    The state folder (the registry of started servers) is set before any test runs and inherited by every
    process the tests start, so tests never see or touch the user's own registry, and the registry a test
    session leaves can be checked.
    """
    sys.addaudithook(_refuse_processes_in_unit_tests)
    if "PYTEST_XDIST_WORKER" not in os.environ and getattr(config.option, "dist", None) == "loadgroup":
        fd, path = tempfile.mkstemp(
            prefix="alflow-test-groups-", suffix=".json"
        )  # the workers inherit its name
        os.close(fd)
        os.environ[_GROUPS_FILE] = path
    ours = os.environ.get("ALFLOW_TEST_STATE_DIR_SET") == os.environ.get("ALFLOW_STATE_DIR")
    if "ALFLOW_STATE_DIR" not in os.environ or (ours and "PYTEST_XDIST_WORKER" in os.environ):
        # one folder per process of the run: a worker never sees the other worker's servers
        os.environ["ALFLOW_STATE_DIR"] = tempfile.mkdtemp(prefix="alflow-test-state-")
        os.environ["ALFLOW_TEST_STATE_DIR_SET"] = os.environ["ALFLOW_STATE_DIR"]
        _MADE_STATE_DIR.append(os.environ["ALFLOW_STATE_DIR"])


def pytest_unconfigure(config: pytest.Config) -> None:
    """The controller removes the workers' groups file; each process its state folder, when it holds nothing.

    A folder that still holds a registry entry (a server a test left) stays, as evidence.
    """
    for made in _MADE_STATE_DIR:
        with contextlib.suppress(OSError):
            for empty in (Path(made) / "servers", Path(made)):
                if empty.is_dir():
                    empty.rmdir()
    if "PYTEST_XDIST_WORKER" not in os.environ and os.environ.get(_GROUPS_FILE):
        path = os.environ.pop(_GROUPS_FILE)
        for suffix in ("", ".run"):
            Path(path + suffix).unlink(missing_ok=True)


@pytest.fixture
def run_dirs_in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Servers started without a log_dir (runners, jobs) use a temporary directory: keep those under tmp_path.

    A module asks for it with ``pytestmark = [pytest.mark.<tier>, pytest.mark.usefixtures("run_dirs_in_tmp_path")]``.
    """
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


class _TierClock:
    """Each tier's wall time (its first test's start to its last test's end) and summed test time."""

    def __init__(self) -> None:
        self.span: dict[str, tuple[float, float]] = {}
        self.summed: dict[str, float] = {}
        self.count: dict[str, int] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        tier = dict(report.user_properties).get("tier")
        if tier is None or not report.start:
            return
        first, last = self.span.get(tier, (report.start, report.stop))
        self.span[tier] = (min(first, report.start), max(last, report.stop))
        self.summed[tier] = self.summed.get(tier, 0.0) + report.duration
        timeline = os.environ.get("ALFLOW_TEST_TIMELINE")
        if (
            timeline
        ):  # one line per phase: worker, tier, phase, start, stop, test (to see where a run's wall went)
            worker = getattr(getattr(report, "node", None), "gateway", None)
            with Path(timeline).open("a", encoding="utf-8") as out:
                out.write(
                    json.dumps(
                        [
                            getattr(worker, "id", "-"),
                            tier,
                            report.when,
                            report.start,
                            report.stop,
                            report.nodeid,
                        ]
                    )
                    + "\n"
                )
        if report.when == "call":
            self.count[tier] = self.count.get(tier, 0) + 1

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.span:
            return
        terminalreporter.write_sep(
            "=", "time per tier (wall: first start to last end; tests: summed over workers)"
        )
        for tier in TIERS:
            if tier in self.span:
                first, last = self.span[tier]
                terminalreporter.write_line(
                    f"{tier:<12} {self.count.get(tier, 0):>5} tests  wall {last - first:7.1f} s  "
                    f"tests {self.summed[tier]:7.1f} s"
                )


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """Report the tiers' times where the results come together (the controller, or a run without workers)."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        session.config.pluginmanager.register(_TierClock(), "alflow-tier-clock")
