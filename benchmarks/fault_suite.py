"""Fault suite (a script, not a test): runs real faults through the real ``alflow`` CLI and prints a table.

Every scenario runs the command line (``python -m alflow.cli``) and real sim servers (``python -m
alflow.sim serve``) in subprocesses, each in a folder of its own (``ALFLOW_STATE_DIR``, ``PREFECT_HOME``,
``TMPDIR`` and the results under it), and measures:

- outcome: what happened (exit code, the error line, run status), against the documented outcome;
  a scenario whose outcome is not the documented one is a *silent wrong result*;
- records kept / expected: rows the run stored against what the server answered (or what must land);
- processes left: processes carrying the scenario's marker (an environment variable every process
  it starts inherits: servers, guards, Prefect's temporary server) or alive in its server registry,
  after the run, then after ``alflow infra cleanup --older-than 0`` (the column shows the latter);
- canaries: unique secret strings placed in the environment, configs, URLs and the API key, found in
  any file the scenario wrote (results, logs, registry, Prefect's database) or in anything printed;
- tracebacks: ``Traceback (most recent call last)`` in anything printed.

Scenarios: start-failure, crash-mid-point, error-events, stalled-stream, counter-reset, sigkill-m2,
sigterm-m2, concurrent-writers, bad-inputs (every row of tests/bad_inputs.py), secret-canaries,
hostile-names. The numbers are counts of what happened in this run; nothing is simulated or assumed.

Usage: .venv/bin/python benchmarks/fault_suite.py [--only NAME,...] [--json] [--keep]
Exit code 1 when a target is missed (0 tracebacks, 0 silent wrong results, 0 processes left,
0 lost records, 0 canaries).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # the tables of tests/bad_inputs.py and tests/markdown_check.py

import polars as pl  # noqa: E402
import yaml  # noqa: E402

from alflow.procguard import pid_alive  # noqa: E402
from tests.bad_inputs import (  # noqa: E402
    BASES,
    CLI_CASES,
    CONFIG_CASES,
    expected_name,
    materialize,
)
from tests.markdown_check import HOSTILE, md_html, md_text  # noqa: E402

MARKER_VAR = "ALFLOW_FAULT_SUITE_MARKER"
TRACEBACK = "Traceback (most recent call last)"
_SUITE = uuid.uuid4().hex[:10]
CANARIES: dict[str, str] = {
    "env HF_TOKEN": f"hf_CanaryEnv{_SUITE}",
    "env runner secret": f"CanaryRunnerSecret{_SUITE}",
    "config extra_env": f"CanaryExtraEnv{_SUITE}",
    "config extra_args": f"CanaryExtraArg{_SUITE}",
    "URL password": f"CanaryUrlPw{_SUITE}",
    "URL token": f"CanaryUrlTok{_SUITE}",
    "API key": f"sk-CanaryApiKey{_SUITE}",
    "wrong API key": f"sk-CanaryWrongKey{_SUITE}",
}
"""Unique per suite run, so files of an earlier run can never be counted."""

FAST_SIM = ["--time-scale", "0", "--seed", "5"]


# --------------------------------------------------------------------------------------------
# Results


@dataclass(frozen=True)
class Result:
    """One scenario's measured outcome."""

    scenario: str
    outcome: str
    expected: str
    as_documented: bool
    records_kept: int | None
    records_expected: int | None
    processes_after_run: int
    processes_left: int
    canaries: int
    tracebacks: int
    wall_s: float
    details: tuple[str, ...] = ()

    @property
    def lost_records(self) -> int:
        if self.records_kept is None or self.records_expected is None:
            return 0
        return max(0, self.records_expected - self.records_kept)

    @property
    def ok(self) -> bool:
        return (
            self.as_documented
            and self.processes_left == 0
            and self.canaries == 0
            and self.tracebacks == 0
            and self.lost_records == 0
        )

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "lost_records": self.lost_records, "ok": self.ok}


@dataclass(frozen=True)
class Ran:
    """A finished command."""

    argv: tuple[str, ...]
    code: int | None
    stdout: str
    stderr: str
    wall_s: float

    @property
    def text(self) -> str:
        return self.stdout + self.stderr

    def error_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.startswith("error: ")]

    def first_error(self) -> str:
        lines = self.error_lines()
        return lines[0] if lines else (self.stderr.strip().splitlines() or ["(no stderr)"])[-1]


@dataclass
class Box:
    """A scenario's own folder, environment and marker; collects what it printed."""

    name: str
    dir: Path
    marker: str = field(default_factory=lambda: f"{_SUITE}-{uuid.uuid4().hex[:8]}")
    printed: list[str] = field(default_factory=list)
    started: list[subprocess.Popen[bytes]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        for sub in ("input", "printed", "state", "prefect", "tmp", "work"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)

    @property
    def input(self) -> Path:
        """Files the suite itself wrote (configs holding canaries on purpose): never searched."""
        return self.dir / "input"

    def record(self, ran: Ran) -> None:
        """Keep what a command printed (searched as printed output, shown with --keep)."""
        with self.lock:
            self.printed.append(ran.text)
            n = len(self.printed)
        (self.dir / "printed" / f"{n:03d}.txt").write_text(
            f"$ {' '.join(ran.argv[2:])}\n{code_text(ran.code)}\n--- stdout\n{ran.stdout}\n--- stderr\n{ran.stderr}",
            encoding="utf-8",
        )

    @property
    def work(self) -> Path:
        return self.dir / "work"

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_") and k != "OPENAI_API_KEY"}
        env.update(
            PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
            ALFLOW_STATE_DIR=str(self.dir / "state"),
            PREFECT_HOME=str(self.dir / "prefect"),
            PREFECT_SERVER_ANALYTICS_ENABLED="false",
            DO_NOT_TRACK="1",
            TMPDIR=str(self.dir / "tmp"),
            COLUMNS="200",
            PYTHONUNBUFFERED="1",
            HF_TOKEN=CANARIES["env HF_TOKEN"],  # a real secret in every run's environment
        )
        env[MARKER_VAR] = self.marker
        env.update(extra or {})
        return env

    def alflow(
        self, *args: str, env: dict[str, str] | None = None, timeout_s: float = 600, cwd: Path | None = None
    ) -> Ran:
        argv = (sys.executable, "-m", "alflow.cli", *args)
        started = time.monotonic()
        try:
            done = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                env=self.env(env),
                cwd=cwd or self.work,
                timeout=timeout_s,
                check=False,
                stdin=subprocess.DEVNULL,
            )
            ran = Ran(argv, done.returncode, done.stdout, done.stderr, time.monotonic() - started)
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
            err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr or ""
            ran = Ran(argv, None, out, err + f"\n(timed out after {timeout_s} s)", time.monotonic() - started)
        self.record(ran)
        return ran

    def popen(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """Start ``alflow ARGS`` in the background (output to files under the box)."""
        n = len(self.started)
        proc = subprocess.Popen(
            [sys.executable, "-m", "alflow.cli", *args],
            stdout=(self.dir / "printed" / f"bg{n}.out").open("wb"),
            stderr=(self.dir / "printed" / f"bg{n}.err").open("wb"),
            env=self.env(env),
            cwd=self.work,
            stdin=subprocess.DEVNULL,
        )
        self.started.append(proc)
        return proc

    def collect(self, proc: subprocess.Popen[bytes], timeout_s: float) -> Ran:
        n = self.started.index(proc)
        started = time.monotonic()
        try:
            code: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            code = None
        out = (self.dir / "printed" / f"bg{n}.out").read_text(errors="replace")
        err = (self.dir / "printed" / f"bg{n}.err").read_text(errors="replace")
        ran = Ran(tuple(str(a) for a in proc.args), code, out, err, time.monotonic() - started)  # type: ignore[union-attr]
        self.record(ran)
        return ran

    def config(self, name: str, data: dict[str, Any]) -> Path:
        path = self.input / name
        path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        return path


# --------------------------------------------------------------------------------------------
# Measuring: processes, canaries, tracebacks


def marked_processes(marker: str) -> list[tuple[int, str]]:
    """Live processes (not zombies) whose environment carries ``marker``, with their command line."""
    needle = f"{MARKER_VAR}={marker}".encode()
    found = []
    me = os.getpid()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == me:
            continue
        try:
            environ = (proc / "environ").read_bytes()
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if needle in environ.split(b"\0") and pid_alive(int(proc.name)):
            found.append((int(proc.name), cmd.strip()[:160]))
    return found


def registry_alive(box: Box) -> list[tuple[int, str]]:
    """Servers of the box's registry that are still alive (entries of gone servers do not count)."""
    alive = []
    for path in sorted((box.dir / "state" / "servers").glob("process-*.json")):
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if pid_alive(int(entry["pid"])):
            alive.append((int(entry["pid"]), f"registered {entry.get('framework')} server {path.name}"))
    return alive


def leftovers(box: Box) -> list[tuple[int, str]]:
    found = dict(marked_processes(box.marker))
    found.update(registry_alive(box))
    return sorted(found.items())


def wait_gone(box: Box, timeout_s: float) -> list[tuple[int, str]]:
    deadline = time.monotonic() + timeout_s
    left = leftovers(box)
    while left and time.monotonic() < deadline:
        time.sleep(0.3)
        left = leftovers(box)
    return left


def kill_marked(box: Box) -> None:
    """The suite itself never leaves a process: SIGKILL whatever still carries the box's marker."""
    for proc in box.started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    for pid, _ in leftovers(box):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def canary_hits(box: Box) -> list[str]:
    """``canary in place`` for every canary in a file the box wrote (inputs excluded) or in its output."""
    hits = []
    values = {name: value.encode() for name, value in CANARIES.items()}
    for path in sorted(box.dir.rglob("*")):
        skip = (box.input, box.dir / "printed")  # the suite's inputs; printed output is counted below
        if path.is_symlink() or not path.is_file() or any(d in path.parents for d in skip):
            continue
        try:
            data = path.read_bytes()
        except OSError:
            continue
        hits += [f"{name} in {path.relative_to(box.dir)}" for name, value in values.items() if value in data]
    printed = "\n".join(box.printed).encode()
    hits += [f"{name} in printed output" for name, value in values.items() if value in printed]
    return hits


def tracebacks(box: Box) -> int:
    return sum(text.count(TRACEBACK) for text in box.printed)


@dataclass(frozen=True)
class Verdict:
    """What a scenario body reports; the harness adds processes, canaries and tracebacks."""

    outcome: str
    expected: str
    as_documented: bool
    records_kept: int | None = None
    records_expected: int | None = None
    details: tuple[str, ...] = ()


def run_scenario(name: str, body: Callable[[Box], Verdict], root: Path) -> Result:
    box = Box(name, root / name)
    started = time.monotonic()
    details: list[str] = []
    try:
        verdict = body(box)
    except Exception as exc:  # the suite's own failure is a result, shown as such
        verdict = Verdict(f"suite error: {type(exc).__name__}: {exc}", "(scenario ran)", False)
    for proc in box.started:  # background commands the body did not wait for
        if proc.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
    after_run = wait_gone(box, 30.0)
    if after_run:
        details.append("alive after the run: " + "; ".join(f"{p} {c}" for p, c in after_run))
    cleanup = box.alflow("infra", "cleanup", "--older-than", "0", "--json", timeout_s=120)
    if cleanup.code != 0:
        details.append(f"cleanup exit {cleanup.code}: {cleanup.first_error()}")
    after_cleanup = wait_gone(box, 15.0)
    if after_cleanup:
        details.append("alive after cleanup: " + "; ".join(f"{p} {c}" for p, c in after_cleanup))
    kill_marked(box)
    hits = canary_hits(box)
    if hits:
        details.append("canaries: " + "; ".join(hits[:10]))
    return Result(
        scenario=name,
        outcome=verdict.outcome,
        expected=verdict.expected,
        as_documented=verdict.as_documented,
        records_kept=verdict.records_kept,
        records_expected=verdict.records_expected,
        processes_after_run=len(after_run),
        processes_left=len(after_cleanup),
        canaries=len(hits),
        tracebacks=tracebacks(box),
        wall_s=round(time.monotonic() - started, 1),
        details=(*verdict.details, *details),
    )


# --------------------------------------------------------------------------------------------
# Helpers: sim servers, configs, run folders


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_sim(
    box: Box, args: list[str], *, port: int, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """``python -m alflow.sim serve`` on ``port`` (the box's marker in its environment), healthy."""
    n = len(box.started)
    proc = subprocess.Popen(
        [sys.executable, "-m", "alflow.sim", "serve", "--host", "127.0.0.1", "--port", str(port), *args],
        stdout=(box.dir / f"sim{n}.log").open("wb"),
        stderr=subprocess.STDOUT,
        env=box.env(env),
        cwd=box.work,
        stdin=subprocess.DEVNULL,
    )
    box.started.append(proc)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"sim exited {proc.returncode}: {(box.dir / f'sim{n}.log').read_text()[-500:]}"
            )
        with (
            contextlib.suppress(OSError),
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r,
        ):
            if r.status == 200:
                return proc
        time.sleep(0.2)
    raise RuntimeError("sim not healthy within 60 s")


def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def post_json(url: str, body: dict[str, Any], key: str | None = None) -> dict[str, Any]:
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers)
    with urllib.request.urlopen(request, timeout=30) as r:  # loopback sim
        return dict(json.loads(r.read()))


def metric(url: str, name: str) -> float:
    """Sum of the samples of ``name`` (any labels) in the Prometheus text at ``url``."""
    with urllib.request.urlopen(url, timeout=10) as r:  # loopback sim
        text = r.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and line[len(name) : len(name) + 1] in (" ", "{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def m2_config(box: Box, *sim_args: str, **changes: Any) -> dict[str, Any]:
    config: dict[str, Any] = json.loads(json.dumps(BASES["m2"]))  # the table's valid base, deep-copied
    config["server"]["extra_args"] = [*FAST_SIM, *sim_args]
    config["server"]["readiness_timeout_s"] = 60
    config["placement"] = {"runner": {"kind": "process"}, "results_root": str(box.work / "results")}
    config["workload"] = {"kind": "random", "isl": 128, "osl": 64}
    config.update(changes)
    return config


def run_dirs(box: Box, flow: str = "m2") -> list[Path]:
    root = box.work / "results" / flow
    return sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []


def manifest(run_dir: Path) -> dict[str, Any]:
    return dict(json.loads((run_dir / "manifest.json").read_text(encoding="utf-8")))


def table(run_dir: Path, name: str) -> pl.DataFrame | None:
    path = run_dir / f"{name}.parquet"
    return pl.read_parquet(path) if path.exists() else None


def code_text(code: int | None) -> str:
    return "timed out" if code is None else f"exit {code}"


def cut(text: str, n: int = 90) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 3] + "..."


# --------------------------------------------------------------------------------------------
# Scenarios


def start_failure(box: Box) -> Verdict:
    config = box.config("m2.yaml", m2_config(box, "--fail-startup"))
    ran = box.alflow("run", "m2", "--config", str(config))
    runs = run_dirs(box)
    status = manifest(runs[-1])["status"] if runs else "no run dir"
    error = ran.first_error()
    ok = (
        ran.code == 1
        and len(ran.error_lines()) == 1
        and "m2 failed" in error
        and "before it was ready" in error
        and status in ("failed", "no run dir")
    )
    return Verdict(
        f"{code_text(ran.code)}, run {status}: {cut(error)}",
        "exit 1, one error line naming the start failure, run not complete",
        ok,
        details=(f"took {ran.wall_s:.0f} s (start retries included)",),
    )


def crash_mid_point(box: Box) -> Verdict:
    answered = 30
    config = box.config(
        "m2.yaml",
        m2_config(box, "--crash-after-requests", str(answered), concurrencies=[4, 16], preflight=False),
    )
    ran = box.alflow("run", "m2", "--config", str(config))
    runs = run_dirs(box)
    if not runs:
        return Verdict(f"{code_text(ran.code)}, no run dir: {cut(ran.first_error())}", "a failed run", False)
    status = manifest(runs[-1])["status"]
    requests = table(runs[-1], "requests")
    stats = table(runs[-1], "spec_stats")
    ok_rows = 0 if requests is None else requests.filter(pl.col("error").is_null()).height
    partial = [] if stats is None else stats["partial"].to_list()
    good = ran.code == 1 and "aborted mid-point" in ran.stderr and status == "failed" and partial == [True]
    return Verdict(
        f"{code_text(ran.code)}, run {status}, points partial={partial}, {ok_rows} ok rows",
        "exit 1 'aborted mid-point', run failed, one partial point keeping the answered requests",
        good,
        records_kept=ok_rows,
        records_expected=answered - 1,  # the server exits after its 30th answer; the last may be cut
        details=(cut(ran.first_error(), 200),),
    )


def stalled_stream(box: Box) -> Verdict:
    config = box.config(
        "m2.yaml",
        m2_config(box, "--stall-after-tokens", "8", stall_timeout_s=2.0, concurrencies=[4], preflight=False),
    )
    ran = box.alflow("run", "m2", "--config", str(config))
    runs = run_dirs(box)
    if not runs:
        return Verdict(f"{code_text(ran.code)}, no run dir: {cut(ran.first_error())}", "a failed run", False)
    requests = table(runs[-1], "requests")
    stats = table(runs[-1], "spec_stats")
    rows = 0 if requests is None else requests.height
    stalled = 0 if requests is None else requests.filter(pl.col("error").str.contains("stalled")).height
    partial = [] if stats is None else stats["partial"].to_list()
    good = ran.code == 1 and "stalled" in ran.stderr and partial == [True] and stalled >= 1
    return Verdict(
        f"{code_text(ran.code)} in {ran.wall_s:.0f} s, {rows} rows ({stalled} stalled), partial={partial}",
        "exit 1 'stalled' within the 2 s stall timeout, the stalled streams recorded, point partial",
        good,
        records_kept=rows,
        records_expected=4,  # one stream per slot of concurrency 4 was open when it stalled
        details=(cut(ran.first_error(), 200),),
    )


def error_events(box: Box) -> Verdict:
    port = free_port()
    sim = start_sim(box, [*FAST_SIM, "--error-rate", "0.15", "--stream-error-rate", "0.15"], port=port)
    n = 60
    out = box.work / "bench"
    ran = box.alflow(
        "bench", "--base-url", f"http://127.0.0.1:{port}", "--num-prompts", str(n), "--concurrency", "4",
        "--isl", "32", "--osl", "16", "--vocab-size", "20000", "--no-progress", "--out", str(out), "--json",
    )  # fmt: skip
    stop(sim)
    try:
        summary = json.loads(ran.stdout)
    except ValueError:
        return Verdict(
            f"{code_text(ran.code)}, no JSON: {cut(ran.first_error())}", "exit 1 with a summary", False
        )
    records = table(out, "records")
    rows = 0 if records is None else records.height
    errors = 0 if records is None else records.filter(pl.col("error").is_not_null()).height
    completed, failed = int(summary["completed"]), int(summary["failed"])
    good = ran.code == 1 and failed > 0 and completed + failed == n and errors == failed
    return Verdict(
        f"{code_text(ran.code)}, {completed} ok + {failed} failed, {errors} error rows",
        "exit 1, every request recorded, failed == rows with an error > 0",
        good,
        records_kept=rows,
        records_expected=n,
    )


def counter_reset(box: Box) -> Verdict:
    load_port, metrics_port = free_port(), free_port()
    load = start_sim(box, ["--seed", "5"], port=load_port)  # real time: the load lasts seconds
    metrics_sim = start_sim(box, FAST_SIM, port=metrics_port)
    for _ in range(6):  # counters of the metrics server well above zero before the window
        post_json(
            f"http://127.0.0.1:{metrics_port}/v1/completions",
            {"model": "sim/llama-3.3-70b", "prompt": "x " * 40, "max_tokens": 64, "ignore_eos": True},
        )
    n = 16
    out = box.work / "bench"
    bench = box.popen(
        "bench", "--base-url", f"http://127.0.0.1:{load_port}", "--metrics-url",
        f"http://127.0.0.1:{metrics_port}/metrics", "--num-prompts", str(n), "--concurrency", "2",
        "--isl", "32", "--osl", "128", "--vocab-size", "20000", "--warmup", "0", "--no-progress",
        "--out", str(out), "--json",
    )  # fmt: skip
    # the window's baseline is taken before the first measured request: wait for the load to begin
    deadline = time.monotonic() + 60
    running = 0.0
    while time.monotonic() < deadline and bench.poll() is None and running == 0:
        running = metric(f"http://127.0.0.1:{load_port}/metrics", "vllm:num_requests_running")
        time.sleep(0.1)
    stop(metrics_sim)  # the metrics server restarts mid-window: its counters start from zero again
    restarted = start_sim(box, FAST_SIM, port=metrics_port)
    ran = box.collect(bench, timeout_s=300)
    still_running = bench.returncode is None
    stop(load)
    stop(restarted)
    try:
        summary = json.loads(ran.stdout)
    except ValueError:
        return Verdict(f"{code_text(ran.code)}, no JSON: {cut(ran.first_error())}", "a summary", False)
    spec = summary.get("spec_decode") or {}
    stats = spec.get("stats") or {}
    said = json.dumps(spec)
    named = "reset" in said or "restart" in said
    al = stats.get("al")
    records = table(out, "records")
    rows = 0 if records is None else records.height
    good = named and al is None and not still_running and running > 0
    return Verdict(
        f"{code_text(ran.code)}, AL {al}, reset named: {named}, resets={spec.get('counter_resets')}",
        "the reset is named and no AL is reported from the broken window",
        good,
        records_kept=rows,
        records_expected=n,
        details=(cut(str(spec.get("error")), 200),) if spec.get("error") else (),
    )


def _killed_m2(box: Box, sig: signal.Signals) -> Verdict:
    config = m2_config(box, concurrencies=[2], prompts_per_concurrency=500, warmup_per_concurrency=0)
    # real time: minutes of streaming, the kill lands mid-point
    config["server"]["extra_args"] = ["--seed", "5"]
    config["workload"] = {"kind": "random", "isl": 64, "osl": 512}
    run = box.popen("run", "m2", "--config", str(box.config("m2.yaml", config)))
    deadline = time.monotonic() + 240
    entry: dict[str, Any] | None = None
    while time.monotonic() < deadline and run.poll() is None and entry is None:
        found = list((box.dir / "state" / "servers").glob("process-*.json"))
        entry = json.loads(found[0].read_text()) if found else None
        time.sleep(0.2)
    if entry is None:
        ran = box.collect(run, timeout_s=30)
        return Verdict(
            f"{code_text(ran.code)} before a server started: {cut(ran.first_error())}", "a kill", False
        )
    metrics_url = str(entry["base_url"]) + "/metrics"
    answered = 0.0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and answered < 4:  # some requests answered, others streaming
        with contextlib.suppress(OSError):
            answered = metric(metrics_url, "vllm:request_success_total")
        time.sleep(0.3)
    with contextlib.suppress(OSError):
        answered = metric(metrics_url, "vllm:request_success_total")
    run.send_signal(sig)
    ran = box.collect(run, timeout_s=90)
    runs = run_dirs(box)
    status = manifest(runs[-1])["status"] if runs else "no run dir"
    requests = table(runs[-1], "requests") if runs else None
    ok_rows = 0 if requests is None else requests.filter(pl.col("error").is_null()).height
    registry = list((box.dir / "state" / "servers").glob("process-*.json"))
    if sig is signal.SIGKILL:
        good = ran.code == -9 and status == "running"
        expected = "exit -9, run left 'running' (visibly incomplete); guards stop every process"
        kept: int | None = None  # a SIGKILLed process writes nothing more: the point's records die with it
    else:
        good = ran.code == 128 + signal.SIGTERM and status != "complete" and not registry
        expected = "exit 143, run not complete, servers stopped and unregistered by the run itself"
        kept = ok_rows
    return Verdict(
        f"{code_text(ran.code)}, run {status}, {ok_rows} ok rows stored, server had answered {answered:.0f}",
        expected,
        good,
        records_kept=kept,
        records_expected=None if kept is None else int(answered),
        details=(f"registry entries left by the run: {len(registry)}", cut(ran.stderr[-300:], 300)),
    )


def sigkill_m2(box: Box) -> Verdict:
    return _killed_m2(box, signal.SIGKILL)


def sigterm_m2(box: Box) -> Verdict:
    return _killed_m2(box, signal.SIGTERM)


def concurrent_writers(box: Box) -> Verdict:
    reference = box.work / "reference-sim.yaml"
    procs = []
    for k in (1, 2):
        config: dict[str, Any] = json.loads(json.dumps(BASES["m0"]))
        config.update(ks=[k], reference_path=str(reference))
        config["server"]["extra_args"] = FAST_SIM
        config["placement"] = {"results_root": str(box.work / f"results-{k}")}
        path = box.config(f"m0-{k}.yaml", config)
        env = {"PREFECT_HOME": str(box.dir / f"prefect-{k}")}  # one temporary Prefect server each
        procs.append(box.popen("run", "m0", "--config", str(path), "--json", env=env))
    rans = [box.collect(p, timeout_s=600) for p in procs]
    entries: list[int] = []
    if reference.exists():
        entries = sorted(int(e["k"]) for e in yaml.safe_load(reference.read_text())["entries"])
    codes = [r.code for r in rans]
    good = codes == [0, 0] and entries == [1, 2]
    return Verdict(
        f"exits {codes}, table holds K={entries}",
        "both exit 0, the table holds both writers' entries (K=1 and K=2)",
        good,
        records_kept=len(entries),
        records_expected=2,
        details=tuple(cut(r.first_error(), 200) for r in rans if r.code != 0),
    )


@dataclass(frozen=True)
class RowOutcome:
    """One bad-input row: refused with exit 2 and one line naming the input, or not."""

    name: str
    refused: bool
    why: str


def _check_row(ran: Ran, names: str, fragment: str) -> tuple[bool, str]:
    lines = ran.stderr.splitlines()
    problems = []
    if TRACEBACK in ran.text:
        problems.append("traceback")
    if ran.code != 2:
        problems.append(code_text(ran.code))
    if len(lines) != 1:
        problems.append(f"{len(lines)} stderr lines")
    elif not lines[0].startswith("error: "):
        problems.append("no 'error: '")
    else:
        if names not in lines[0]:
            problems.append(f"does not name {names!r}")
        if fragment not in lines[0]:
            problems.append(f"no {fragment!r}")
    return not problems, ", ".join(problems)


_BATCH = """
import contextlib, io, json, os, sys, traceback
from alflow.cli import main
rows = json.load(sys.stdin)
out = []
for argv in rows:
    o, e = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
        try:
            main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:
            traceback.print_exc()
            code = 1
    out.append([code, o.getvalue(), e.getvalue()])
json.dump(out, sys.stdout)
"""
"""Runs rows through ``alflow.cli.main(argv)``, the console script's entry point, in one interpreter."""


def _run_batch(box: Box, rows: list[list[str]]) -> list[Ran]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", _BATCH],
        input=json.dumps(rows),
        capture_output=True,
        text=True,
        env=box.env(),
        cwd=ROOT,  # as the table's own tests run it (a default like references/models.yaml is relative)
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the batch interpreter failed: exit {done.returncode}: {done.stderr[-2000:]}")
    took = (time.monotonic() - started) / max(1, len(rows))
    rans = [
        Ran(("alflow", *argv), code, out, err, took)
        for argv, (code, out, err) in zip(rows, json.loads(done.stdout), strict=True)
    ]
    for ran in rans:
        box.record(ran)
    return rans


def bad_inputs(box: Box) -> Verdict:
    """Every row of tests/bad_inputs.py through the CLI's entry point.

    Rows that set environment variables run as their own ``python -m alflow.cli`` process; the others
    run through ``alflow.cli.main(argv)`` in two long-lived interpreters (an interpreter start per row
    would cost ~3 s each on two busy cores; tests/integration/test_bad_inputs_cli.py runs every command
    line row in its own process).
    """
    jobs: list[tuple[str, list[str], dict[str, str], str, str]] = []  # name, argv, env, names, fragment
    for i, case in enumerate(CLI_CASES):
        tmp = box.work / f"cli{i}"
        tmp.mkdir()
        argv, env = materialize(case, tmp)
        jobs.append(("cli: " + case.name, argv, env, expected_name(case, tmp), case.fragment))
    for i, config in enumerate(CONFIG_CASES):
        path = box.input / f"config{i}.yaml"
        path.write_bytes(config.content)
        jobs.append(
            (
                "config: " + config.name,
                ["run", config.flow, "--config", str(path)],
                {},
                str(path),
                config.fragment,
            )
        )
    alone = [j for j in jobs if j[2]]
    batched = [j for j in jobs if not j[2]]
    halves = [batched[0::2], batched[1::2]]
    with ThreadPoolExecutor(max_workers=2) as pool:  # two cores: two interpreters at a time
        batches = [pool.submit(_run_batch, box, [j[1] for j in half]) for half in halves]
        singles = [pool.submit(box.alflow, *j[1], env=j[2], timeout_s=90, cwd=ROOT) for j in alone]
        ran = {
            j[0]: r
            for half, b in zip(halves, batches, strict=True)
            for j, r in zip(half, b.result(), strict=True)
        }
        ran.update({j[0]: s.result() for j, s in zip(alone, singles, strict=True)})
    rows = [RowOutcome(name, *_check_row(ran[name], names, fragment)) for name, _, _, names, fragment in jobs]
    refused = sum(r.refused for r in rows)
    bad = [f"{r.name}: {r.why}" for r in rows if not r.refused]
    return Verdict(
        f"{refused}/{len(rows)} refused: exit 2, one line naming the input",
        f"all {len(rows)} rows ({len(CLI_CASES)} command lines, {len(CONFIG_CASES)} configs) refused",
        refused == len(rows),
        details=tuple(bad[:20]),
    )


def secret_canaries(box: Box) -> Verdict:
    problems: list[str] = []
    seen: list[str] = []
    # 1. a secret literally in the config: refused at load, and the line does not repeat the value
    for what, change in (
        ("extra_env", {"extra_env": {"HF_TOKEN": CANARIES["config extra_env"]}}),
        ("extra_args", {"extra_args": [*FAST_SIM, "--api-key", CANARIES["config extra_args"]]}),
    ):
        config = m2_config(box)
        config["server"].update(change)
        ran = box.alflow("run", "m2", "--config", str(box.config(f"m2-{what}.yaml", config)))
        seen.append(f"{what}: {code_text(ran.code)}")
        if ran.code != 2 or len(ran.error_lines()) != 1:
            problems.append(f"config {what} not refused in one line ({code_text(ran.code)})")
    # 2. a secret by name through a real M2 run: the server gets the value, the run stores the name
    config = m2_config(box, concurrencies=[2], prompts_per_concurrency=4, warmup_per_concurrency=0)
    config["placement"]["runner"]["secrets"] = ["ALFLOW_CANARY_TOKEN"]
    ran = box.alflow(
        "run", "m2", "--config", str(box.config("m2-secret.yaml", config)),
        env={"ALFLOW_CANARY_TOKEN": CANARIES["env runner secret"]},
    )  # fmt: skip
    seen.append(f"m2 with a runner secret: {code_text(ran.code)}")
    runs = run_dirs(box)
    passed = (
        manifest(runs[-1]).get("provenance", {}).get("server", {}).get("provenance", {}).get("secrets_passed")
        if runs
        else None
    )
    if ran.code != 0 or passed != ["ALFLOW_CANARY_TOKEN"]:
        problems.append(f"m2 with a runner secret: {code_text(ran.code)}, secrets_passed={passed}")
    # 3. bench with an API key (sent on every request) and a metrics URL carrying credentials
    port = free_port()
    sim = start_sim(box, FAST_SIM, port=port, env={"VLLM_API_KEY": CANARIES["API key"]})
    metrics = (
        f"http://scraper:{CANARIES['URL password']}@127.0.0.1:{port}/metrics"
        f"?token={CANARIES['URL token']}&job=sim"
    )
    common = ["bench", "--base-url", f"http://127.0.0.1:{port}", "--num-prompts", "6", "--concurrency", "3",
              "--isl", "32", "--osl", "16", "--vocab-size", "20000", "--no-progress"]  # fmt: skip
    ran = box.alflow(
        *common, "--metrics-url", metrics, "--out", str(box.work / "bench"), "--json",
        env={"OPENAI_API_KEY": CANARIES["API key"]},
    )  # fmt: skip
    seen.append(f"bench with key and secret URL: {code_text(ran.code)}")
    if ran.code != 0:
        problems.append(f"bench with the key: {code_text(ran.code)} {cut(ran.first_error())}")
    wrong = box.alflow(*common, "--api-key", CANARIES["wrong API key"])
    seen.append(f"bench with a wrong key: {code_text(wrong.code)}")
    if wrong.code != 2:
        problems.append(f"bench with a wrong key: {code_text(wrong.code)}")
    dead = f"http://scraper:{CANARIES['URL password']}@127.0.0.1:9/metrics?token={CANARIES['URL token']}"
    unreachable = box.alflow(*common, "--metrics-url", dead, env={"OPENAI_API_KEY": CANARIES["API key"]})
    seen.append(f"bench with an unreachable secret URL: {code_text(unreachable.code)}")
    if unreachable.code != 2:
        problems.append(f"bench with an unreachable metrics URL: {code_text(unreachable.code)}")
    stop(sim)
    return Verdict(
        "; ".join(seen) if not problems else "; ".join(problems),
        "secrets refused in configs (exit 2), passed by name, masked in URLs and errors",
        not problems,
        details=tuple(seen),
    )


def hostile_names(box: Box) -> Verdict:
    name = " ".join(HOSTILE)
    shown = " ".join(name.split())
    config = m2_config(box, concurrencies=[2], prompts_per_concurrency=2, warmup_per_concurrency=0)
    config["model"]["id"] = name
    config["server"]["model"] = name
    config["server"]["label"] = f"label {name}"
    config["placement"]["results_root"] = str(box.work / "results [x](javascript:alert(1)) <b>")
    path = box.input / "m2 [x](javascript:alert(1)) ü.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    ran = box.alflow("run", "m2", "--config", str(path))
    root = Path(config["placement"]["results_root"]) / "m2"
    runs = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    problems = []
    if ran.code != 0:
        problems.append(f"{code_text(ran.code)}: {cut(ran.first_error())}")
    if runs:
        report = (runs[-1] / "report.md").read_text(encoding="utf-8")
        rendered = md_html(report).lower()
        active = [t for t in ("<script", "<a ", "<img", "href=", "src=", "<iframe", "<svg") if t in rendered]
        if active:
            problems.append(f"report.md renders {active}")
        if shown not in md_text(report) or f"label {shown}" not in md_text(report):
            problems.append("report.md does not show the name as typed")
        html = (runs[-1] / "report.html").read_text(encoding="utf-8")
        if "<script>alert(1)</script>" in html or 'href="javascript:' in html.lower():
            problems.append("report.html carries the name as markup")
    else:
        problems.append("no run dir")
    return Verdict(
        f"{code_text(ran.code)}, report.md/report.html inert" if not problems else "; ".join(problems),
        "exit 0; the name shows as typed and renders no script, link or image",
        not problems,
    )


SCENARIOS: dict[str, Callable[[Box], Verdict]] = {
    "start-failure": start_failure,
    "crash-mid-point": crash_mid_point,
    "error-events": error_events,
    "stalled-stream": stalled_stream,
    "counter-reset": counter_reset,
    "sigkill-m2": sigkill_m2,
    "sigterm-m2": sigterm_m2,
    "concurrent-writers": concurrent_writers,
    "bad-inputs": bad_inputs,
    "secret-canaries": secret_canaries,
    "hostile-names": hostile_names,
}


# --------------------------------------------------------------------------------------------
# Report


def totals(results: list[Result]) -> dict[str, int]:
    return {
        "tracebacks": sum(r.tracebacks for r in results),
        "silent_wrong_results": sum(not r.as_documented for r in results),
        "processes_left": sum(r.processes_left for r in results),
        "lost_records": sum(r.lost_records for r in results),
        "canaries": sum(r.canaries for r in results),
    }


def print_table(results: list[Result], wall_s: float) -> None:
    def records(r: Result) -> str:
        if r.records_kept is None:
            return "-"
        return (
            f"{r.records_kept}/{r.records_expected}"
            if r.records_expected is not None
            else str(r.records_kept)
        )

    header = ("scenario", "outcome", "records", "procs left", "canaries", "tracebacks", "ok")
    rows = [
        (r.scenario, cut(r.outcome, 78), records(r), f"{r.processes_after_run}->{r.processes_left}",
         str(r.canaries), str(r.tracebacks), "yes" if r.ok else "NO")
        for r in results
    ]  # fmt: skip
    t = totals(results)
    rows.append(
        ("TOTAL (target 0)", f"silent wrong results: {t['silent_wrong_results']}, lost records: "
         f"{t['lost_records']}", "", str(t["processes_left"]), str(t["canaries"]), str(t["tracebacks"]),
         "yes" if all(v == 0 for v in t.values()) else "NO")
    )  # fmt: skip
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    print(line.format(*header))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print(line.format(*row))
    print(
        f"\nrecords: kept/expected; procs left: after the run -> after `alflow infra cleanup`; wall {wall_s:.0f} s"
    )
    for r in results:
        if not r.ok or r.details:
            print(f"\n{r.scenario} ({r.wall_s:.0f} s): expected: {r.expected}")
            for d in r.details:
                print(f"  - {d}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", help=f"comma-separated scenarios of: {', '.join(SCENARIOS)}")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--keep", action="store_true", help="keep the scenarios' folders (printed)")
    args = parser.parse_args()
    names = list(SCENARIOS) if not args.only else [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s) {', '.join(unknown)}; known: {', '.join(SCENARIOS)}")
    root = Path(tempfile.mkdtemp(prefix="alflow-fault-suite-"))
    started = time.monotonic()
    results: list[Result] = []
    try:
        for name in names:
            if not args.json:
                print(f"running {name} ...", file=sys.stderr, flush=True)
            results.append(run_scenario(name, SCENARIOS[name], root))
    finally:
        if args.keep:
            print(f"scenario folders kept in {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    wall_s = time.monotonic() - started
    t = totals(results)
    met = all(v == 0 for v in t.values())
    if args.json:
        print(json.dumps({"scenarios": [r.to_json() for r in results], "totals": t, "targets_met": met,
                          "wall_s": round(wall_s, 1)}, indent=2))  # fmt: skip
    else:
        print_table(results, wall_s)
    sys.exit(0 if met else 1)


if __name__ == "__main__":
    main()
