"""The K sweep fanned out over two nodes of a real ``prefect server`` on PostgreSQL, with two process workers.

Each node is a work queue of the ``local`` pool (``node-1``, ``node-2``, a concurrency limit of 1 each)
polled by its own worker, and a global concurrency limit its runs hold. A K = 1..4 sim sweep runs
``alflow run sweep`` against the server: both nodes work at once, a node never runs two children at
once, every child completes and the sweep's own run holds K = 1..4 (four K: each node runs two or more
children, enough to see both at work at once and one at a time each; the K = 1..7 of a nightly sweep is
the same dispatch with more children). Then a node dies mid-sweep, a K = 1, 2 sweep (its worker and
the flow run it was running are killed): the sweep ends, naming the lost run and node, and a re-run
finishes the missing K on the live node, reusing every child that completed (Prefect's cache).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from alflow.config.presets import load_preset, sweep_params
from alflow.results.store import open_run
from tests.e2e.prefect_support import ROOT, api, cli, ensure_limit, ensure_pool

pytestmark = pytest.mark.services

ALFLOW = str(Path(sys.executable).parent / "alflow")
PREFECT = str(Path(sys.executable).parent / "prefect")
NODES = ("node-1", "node-2")
KS = (1, 2, 3, 4)
LOST_KS = (1, 2)
"""The sweep that loses a node: two K, one child on each node at the start (each K is ~17 s more on one node)."""


def _ensure_queue(env: dict[str, str], pool: str, name: str, limit: int) -> None:
    try:
        asyncio.run(api(env, "GET", f"/work_pools/{pool}/queues/{name}"))
    except httpx.HTTPStatusError as exc:
        if exc.response.status_code != 404:
            raise
        cli(env, "work-queue", "create", name, "--pool", pool, "--limit", str(limit))
    else:
        asyncio.run(api(env, "PATCH", f"/work_pools/{pool}/queues/{name}", {"concurrency_limit": limit}))


def _children(pid: int) -> list[int]:
    """Every descendant process of ``pid`` (from /proc)."""
    out: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                kids = [int(x) for x in (task / "children").read_text().split()]
            except OSError:
                continue
            out += kids
            todo += kids
    return out


def _kill_tree(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL a worker and everything it started (a node going down), then reap it."""
    for pid in [proc.pid, *_children(proc.pid)]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait(timeout=30)


@pytest.fixture
def node_workers(
    prefect_server: dict[str, str], tmp_path: Path
) -> Iterator[dict[str, subprocess.Popen[bytes]]]:
    """One process worker per node (``--work-queue node-N --limit 1``); every one stopped at the end."""
    # each worker asks for runs every second (Prefect's default: 10 s, up to 10 s of idle node per child run)
    env = {**prefect_server, "PREFECT_WORKER_QUERY_SECONDS": "1"}
    ensure_pool(env, "local")
    for node in NODES:
        _ensure_queue(env, "local", node, 1)
        ensure_limit(env, f"e2e-{node}", 1)
    cli(env, "deploy", "--name", "m1-gate", "--name", "m2-benchmark", timeout=300)
    workers: dict[str, subprocess.Popen[bytes]] = {}
    for node in NODES:
        log = (tmp_path / f"worker-{node}.log").open("wb")
        workers[node] = subprocess.Popen(
            [
                PREFECT,
                "worker",
                "start",
                "--pool",
                "local",
                "--work-queue",
                node,
                "--limit",
                "1",
                "--name",
                node,
            ],
            env=env,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield workers
    finally:
        for proc in workers.values():
            if proc.poll() is None:
                _kill_tree(proc)


def _sweep_config(tmp_path: Path, results: Path, concurrencies: list[int], ks: tuple[int, ...] = KS) -> Path:
    # sweep-nightly's short form (preset sim), as the sweep resolves it
    params: dict[str, Any] = sweep_params(preset=load_preset("sim", ROOT), ks=ks).model_dump(mode="json")
    params["ks"] = list(ks)
    for part in ("gate", "benchmark"):
        params[part]["placement"] = {"runner": {"kind": "process"}, "results_root": str(results)}
        # each child's server loads for a few seconds, as a real one loads its model: children of ~2 s on a
        # ~9 s dispatch cycle could alternate between the nodes by chance and never overlap (seen once in CI)
        params[part]["server"]["extra_args"] = [
            *params[part]["server"].get("extra_args", []),
            "--startup-delay",
            "4",
        ]
    params["benchmark"]["concurrencies"] = concurrencies
    params["fan_out"] = {
        "nodes": [{"work_queue": n, "gpu_host": f"e2e-{n}"} for n in NODES],
        "node_timeout_s": 30,
        "poll_s": 1,
    }
    path = tmp_path / f"sweep-{results.name}.yaml"
    path.write_text(yaml.safe_dump(params))
    return path


def _start_sweep(env: dict[str, str], config: Path, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [ALFLOW, "run", "sweep", "--config", str(config)],
        env=env,
        cwd=ROOT,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _finish(proc: subprocess.Popen[bytes], log: Path, timeout: float) -> tuple[int, str]:
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        pytest.fail(f"the sweep hung for {timeout:.0f} s:\n{log.read_text()[-4000:]}")
    return rc, log.read_text()


def _node_runs(env: dict[str, str], since: str) -> list[dict[str, Any]]:
    """The flow runs sent to the nodes' work queues since ``since`` (ISO time)."""
    body = {
        "flow_runs": {"work_queue_name": {"any_": list(NODES)}, "expected_start_time": {"after_": since}},
        "limit": 200,
    }
    runs: list[dict[str, Any]] = asyncio.run(api(env, "POST", "/flow_runs/filter", body))
    return runs


def _t(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _sweep_run(results: Path) -> Any:
    [run_dir] = sorted((results / "sweep").iterdir())[-1:]
    return open_run(run_dir)


def test_a_k_sweep_fans_out_over_two_nodes_one_run_per_node_and_survives_a_lost_node(
    prefect_server: dict[str, str], node_workers: dict[str, subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    env = prefect_server
    since = datetime.now().astimezone().isoformat()

    # 1. K = 1..4 over both nodes: every child completes, both nodes busy at once, one run per node at a time
    results = tmp_path / "results-a"
    log = tmp_path / "sweep-a.log"
    rc, text = _finish(_start_sweep(env, _sweep_config(tmp_path, results, [4]), log), log, 900)
    assert rc == 0, text[-4000:]
    runs = _node_runs(env, since)
    assert len(runs) == 2 * len(KS), [(r["name"], r["state_type"]) for r in runs]  # M1 and M2 for each K
    assert {r["state_type"] for r in runs} == {"COMPLETED"}
    spans = {
        n: sorted((_t(r["start_time"]), _t(r["end_time"])) for r in runs if r["work_queue_name"] == n)
        for n in NODES
    }
    for node, intervals in spans.items():
        assert intervals, f"{node} ran nothing"
        for (_, end), (start, _) in itertools.pairwise(intervals):
            assert start >= end, f"{node} ran two children at once: {intervals}"
    assert any(
        a_start < b_end and b_start < a_end
        for a_start, a_end in spans["node-1"]
        for b_start, b_end in spans["node-2"]
    ), f"the two nodes never worked at the same time: {spans}"
    created = {
        step: sorted(_t(r["created"]) for r in runs if r["name"].startswith(step + "-"))
        for step in ("m1", "m2")
    }
    assert len(created["m1"]) == len(created["m2"]) == len(KS), [r["name"] for r in runs]
    assert created["m1"][-1] < created["m2"][0], (
        "a freed node takes every K's M1 before any M2 (dispatch_rank)"
    )
    sweep = _sweep_run(results)
    assert sweep.complete
    assert sweep.table("per_k")["k"].to_list() == list(KS)
    assert set(sweep.table("per_k")["node"].to_list()) == set(NODES)
    assert sorted(set(sweep.table("spec_stats")["k"].to_list())) == list(KS)
    summary = sweep.json("summary")
    assert summary["failures"] == []
    assert [b["concurrency"] for b in summary["best_k"]] == [4]
    html = (Path(sweep.dir) / "report.html").read_text()
    last = sweep.table("per_k").row(len(KS) - 1, named=True)
    assert last["k"] == KS[-1]
    assert last["benchmark_dir"] in html  # the report names every K's M2 run directory

    # 2. node-2 dies while it runs a child: the sweep ends (no hang) naming the run, its state and node
    since = datetime.now().astimezone().isoformat()
    results = tmp_path / "results-b"
    config = _sweep_config(tmp_path, results, [8], LOST_KS)  # other parameters: nothing of part 1 is reused
    log = tmp_path / "sweep-b.log"
    proc = _start_sweep(env, config, log)
    deadline = time.monotonic() + 300
    victim: dict[str, Any] | None = None
    while victim is None and time.monotonic() < deadline and proc.poll() is None:
        running = [
            r
            for r in _node_runs(env, since)
            if r["work_queue_name"] == "node-2" and r["state_type"] == "RUNNING"
        ]
        victim = running[0] if running else None
        time.sleep(0.5)
    assert victim is not None, "node-2 never ran a child of the second sweep"
    _kill_tree(node_workers["node-2"])
    rc, text = _finish(proc, log, 900)
    assert rc != 0, "a sweep with a lost run must fail"
    lost = asyncio.run(api(env, "GET", f"/flow_runs/{victim['id']}"))
    assert lost["state_type"] == "CRASHED", lost["state"]
    sweep = _sweep_run(results)
    failures = sweep.json("summary")["failures"]
    assert any(
        f"'{victim['name']}'" in f and "state Crashed" in f and "node node-2" in f for f in failures
    ), failures
    assert any("node node-2 lost" in line for line in sweep.json("summary")["lost_nodes"])

    # 3. the re-run finishes the lost K on the live node and reuses every child that completed
    since = datetime.now().astimezone().isoformat()
    log = tmp_path / "sweep-c.log"
    rc, text = _finish(_start_sweep(env, config, log), log, 900)
    assert rc == 0, text[-4000:]
    sweep = _sweep_run(results)
    per_k = sweep.table("per_k")
    assert per_k["k"].to_list() == list(LOST_KS)
    assert sorted(set(sweep.table("spec_stats")["k"].to_list())) == list(LOST_KS)
    new_runs = _node_runs(env, since)
    assert {r["work_queue_name"] for r in new_runs} == {"node-1"}  # node-2 is gone: nothing waits for it
    assert 1 <= len(new_runs) <= 2, [r["name"] for r in new_runs]  # only the lost K runs again
    cached = per_k["gate_cached"].to_list() + per_k["benchmark_cached"].to_list()
    assert cached.count(True) == 2 * len(LOST_KS) - len(new_runs), per_k
