"""Benchmark of the K sweep at team scale (a script, not a test): prints a table.

Against one running ``prefect server`` (started here on SQLite in a temporary home, or the one
``PREFECT_API_URL`` names with ``--api-url``):

1. Wall time of a K = 1..7 sim sweep (``sweep-nightly``'s parameters, the sim at ``--time-scale``)
   run in-process (``fan_out`` None: every K one after another in one process) and fanned out over two
   process workers (work queues ``node-1`` / ``node-2`` of pool ``local``, a limit of 1 each), and their
   ratio (target: fan-out at most 0.6x the in-process time). The fan-out row also gives the mean delay
   from a child run's creation to its start (the worker's pick-up and process start).
2. Prefect's overhead against that server: per flow run (a flow without tasks, ``--flow-runs`` times)
   and per task run (a flow of ``--tasks`` no-op tasks minus a flow without tasks, divided by the
   tasks; target under 0.2 s per task). The workers poll every ``--worker-poll-s`` seconds
   (``PREFECT_WORKER_QUERY_SECONDS``; Prefect's default of 10 s adds about 5 s to each child's start).

Each child's work is set by ``--osl`` (M2's output length) and ``--load-s`` (the time its server
takes to load the model: both modes start one server per M1 and per M2, as a GPU run does). A child of
a few seconds measures Prefect's start cost more than the fan-out; a GPU child takes minutes.

Usage: .venv/bin/python benchmarks/sweep_scale.py [--time-scale 1] [--worker-poll-s 2] [--ks 1,2,3,4,5,6,7]
       [--concurrencies 4,16] [--osl 64] [--load-s 0] [--flow-runs 5] [--tasks 200] [--api-url URL]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import yaml

from alflow.config.presets import load_preset, sweep_params

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
NODES = ("node-1", "node-2")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _prefect(env: dict[str, str], *args: str) -> str:
    out = subprocess.run(
        [str(BIN / "prefect"), "--no-prompt", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"prefect {' '.join(args)} failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    return out.stdout


def _start_server(home: Path) -> tuple[subprocess.Popen[bytes], dict[str, str]]:
    port = _free_port()
    env = {
        **os.environ,
        "PREFECT_HOME": str(home),
        "PREFECT_API_URL": f"http://127.0.0.1:{port}/api",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_API_DATABASE_CONNECTION_URL": f"sqlite+aiosqlite:///{home}/prefect.db",
        "ALFLOW_HOME": str(ROOT),
        "DO_NOT_TRACK": "1",
    }
    proc = subprocess.Popen(
        [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=(home / "server.log").open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/api/health", timeout=2).status_code == 200:
                return proc, env
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)
    raise SystemExit("prefect server did not start within 180 s")


def _config(tmp: Path, args: argparse.Namespace, *, fan_out: bool) -> Path:
    # sweep-nightly's short form (preset sim), as the sweep resolves it
    params: dict[str, Any] = sweep_params(preset=load_preset("sim", ROOT), ks=range(1, 8)).model_dump(
        mode="json"
    )
    params["ks"] = args.ks
    results = tmp / ("results-fan-out" if fan_out else "results-in-process")
    for part in ("gate", "benchmark"):
        params[part]["placement"] = {"runner": {"kind": "process"}, "results_root": str(results)}
        params[part]["server"]["extra_args"] = [
            "--time-scale",
            str(args.time_scale),
            "--startup-delay",
            str(args.load_s),
        ]
    params["benchmark"]["concurrencies"] = args.concurrencies
    params["benchmark"]["workload"]["osl"] = args.osl
    if fan_out:
        params["fan_out"] = {
            "nodes": [{"work_queue": n, "gpu_host": f"bench-{n}"} for n in NODES],
            "poll_s": 0.5,
        }
    path = tmp / ("fan-out.yaml" if fan_out else "in-process.yaml")
    path.write_text(yaml.safe_dump(params))
    return path


def _sweep(env: dict[str, str], config: Path) -> float:
    start = time.perf_counter()
    out = subprocess.run(
        [str(BIN / "alflow"), "run", "sweep", "--config", str(config)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - start
    if out.returncode != 0:
        raise SystemExit(f"sweep {config.name} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return wall


def _children(env: dict[str, str], since: str) -> tuple[list[float], float]:
    """The fanned-out children's delays from creation to start, and half their summed run time.

    Half the run time is the fan-out's floor on two nodes: its wall time if no child waited to start
    and the nodes were perfectly balanced.
    """
    body = {
        "flow_runs": {"work_queue_name": {"any_": list(NODES)}, "expected_start_time": {"after_": since}},
        "limit": 200,
    }
    runs = httpx.post(f"{env['PREFECT_API_URL']}/flow_runs/filter", json=body, timeout=30).json()

    def t(value: str) -> datetime:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))

    delays = [
        (t(r["start_time"]) - t(r["expected_start_time"])).total_seconds()
        for r in runs
        if r.get("start_time")
    ]
    return delays, sum(float(r["total_run_time"]) for r in runs) / len(NODES)


OVERHEAD = """
import json, sys, time
from prefect import flow, task

@task
def noop(i: int) -> int:
    return i

@flow
def many(n: int) -> int:
    return sum(noop(i) for i in range(n))

runs, tasks = int(sys.argv[1]), int(sys.argv[2])
many(2)  # warm: imports, the client, the flow's registration
t0 = time.perf_counter()
for _ in range(runs):
    many(0)
per_flow = (time.perf_counter() - t0) / runs
t0 = time.perf_counter()
many(tasks)
with_tasks = time.perf_counter() - t0
print(json.dumps({"per_flow_s": per_flow, "per_task_s": (with_tasks - per_flow) / tasks}))
"""


def _overhead(env: dict[str, str], runs: int, tasks: int) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", OVERHEAD, str(runs), str(tasks)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"overhead probe failed:\n{out.stderr[-3000:]}")
    data: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return data


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--time-scale", type=float, default=1.0, help="the sim's time scale (1: real GPU timing)"
    )
    parser.add_argument("--ks", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 3, 4, 5, 6, 7])
    parser.add_argument("--concurrencies", type=lambda s: [int(x) for x in s.split(",")], default=[4, 16])
    parser.add_argument(
        "--osl",
        type=int,
        default=64,
        help="M2's output length per request: the work per child run (a GPU run's children take minutes)",
    )
    parser.add_argument(
        "--load-s",
        type=float,
        default=0.0,
        help=(
            "seconds each child's server takes to load its model before it serves (the sim's --startup-delay); "
            "both modes start a server per M1 and per M2. The CPU vLLM recipe here starts in 60-90 s, a 70B model "
            "on GPUs in minutes"
        ),
    )
    parser.add_argument("--flow-runs", type=int, default=5)
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument(
        "--worker-poll-s",
        type=float,
        default=2.0,
        help="the workers' PREFECT_WORKER_QUERY_SECONDS (Prefect's default 10 s adds ~5 s to each child's start)",
    )
    parser.add_argument(
        "--api-url", default=None, help="a running server (default: start one here on SQLite)"
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="alflow-sweep-scale-") as tmp_text:
        tmp = Path(tmp_text)
        server: subprocess.Popen[bytes] | None = None
        if args.api_url:
            env = {
                **os.environ,
                "PREFECT_API_URL": args.api_url,
                "PREFECT_HOME": str(tmp),
                "ALFLOW_HOME": str(ROOT),
            }
        else:
            server, env = _start_server(tmp)
        workers: list[subprocess.Popen[bytes]] = []
        try:
            _prefect(env, "work-pool", "create", "local", "--type", "process", "--overwrite")
            for node in NODES:
                _prefect(env, "work-queue", "create", node, "--pool", "local", "--limit", "1")
                _prefect(env, "gcl", "create", f"bench-{node}", "--limit", "1")
            _prefect(env, "deploy", "--name", "m1-gate", "--name", "m2-benchmark")
            for node in NODES:
                workers.append(
                    subprocess.Popen(
                        [
                            str(BIN / "prefect"),
                            "worker",
                            "start",
                            "--pool",
                            "local",
                            "--work-queue",
                            node,
                            "--limit",
                            "1",
                        ],
                        env={**env, "PREFECT_WORKER_QUERY_SECONDS": str(args.worker_poll_s)},
                        cwd=ROOT,
                        stdout=(tmp / f"worker-{node}.log").open("wb"),
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
            in_process = _sweep(env, _config(tmp, args, fan_out=False))
            since = datetime.now().astimezone().isoformat()
            fanned = _sweep(env, _config(tmp, args, fan_out=True))
            delays, floor = _children(env, since)
            cost = _overhead(env, args.flow_runs, args.tasks)
        finally:
            for proc in [*workers, *([server] if server else [])]:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                    proc.wait(timeout=20)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    os.killpg(proc.pid, signal.SIGKILL)

    ks = ",".join(str(k) for k in args.ks)
    rows = [
        (f"sweep K={ks} in-process wall (s)", f"{in_process:.1f}", ""),
        (f"sweep K={ks} fanned out over 2 workers wall (s)", f"{fanned:.1f}", ""),
        ("fan-out / in-process", f"{fanned / in_process:.2f}x", "target <= 0.60x"),
        (
            "fan-out floor: children's run time / 2 nodes (s)",
            f"{floor:.1f}",
            f"{floor / in_process:.2f}x of in-process",
        ),
        (
            "child run: creation to start, mean (s)",
            f"{statistics.fmean(delays):.1f}" if delays else "n/a",
            f"{len(delays)} runs",
        ),
        (
            "Prefect overhead per flow run (s)",
            f"{cost['per_flow_s']:.3f}",
            f"{args.flow_runs} flows without tasks",
        ),
        (
            "Prefect overhead per task run (ms)",
            f"{cost['per_task_s'] * 1000:.2f}",
            f"target < 200 ms ({args.tasks} no-op tasks)",
        ),
    ]
    print(
        f"sim --time-scale {args.time_scale}, model load {args.load_s:g} s per server, M2 OSL {args.osl}, "
        f"concurrencies {args.concurrencies}, workers poll every "
        f"{args.worker_poll_s:g} s, {os.cpu_count()} CPUs"
    )
    print(f"{'metric':<52} {'value':>10}  note")
    for name, value, note in rows:
        print(f"{name:<52} {value:>10}  {note}")


if __name__ == "__main__":
    main()
