"""One point's load over several client processes, against the sim over real HTTP (alflow.loadgen.multiproc).

Two processes send what one sends (records, sessions, tokens); the baseline callback runs once, after every
worker's warm-up and before any measured request; a fatal error stops every worker and comes back with the
records; cancelling the parent, Ctrl-C on ``alflow bench`` or killing it leaves no worker behind.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import orjson
import polars as pl
import pytest

from alflow.datasets.random_tokens import random_sessions
from alflow.datasets.types import Session
from alflow.loadgen import LoadAbortedError, LoadResult, LoadSpec, RequestRecord, Target, run_load
from alflow.metrics.readers import count_readers
from alflow.sim.process import SimProcess
from alflow.util import eventloop

pytestmark = [pytest.mark.integration, pytest.mark.timing]

ROOT = Path(__file__).resolve().parents[2]
MODEL = "sim/llama-3.3-70b"
VOCAB = 20_000


def _workers(parent: int | None = None) -> set[int]:
    """Live (not zombie) processes started by multiprocessing's spawn whose parent is ``parent`` (default: us)."""
    parent = os.getpid() if parent is None else parent
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
        ours = fields.get("PPid", "").strip() == str(parent)
        if ours and not fields.get("State", "").startswith("Z") and b"spawn_main" in cmdline:
            found.add(int(entry.name))
    return found


def _gone(parent: int | None = None, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while _workers(parent):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def _sessions(n: int, seed: int, osl: int = 8) -> list[Session]:
    return random_sessions(n, isl=24, osl=osl, seed=seed, vocab_size=VOCAB)


class Recorder:
    """A progress sink that keeps every call."""

    def __init__(self) -> None:
        self.starts: list[tuple[int | None, str]] = []
        self.advances = 0

    def start(self, total: int | None, description: str) -> None:
        self.starts.append((total, description))

    def advance(self) -> None:
        self.advances += 1


def _sim(*extra: str) -> SimProcess:
    return SimProcess(["--time-scale", "0", "--max-num-seqs", "1024", *extra])


def test_two_processes_send_what_one_sends_at_256_streams() -> None:
    """On alflow's own event loop (uvloop's), as ``alflow bench`` runs: large batches of records come back."""
    sessions, warm = _sessions(768, seed=1), _sessions(128, seed=2)
    results: dict[int, LoadResult] = {}
    with _sim() as sim:
        target = Target(sim.base_url, MODEL, endpoint="completions")
        for processes in (1, 2):
            spec = LoadSpec(concurrency=256, warmup=128, processes=processes)
            results[processes] = eventloop.run(run_load(sessions, target, spec, warmup_sessions=warm))
    assert not _workers()
    one, two = results[1], results[2]
    assert len(two.records) == len(one.records) == 768 + 128
    assert all(r.ok for r in two.records)
    for warmup in (False, True):
        ids = [Counter(r.session_id for r in res.records if r.warmup is warmup) for res in (one, two)]
        assert ids[0] == ids[1]
    measured = [[r for r in res.records if not r.warmup] for res in (one, two)]
    assert sum(r.output_tokens or 0 for r in measured[1]) == sum(r.output_tokens or 0 for r in measured[0])
    assert sum(r.input_tokens or 0 for r in measured[1]) == sum(r.input_tokens or 0 for r in measured[0])
    # one numbering across the workers, in start order, warm-up first
    assert [r.request_id for r in two.records] == list(range(len(two.records)))
    assert all(r.warmup for r in two.records[:128])
    assert two.measure_start_ns <= min(r.start_ns for r in measured[1])
    assert two.measure_end_ns == max(r.done_ns or 0 for r in measured[1])
    assert two.wall_start_s < two.wall_end_s
    load = two.client_load
    assert load is not None
    assert (load.processes, load.concurrency) == (2, 256)
    assert load.in_flight_max <= 256


async def test_the_baseline_runs_once_between_every_warm_up_and_any_measured_request() -> None:
    sessions, warm = _sessions(96, seed=3), _sessions(40, seed=4)
    sink: list[RequestRecord] = []
    progress = Recorder()
    calls: list[int] = []
    seen: list[tuple[int, int, int]] = []

    async def on_measure_start() -> None:
        calls.append(time.perf_counter_ns())
        warmed = [r for r in sink if r.warmup]
        # every worker's warm-up is over and already streamed back; both workers are alive and waiting
        seen.append((len(warmed), sum(r.done_ns is not None for r in warmed), len(_workers())))
        await asyncio.sleep(0.3)  # a slow scrape: no measured request may start meanwhile

    with _sim() as sim:
        target = Target(sim.base_url, MODEL, endpoint="completions")
        spec = LoadSpec(concurrency=16, warmup=40, processes=2)
        result = await run_load(
            sessions,
            target,
            spec,
            on_measure_start=on_measure_start,
            progress=progress,
            warmup_sessions=warm,
            sink=sink,
        )
    assert len(calls) == 1
    assert seen == [(40, 40, 2)]
    measured = [r for r in result.records if not r.warmup]
    assert len(measured) == 96
    assert all(r.ok for r in result.records)
    assert min(r.start_ns for r in measured) >= calls[0] + 300_000_000
    assert max(r.done_ns or 0 for r in result.records if r.warmup) <= calls[0]
    assert result.measure_start_ns >= calls[0]
    assert result.records is sink
    assert progress.starts == [(40, "warm-up"), (96, "measured")]
    assert progress.advances == 40 + 96
    assert not _workers()


async def test_a_fatal_error_in_the_workers_aborts_with_the_records_and_no_worker_left() -> None:
    sink: list[RequestRecord] = []
    with _sim() as sim:
        target = Target(sim.base_url + "/nowhere", MODEL, endpoint="completions")  # a 404 is fatal
        with pytest.raises(LoadAbortedError) as info:
            await run_load(_sessions(64, seed=5), target, LoadSpec(concurrency=4, processes=2), sink=sink)
    assert str(info.value).startswith("client process ")
    assert "answered HTTP 404" in str(info.value)
    records = info.value.result.records
    assert records is sink
    assert any(r.http_status == 404 for r in records)
    assert not any(r.ok for r in records)  # 404, or cancelled when the run stopped
    assert sorted(r.request_id for r in records) == list(range(len(records)))
    assert not _workers()


async def test_cancelling_the_parent_stops_every_worker_and_keeps_the_records() -> None:
    sink: list[RequestRecord] = []
    started = asyncio.Event()
    answered = asyncio.Event()

    class Answers:
        def start(self, total: int | None, description: str) -> None:
            pass

        done = 0

        def advance(self) -> None:
            self.done += 1
            if self.done == 8:  # every short answer: the 8 long requests are in flight
                answered.set()

    async def on_measure_start() -> None:
        started.set()

    with SimProcess(["--time-scale", "1"]) as sim:  # real time: 2,000 tokens take many seconds
        target = Target(sim.base_url, MODEL, endpoint="completions")
        sessions = _sessions(8, seed=7, osl=4) + _sessions(8, seed=6, osl=2000)  # short answers first
        spec = LoadSpec(concurrency=8, processes=2)
        run = run_load(
            sessions, target, spec, on_measure_start=on_measure_start, progress=Answers(), sink=sink
        )
        task = asyncio.create_task(run)
        await asyncio.wait_for(started.wait(), 60)
        assert len(_workers()) == 2
        await asyncio.wait_for(answered.wait(), 30)  # the short answers come back while the long ones run
        await asyncio.sleep(0.5)  # the long ones stream a few tokens
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not _workers()  # no grace needed: the call returns only after its workers are gone
    answers = [r for r in sink if r.ok]
    assert len(answers) == 8
    assert all(r.output_tokens == 4 for r in answers)  # the long answers never came back
    # the long requests in flight are kept, as one process keeps them: each stopping worker sent them
    in_flight = [r for r in sink if not r.ok]
    assert len(in_flight) == 8, [(r.session_id, r.error) for r in sink]
    assert all(r.error == "cancelled" and r.chunk_ns and r.start_ns for r in in_flight)
    assert sorted(r.request_id for r in sink) == list(range(len(sink)))


async def test_a_frozen_client_process_fails_the_load_after_its_timeout_and_none_is_left() -> None:
    """#49: a worker stopped with SIGSTOP kept the run waiting for good; now its silence stops the load."""
    started = asyncio.Event()

    async def on_measure_start() -> None:
        started.set()

    with SimProcess(["--time-scale", "1"]) as sim:  # real time: 2,000 tokens take many seconds
        target = Target(sim.base_url, MODEL, endpoint="completions")
        spec = LoadSpec(concurrency=4, processes=2, timeout_s=3.0)
        task = asyncio.create_task(
            run_load(_sessions(4, seed=8, osl=2000), target, spec, on_measure_start=on_measure_start)
        )
        await asyncio.wait_for(started.wait(), 60)
        frozen = sorted(_workers())[0]
        os.kill(frozen, signal.SIGSTOP)
        t0 = time.monotonic()
        with pytest.raises(LoadAbortedError) as info:
            await asyncio.wait_for(task, 60)
        took = time.monotonic() - t0
    assert f"sent nothing for 5 s (stopped or frozen: pid {frozen})" in str(info.value)
    assert 5 <= took < 5 + 10 + 15, took  # its silence limit, then the stop grace, then terminate and kill
    assert not _workers()


def _bench(url: str, *args: str, **kw: object) -> list[str]:
    return [sys.executable, "-m", "alflow.cli", "bench", "--base-url", url, "--endpoint", "completions",
            "--isl", "24", "--vocab-size", str(VOCAB), "--no-metrics", "--no-progress", *args]  # fmt: skip


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["COLUMNS"] = "200"
    return env


def test_bench_with_two_client_processes_end_to_end(tmp_path: Path) -> None:
    with _sim() as sim:
        argv = _bench(sim.base_url, "--osl", "8", "--concurrency", "32", "--num-prompts", "96",
                      "--warmup", "8", "--client-processes", "2", "--json", "--out", str(tmp_path / "run"))  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, env=_env(), timeout=180, check=False)
        assert done.returncode == 0, done.stderr
        summary = orjson.loads(done.stdout)
        assert (summary["completed"], summary["failed"]) == (96, 0)
        assert summary["config"]["client_processes"] == 2
        records = pl.read_parquet(tmp_path / "run" / "records.parquet")
        assert records.height == 96 + 8
        assert records["request_id"].to_list() == list(range(104))
        argv = _bench(sim.base_url, "--client-processes", "0")
        bad = subprocess.run(argv, capture_output=True, text=True, env=_env(), timeout=60, check=False)
    assert bad.returncode == 2
    lines = bad.stderr.strip().splitlines()
    assert len(lines) == 1, bad.stderr
    assert "--client-processes 0: must be an integer in [1, 64]" in lines[0]


@pytest.mark.parametrize("how", ["ctrl-c", "hangup", "kill"])
def test_bench_interrupted_or_killed_leaves_no_client_process(how: str, tmp_path: Path) -> None:
    with SimProcess(["--time-scale", "1"]) as sim:
        argv = _bench(sim.base_url, "--osl", "3000", "--concurrency", "4", "--num-prompts", "8",
                      "--client-processes", "2", "--out", str(tmp_path / "run"))  # fmt: skip
        proc = subprocess.Popen(
            argv, env=_env(), start_new_session=True, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while len(_workers(proc.pid)) < 2:
                assert proc.poll() is None, proc.stderr.read()  # type: ignore[union-attr]
                assert time.monotonic() < deadline, "the workers never started"
                time.sleep(0.1)
            workers = _workers(proc.pid)
            time.sleep(2.0)  # requests in flight
            if how in ("ctrl-c", "hangup"):
                # a terminal's Ctrl-C, or the terminal closed (round 18, F4): the whole process group
                os.killpg(proc.pid, signal.SIGINT if how == "ctrl-c" else signal.SIGHUP)
                proc.wait(30)
                assert (tmp_path / "run" / "records.parquet").exists()  # interrupted: the records are kept
                said = proc.stderr.read().decode(errors="replace")  # type: ignore[union-attr]
                assert "warning: interrupted before it ended: " in said, said  # and it says so, in one line
            else:
                proc.kill()  # no cleanup in the parent: each worker sees its control pipe close and stops
                proc.wait(30)
            deadline = time.monotonic() + 15
            while any(Path(f"/proc/{pid}").exists() and _alive(pid) for pid in workers):
                assert time.monotonic() < deadline, f"workers left behind after {how}"
                time.sleep(0.1)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            proc.stderr.close()  # type: ignore[union-attr]


def _alive(pid: int) -> bool:
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return False
    state = next((line for line in lines if line.startswith("State")), "State:\tZ")
    return "Z" not in state.split(":", 1)[1]


def test_a_client_process_imports_neither_polars_nor_numpy() -> None:
    """A worker imports the load generator and unpickles its target (every plugin's count reader): no frame library.

    Each spawned client process would otherwise hold polars and numpy (about 40 MB resident) for nothing; the
    records become a frame in the parent (issue #48 item 6).
    """
    target = pickle.dumps(
        Target("http://127.0.0.1:1", "m", endpoint="completions", counts=count_readers(None))
    )
    assert count_readers(None)  # the readers travel: their modules are imported on the worker's side
    code = (
        "import pickle, sys; import alflow.loadgen, alflow.loadgen.fast, alflow.loadgen.multiproc;"
        "pickle.loads(sys.stdin.buffer.read());"
        "print(sorted(m for m in ('polars', 'numpy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], input=target, capture_output=True, check=True)
    assert out.stdout.decode().strip() == "[]"
