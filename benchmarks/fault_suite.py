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

- injections: a raw control character (C0 but tab, newline and carriage return; DEL; C1 such as CSI U+009B)
  in anything printed or in a report, table or record the scenario wrote (report.md, report.html, Markdown,
  CSV, YAML and JSON files): a terminal or viewer could be made to clear, retitle or recolour.

Scenarios: start-failure, crash-mid-point, error-events, stalled-stream, counter-reset, sigkill-m2,
sigterm-m2, sigterm-bench (65,536 streams), concurrent-writers, bad-inputs (every row of
tests/bad_inputs.py), secret-canaries, hostile-names, unicode-and-controls, lying-usage, m0-symlink-audit,
damaged-run, broken-plugins, hostile-folders. The numbers are counts of what happened in this run; nothing is simulated or assumed.

Every case (a scenario, or each part of one: every bad-input row, every lying server, every edit an audit
must see) lands in one bucket, the first that applies of: secret (a canary found), injection (a raw control
character), loss (records lost), leak (a process or port left), hang (no answer within 30 s), traceback,
silent (a silent or misleading result: not the documented outcome); else clear (a bad input or fault
answered with one clear line and the documented exit code) or accepted (correctly accepted). The bucket
table follows the scenario table.

Usage: .venv/bin/python benchmarks/fault_suite.py [--only NAME,...] [--json] [--keep]
Exit code 1 when a target is missed (0 tracebacks, 0 silent wrong results, 0 processes left,
0 lost records, 0 canaries) or any case is in a bucket other than clear and accepted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import resource
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
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # the tables of tests/bad_inputs.py and tests/markdown_check.py

import polars as pl  # noqa: E402
import yaml  # noqa: E402

from alflow.bench import OPEN_FILES_MARGIN  # noqa: E402
from alflow.config.base import MAX_CONCURRENCY  # noqa: E402
from alflow.loadgen.runner import MAX_PROCESSES  # noqa: E402
from alflow.util.procguard import pid_alive  # noqa: E402
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
    "results root password": f"CanaryRootPw{_SUITE}",
    "Prefect API password": f"CanaryPrefectPw{_SUITE}",
    "extra-body key": f"sk-CanaryBodyKey{_SUITE}",
    "extra-body header": f"CanaryBodyBearer{_SUITE}",
    "stored URL password": f"CanaryStoredPw{_SUITE}",
}
"""Unique per suite run, so files of an earlier run can never be counted."""

FAST_SIM = ["--time-scale", "0", "--seed", "5"]

BUCKETS: dict[str, str] = {
    "clear": "bad input or fault answered with one clear line and the documented exit code",
    "accepted": "correctly accepted",
    "traceback": "a traceback printed",
    "silent": "a silent or misleading result (not the documented outcome)",
    "hang": "no answer within 30 s",
    "leak": "a process or port left after the run",
    "loss": "records lost",
    "secret": "a canary found on disk or in the output",
    "injection": "a raw control character in the output or a written report or table",
}
"""Where each case lands (the first bad one that applies, in the order secret, injection, loss, leak, hang,
traceback, silent; else clear or accepted)."""
GOOD = ("clear", "accepted")
HANG_S = 30.0
RAW_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
"""C0 controls but tab, newline and carriage return; DEL; the C1 controls (U+009B is a one-character CSI)."""
SCANNED = (".md", ".html", ".htm", ".csv", ".tsv", ".txt", ".yaml", ".yml", ".json")
"""Files a scenario wrote that are read as text (reports, tables, records as JSON): searched for injections."""


# --------------------------------------------------------------------------------------------
# Results


@dataclass(frozen=True)
class Case:
    """One case of a scenario and its bucket (:data:`BUCKETS`)."""

    name: str
    bucket: str
    why: str = ""


def raw_controls(text: str) -> list[str]:
    """The raw control characters in ``text`` (see :data:`RAW_CONTROL`), as U+XXXX."""
    return sorted({f"U+{ord(c):04X}" for c in RAW_CONTROL.findall(text)})


def bucket_of(
    text: str, *, ok: bool, kind: str, timed_out: bool = False, slow_s: float | None = None
) -> tuple[str, str]:
    """The bucket of one command by what it printed: canary, raw control, no answer, traceback, outcome."""
    canaries = [name for name, value in CANARIES.items() if value in text]
    if canaries:
        return "secret", f"canary {canaries[0]!r} printed"
    controls = raw_controls(text)
    if controls:
        return "injection", f"raw {', '.join(controls)} printed"
    if timed_out:
        return "hang", "no answer (timed out)"
    if slow_s is not None and slow_s > HANG_S:
        return "hang", f"answered after {slow_s:.0f} s"
    if TRACEBACK in text:
        return "traceback", "a traceback printed"
    if not ok:
        return "silent", "not the documented outcome"
    return kind, ""


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
    cases: tuple[Case, ...] = ()

    @property
    def bad_cases(self) -> list[Case]:
        return [c for c in self.cases if c.bucket not in GOOD]

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
            and not self.bad_cases
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
    hangs: list[str] = field(default_factory=list)
    """Commands that gave no answer in their time (timed out)."""

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
        self,
        *args: str,
        env: dict[str, str] | None = None,
        timeout_s: float = 600,
        cwd: Path | None = None,
        module: str = "alflow.cli",
    ) -> Ran:
        """``python -m MODULE ARGS`` (alflow's command line unless ``module`` names another), waited for."""
        argv = (sys.executable, "-m", module, *args)
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
            self.hangs.append(f"{' '.join(args)[:80]}: timed out after {timeout_s:.0f} s")
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
            self.hangs.append(f"background command {n}: timed out after {timeout_s:.0f} s")
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


def injected_files(box: Box) -> list[str]:
    """``path: U+XXXX, ...`` for every text file the box wrote (reports, tables, JSON) holding a raw control.

    The suite's inputs and the printed output (judged per command) are not searched, nor Prefect's database,
    the state folder (server logs) and the temporary folder.
    """
    hits = []
    skip = [box.dir / d for d in ("input", "printed", "prefect", "state", "tmp")]
    for path in sorted(box.dir.rglob("*")):
        if path.suffix.lower() not in SCANNED or path.is_symlink() or not path.is_file():
            continue
        if any(d in path.parents for d in skip) or any(d.name.startswith("prefect") for d in path.parents):
            continue
        try:
            text = path.read_bytes().decode("utf-8", errors="replace")
        except OSError:
            continue
        controls = raw_controls(text)
        if controls:
            hits.append(f"{path.relative_to(box.dir)}: {', '.join(controls)}")
    return hits


@dataclass(frozen=True)
class Verdict:
    """What a scenario body reports; the harness adds processes, canaries and tracebacks."""

    outcome: str
    expected: str
    as_documented: bool
    records_kept: int | None = None
    records_expected: int | None = None
    details: tuple[str, ...] = ()
    cases: tuple[Case, ...] = ()
    """The scenario's parts, each in its bucket; empty: the scenario is one case, judged as a whole."""
    kind: str = "clear"
    """The bucket of the documented outcome: clear (a fault answered with a clear line) or accepted."""


def judge(
    name: str, verdict: Verdict, *, canaries: list[str], injected: list[str], printed: str, lost: int,
    left: int, hangs: list[str],
) -> list[Case]:  # fmt: skip
    """The scenario's cases: its own (with what the box shows that no case explains added), or itself as one."""
    traces = printed.count(TRACEBACK)
    controls = raw_controls(printed)
    found = [
        ("secret", "; ".join(canaries[:3]), bool(canaries)),
        ("injection", "; ".join([*injected[:3], *(["printed: " + ", ".join(controls)] if controls else [])]),
         bool(injected or controls)),
        ("loss", f"{lost} records lost", lost > 0),
        ("leak", f"{left} processes left after cleanup", left > 0),
        ("hang", "; ".join(hangs[:3]), bool(hangs)),
        ("traceback", f"{traces} tracebacks printed", traces > 0),
    ]  # fmt: skip
    if not verdict.cases:
        for bucket, why, hit in found:
            if hit:
                return [Case(name, bucket, why)]
        if not verdict.as_documented:
            return [Case(name, "silent", cut(verdict.outcome, 200))]
        return [Case(name, verdict.kind, "")]
    cases = list(verdict.cases)
    for bucket, why, hit in found:  # what the box shows beyond the cases' own findings
        if hit and not any(c.bucket == bucket for c in cases):
            cases.append(Case(f"{name}: {bucket}", bucket, why))
    return cases


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
    injected = injected_files(box)
    if injected:
        details.append("raw control characters in: " + "; ".join(injected[:10]))
    lost = (
        0
        if verdict.records_kept is None or verdict.records_expected is None
        else max(0, verdict.records_expected - verdict.records_kept)
    )
    cases = judge(
        name, verdict, canaries=hits, injected=injected, printed="\n".join(box.printed), lost=lost,
        left=len(after_cleanup), hangs=box.hangs,
    )  # fmt: skip
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
        cases=tuple(cases),
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
    # no pre-flight: the requests the server answers before the kill are the point's own (pre-flight probes are
    # not load records, and a kill during the pre-flight would count them as lost)
    config = m2_config(
        box, concurrencies=[2], prompts_per_concurrency=500, warmup_per_concurrency=0, preflight=False
    )
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
        kind="accepted",
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
import contextlib, io, json, os, sys, time, traceback
from alflow.cli import main
rows = json.load(sys.stdin)
out = []
for argv in rows:
    o, e = io.StringIO(), io.StringIO()
    code = 0
    started = time.monotonic()
    with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
        try:
            main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:
            traceback.print_exc()
            code = 1
    out.append([code, o.getvalue(), e.getvalue(), time.monotonic() - started])
json.dump(out, sys.stdout)
"""
"""Runs rows through ``alflow.cli.main(argv)``, the console script's entry point, in one interpreter."""


def _run_batch(box: Box, rows: list[list[str]]) -> list[Ran]:
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
    rans = [
        Ran(("alflow", *argv), code, out, err, took)
        for argv, (code, out, err, took) in zip(rows, json.loads(done.stdout), strict=True)
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
        tmp = (
            box.input / f"cli{i}"
        )  # the row's own files (binary, NUL bytes on purpose): inputs, never searched
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
    cases = []
    for row in rows:
        r = ran[row.name]
        bucket, why = bucket_of(
            r.text, ok=row.refused, kind="clear", timed_out=r.code is None, slow_s=r.wall_s
        )
        cases.append(Case(row.name, bucket, why if bucket != "silent" else row.why))
    return Verdict(
        f"{refused}/{len(rows)} refused: exit 2, one line naming the input",
        f"all {len(rows)} rows ({len(CLI_CASES)} command lines, {len(CONFIG_CASES)} configs) refused",
        refused == len(rows),
        details=tuple(bad[:20]),
        cases=tuple(cases),
    )


def secret_canaries(box: Box) -> Verdict:
    cases: list[Case] = []

    def case(name: str, ran: Ran, ok: bool, kind: str = "clear") -> bool:
        bucket, why = bucket_of(ran.text, ok=ok, kind=kind, timed_out=ran.code is None)
        cases.append(Case(f"{name} ({code_text(ran.code)})", bucket, why))
        return bucket in GOOD

    # 1. a secret literally in the config: refused at load, and the line does not repeat the value
    for what, change in (
        ("extra_env", {"extra_env": {"HF_TOKEN": CANARIES["config extra_env"]}}),
        ("extra_args", {"extra_args": [*FAST_SIM, "--api-key", CANARIES["config extra_args"]]}),
    ):
        config = m2_config(box)
        config["server"].update(change)
        ran = box.alflow("run", "m2", "--config", str(box.config(f"m2-{what}.yaml", config)))
        case(f"config {what} with a secret", ran, ran.code == 2 and len(ran.error_lines()) == 1)
    # 2. credentials inside URLs (issue #35 item 1): refused at load in one line, never stored in Prefect
    password, token = CANARIES["URL password"], CANARIES["URL token"]
    runner = {
        "kind": "external",
        "base_url": f"http://u:{password}@127.0.0.1:9/?api_key={token}",
        "dialect": "vllm",
    }
    for what, section, changes in (
        ("results_root s3://user:pass@", "placement", {"results_root": f"s3://AKIA:{password}@b/x"}),
        ("external base_url user:pass@ and ?api_key=", "placement", {"runner": runner}),
        ("extra_env URL with a password", "server", {"extra_env": {"HTTPS_PROXY": f"http://me:{password}@p:3128"}}),
    ):  # fmt: skip
        config = m2_config(box)
        config[section].update(changes)
        ran = box.alflow("run", "m2", "--config", str(box.config(f"m2-url-{len(cases)}.yaml", config)))
        case(f"config {what}", ran, ran.code == 2 and len(ran.error_lines()) == 1)
    # 3. a secret by name through a real M2 run: the server gets the value, the run stores the name
    config = m2_config(box, concurrencies=[2], prompts_per_concurrency=4, warmup_per_concurrency=0)
    config["placement"]["runner"]["secrets"] = ["ALFLOW_CANARY_TOKEN"]
    ran = box.alflow(
        "run", "m2", "--config", str(box.config("m2-secret.yaml", config)),
        env={"ALFLOW_CANARY_TOKEN": CANARIES["env runner secret"]},
    )  # fmt: skip
    runs = run_dirs(box)
    passed = (
        manifest(runs[-1]).get("provenance", {}).get("server", {}).get("provenance", {}).get("secrets_passed")
        if runs
        else None
    )
    case(
        "m2 with a runner secret by name",
        ran,
        ran.code == 0 and passed == ["ALFLOW_CANARY_TOKEN"],
        "accepted",
    )
    # 4. bench with an API key (sent on every request) and a metrics URL carrying credentials
    port = free_port()
    sim = start_sim(box, FAST_SIM, port=port, env={"VLLM_API_KEY": CANARIES["API key"]})
    metrics = f"http://scraper:{password}@127.0.0.1:{port}/metrics?token={token}&job=sim"
    common = ["bench", "--base-url", f"http://127.0.0.1:{port}", "--num-prompts", "6", "--concurrency", "3",
              "--isl", "32", "--osl", "16", "--vocab-size", "20000", "--no-progress"]  # fmt: skip
    ran = box.alflow(
        *common, "--metrics-url", metrics, "--out", str(box.work / "bench"), "--json",
        env={"OPENAI_API_KEY": CANARIES["API key"]},
    )  # fmt: skip
    case("bench with a key and a secret metrics URL", ran, ran.code == 0, "accepted")
    wrong = box.alflow(*common, "--api-key", CANARIES["wrong API key"])
    case("bench with a wrong key", wrong, wrong.code == 2)
    dead = f"http://scraper:{password}@127.0.0.1:9/metrics?token={token}"
    unreachable = box.alflow(*common, "--metrics-url", dead, env={"OPENAI_API_KEY": CANARIES["API key"]})
    case("bench with an unreachable secret metrics URL", unreachable, unreachable.code == 2)
    stop(sim)
    problems = [f"{c.name}: {c.bucket}" for c in cases if c.bucket not in GOOD]
    return Verdict(
        f"{len(cases) - len(problems)}/{len(cases)} as documented" if not problems else "; ".join(problems),
        "secrets and URL credentials refused in configs (exit 2), passed by name, masked in URLs and errors",
        not problems,
        details=tuple(c.name for c in cases),
        cases=tuple(cases),
    )


def hostile_names(box: Box) -> Verdict:
    name = " ".join(HOSTILE)
    shown = " ".join(name.split())
    config = m2_config(box, concurrencies=[2], prompts_per_concurrency=2, warmup_per_concurrency=0)
    config["model"]["id"] = shown  # an identifier holds no control character: its newline is refused at load
    config["server"]["model"] = shown
    config["server"]["label"] = f"label {name}"  # free text: the newline too
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
        kind="accepted",
    )


def running_requests(port: int) -> float | None:
    """Requests the sim on ``port`` is running; None when it does not answer (busy with a load's connections)."""
    try:
        return metric(f"http://127.0.0.1:{port}/metrics", "vllm:num_requests_running")
    except (OSError, ValueError):
        return None


def sigterm_bench(box: Box) -> Verdict:
    """``alflow bench`` at the largest allowed concurrency (65,536), ended by SIGTERM once streams are open.

    Client processes as the open-files limit needs (the command refuses fewer); the suite's own soft limit is
    raised to the hard one first, so the sim (a child) holds as many streams as it may.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    fits = MAX_CONCURRENCY if hard == resource.RLIM_INFINITY else max(1, hard - OPEN_FILES_MARGIN)
    concurrency = min(MAX_CONCURRENCY, fits * MAX_PROCESSES)
    processes = -(-concurrency // fits)
    port = free_port()
    sim = start_sim(box, ["--seed", "5"], port=port)  # real time: 4,096 tokens a stream take minutes
    out = box.work / "bench"
    bench = box.popen(
        "bench", "--base-url", f"http://127.0.0.1:{port}", "--endpoint", "completions", "--concurrency",
        str(concurrency), "--client-processes", str(processes), "--num-prompts", str(concurrency), "--isl", "8",
        "--osl", "4096", "--no-progress", "--out", str(out),
    )  # fmt: skip
    deadline = time.monotonic() + 180
    while bench.poll() is None and time.monotonic() < deadline:
        running = running_requests(port)
        if running is None or running > 0:  # streaming (or the server too busy with them to answer)
            break
        time.sleep(0.2)
    time.sleep(2.0)  # streams open and in flight
    alive = bench.poll() is None
    sent = time.monotonic()
    bench.send_signal(signal.SIGTERM)
    ran = box.collect(bench, timeout_s=120)
    took = time.monotonic() - sent
    stop(sim)
    if took > HANG_S:
        box.hangs.append(f"bench exited {took:.0f} s after SIGTERM")
    kept = (out / "records.parquet").exists()
    good = alive and ran.code == 128 + signal.SIGTERM and took < 10 and kept
    return Verdict(
        f"{code_text(ran.code)} {took:.1f} s after SIGTERM at concurrency {concurrency:,} ({processes} client "
        f"processes), records kept: {kept}",
        "exit 143 within 10 s of SIGTERM, no traceback, the records so far written, no process left",
        good,
        details=(cut(ran.stderr[-300:], 300),) if ran.stderr.strip() else (),
    )


USAGE_LIES: dict[str, dict[str, int]] = {
    "negative": {"prompt_tokens": 7, "completion_tokens": -44_474},
    "impossible": {"prompt_tokens": 7, "completion_tokens": 100_000},
    "zero": {"prompt_tokens": 7, "completion_tokens": 0},
}
"""Usage counts a server may claim for 8 streamed chunks (issue #35 item 3), by the request's model name."""


@contextlib.contextmanager
def lying_server() -> Iterator[str]:
    """A loopback OpenAI-like server (own loop, own thread) that streams 8 chunks and then lies in its usage."""
    from aiohttp import web

    def sse(data: object) -> bytes:
        return b"data: " + json.dumps(data).encode() + b"\n\n"

    async def stream(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(8):
            await resp.write(sse({"id": "x", "choices": [{"index": 0, "text": f" t{i}"}]}))
        usage = USAGE_LIES.get(str(body.get("model")), USAGE_LIES["impossible"])
        await resp.write(sse({"id": "x", "choices": [], "usage": usage}) + b"data: [DONE]\n\n")
        return resp

    loop = asyncio.new_event_loop()
    application = web.Application()
    application.router.add_post("/v1/completions", stream)
    runner = web.AppRunner(application, access_log=None)
    started = threading.Event()

    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(runner.setup())
        loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", 0).start())
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    if not started.wait(30):
        raise RuntimeError("the lying server did not start")
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def lying_usage(box: Box) -> Verdict:
    """``alflow bench`` against a server whose usage counts are negative, impossible or zero beside text."""
    cases = []
    n = 4
    with lying_server() as url:
        for lie in USAGE_LIES:
            ran = box.alflow(
                "bench", "--base-url", url, "--model", lie, "--endpoint", "completions", "--num-prompts", str(n),
                "--isl", "8", "--osl", "8", "--vocab-size", "500", "--no-metrics", "--no-progress", "--json",
                timeout_s=120,
            )  # fmt: skip
            try:
                summary = json.loads(ran.stdout)
            except ValueError:
                summary = {}
            errors = ran.error_lines()
            ok = (
                ran.code == 1
                and len(errors) == 1
                and "usage: " in errors[0]
                and summary.get("failed") == n
                and not summary.get("output_throughput")
            )
            bucket, why = bucket_of(ran.text, ok=ok, kind="clear", timed_out=ran.code is None)
            cases.append(
                Case(f"usage {lie} ({code_text(ran.code)})", bucket, why or cut(ran.first_error(), 160))
            )
    bad = [c for c in cases if c.bucket not in GOOD]
    return Verdict(
        f"{len(cases) - len(bad)}/{len(cases)} lies refused per request" if not bad else "; ".join(
            f"{c.name}: {c.bucket}" for c in bad),
        "exit 1, every request failed with a 'usage:' error, no throughput from the server's word",
        not bad,
        details=tuple(f"{c.name}: {c.why}" for c in cases),
        cases=tuple(cases),
    )  # fmt: skip


def unicode_and_controls(box: Box) -> Verdict:
    """Names in Japanese run and report (item 2), a bidi override or a zero-width space is refused; control characters
    never reach output raw (item 7): in a server label through M2's reports and ``alflow report``, a reference table's
    model name through ``reference show`` (refused in one line since round 17), a served model name through
    ``alflow bench``'s table."""
    cases: list[Case] = []

    def case(name: str, ran: Ran, ok: bool, kind: str = "accepted") -> None:
        bucket, why = bucket_of(ran.text, ok=ok, kind=kind, timed_out=ran.code is None)
        cases.append(Case(f"{name} ({code_text(ran.code)})", bucket, why or cut(ran.first_error(), 160)))

    refused = (  # a right-to-left override (round 6, F25); a zero-width space, which looks like another id (round 17)
        ("m2-bidi.yaml", "\u30e9\u30de-70B \u202eevil", "a bidi override"),
        ("m2-zero-width.yaml", "\u30e9\u30de-70B \u200bzero-width", "a zero-width space"),
    )
    for file, model, what in refused:
        config = m2_config(box, concurrencies=[2], prompts_per_concurrency=2, warmup_per_concurrency=0)
        config["model"]["id"] = config["server"]["model"] = model
        ran = box.alflow("run", "m2", "--config", str(box.config(file, config)))
        case(f"m2 with {what} in its model id", ran, ran.code == 2 and len(ran.error_lines()) == 1, "clear")
    name = "\u30e9\u30de-70B \u65e5\u672c"  # Japanese letters
    config = m2_config(box, concurrencies=[2], prompts_per_concurrency=2, warmup_per_concurrency=0)
    config["model"]["id"] = name
    config["server"]["model"] = name
    config["server"]["label"] = "label \x1b]0;pwned\x07 \x1b[2J \x9b31m \x7f end"
    ran = box.alflow("run", "m2", "--config", str(box.config("m2.yaml", config)))
    runs = run_dirs(box)
    complete = bool(runs) and manifest(runs[-1]).get("status") == "complete"
    written = bool(runs) and all((runs[-1] / f).is_file() for f in ("report.md", "report.html"))
    case(
        "m2 with a Japanese model id and a control-character label",
        ran,
        ran.code == 0 and complete and written,
    )
    if runs:
        shown = box.alflow("report", str(runs[-1]))
        case("alflow report of that run", shown, shown.code == 0)
    table = box.input / "reference-controls.yaml"
    text = (ROOT / "references" / "examples.yaml").read_text(encoding="utf-8")
    table.write_text(
        text.replace("model: DeepSeek-V4", 'model: "Deep\\e[2J\\e]0;pwned\\aSeek\\x9b31m-V4\\x7f"'),
        encoding="utf-8",
    )
    shown = box.alflow("reference", "show", str(table))  # model ids take the configuration's check (round 17)
    case(
        "reference show of control-character model names",
        shown,
        shown.code == 2 and len(shown.error_lines()) == 1,
        "clear",
    )
    port = free_port()
    sim = start_sim(box, FAST_SIM, port=port)
    ran = box.alflow(
        "bench", "--base-url", f"http://127.0.0.1:{port}", "--model", "sim\x1b]0;pwned\x07\x1b[2J", "--num-prompts",
        "2", "--isl", "16", "--osl", "8", "--no-progress",
    )  # fmt: skip
    stop(sim)
    clear = ran.code in (1, 2) and len(ran.error_lines()) == 1
    case(
        "bench with a control-character model name",
        ran,
        ran.code == 0 or clear,
        "accepted" if ran.code == 0 else "clear",
    )
    bad = [c for c in cases if c.bucket not in GOOD]
    return Verdict(
        f"{len(cases) - len(bad)}/{len(cases)} as documented" if not bad else "; ".join(f"{c.name}: {c.bucket}" for c in bad),
        "exit 0 and reports written for a Japanese name, a bidi override refused; control characters escaped in every output",
        not bad,
        details=tuple(f"{c.name}: {c.bucket}" for c in cases),
        cases=tuple(cases),
        kind="accepted",
    )  # fmt: skip


def m0_symlink_audit(box: Box) -> Verdict:
    """M0 through a symlinked reference table (the target updated, the link kept: item 5), then ``reference audit``
    on the table as written (passes) and after each edit it must see: a CI bound, the dataset hash, the sampling
    temperature (exit 1, the field named)."""
    cases: list[Case] = []
    real = box.work / "tables" / "reference-sim.yaml"
    real.parent.mkdir(parents=True)
    link = box.work / "reference-sim.yaml"
    link.symlink_to(real)
    config: dict[str, Any] = json.loads(json.dumps(BASES["m0"]))
    config.update(ks=[1], reference_path=str(link))
    config["server"]["extra_args"] = FAST_SIM
    config["placement"] = {"results_root": str(box.work / "results")}
    ran = box.alflow("run", "m0", "--config", str(box.config("m0.yaml", config)))
    entries = []
    if real.is_file():
        entries = [int(e["k"]) for e in (yaml.safe_load(real.read_text()) or {}).get("entries", [])]
    ok = ran.code == 0 and link.is_symlink() and entries == [1]
    bucket, why = bucket_of(ran.text, ok=ok, kind="accepted", timed_out=ran.code is None)
    cases.append(
        Case("m0 through a symlinked table", bucket, why or f"link kept: {link.is_symlink()}, K={entries}")
    )
    runs = run_dirs(box, "m0")
    if runs and real.is_file():
        audit = box.alflow("reference", "audit", str(link), str(runs[-1]), "--json")
        bucket, why = bucket_of(audit.text, ok=audit.code == 0, kind="accepted", timed_out=audit.code is None)
        cases.append(Case(f"audit of the table as written ({code_text(audit.code)})", bucket, why))
        original = real.read_text(encoding="utf-8")
        edits = (
            ("a CI bound", r"ci_high: ([0-9.]+)", lambda m: f"ci_high: {float(m[1]) + 0.05:.6f}", "ci_high"),
            ("the dataset hash", r"dataset_hash: sha256:([0-9a-f])",
             lambda m: "dataset_hash: sha256:" + ("1" if m[1] == "0" else "0"), "dataset_hash"),
            ("the sampling temperature", r"temperature: ([0-9.]+)", lambda _: "temperature: 0.7", "temperature"),
        )  # fmt: skip
        for what, pattern, change, named in edits:
            edited = box.work / f"edited-{named}.yaml"
            edited.write_text(re.sub(pattern, change, original, count=1), encoding="utf-8")
            audit = box.alflow("reference", "audit", str(edited), str(runs[-1]), "--json")
            ok = audit.code == 1 and named in audit.stdout
            bucket, why = bucket_of(audit.text, ok=ok, kind="clear", timed_out=audit.code is None)
            cases.append(Case(f"audit after editing {what} ({code_text(audit.code)})", bucket, why))
    bad = [c for c in cases if c.bucket not in GOOD]
    return Verdict(
        f"{len(cases) - len(bad)}/{len(cases)} as documented" if not bad else "; ".join(f"{c.name}: {c.bucket}" for c in bad),
        "the link kept and its target updated; the audit passes the table as written and names each edit (exit 1)",
        not bad and len(cases) == 5,
        details=tuple(f"{c.name}: {c.bucket}" for c in cases),
        cases=tuple(cases),
    )  # fmt: skip


def damaged_run(box: Box) -> Verdict:
    """``alflow report`` of a run whose parquet tables are missing, truncated or garbage (item 6): one warning line
    per table naming it, the report rendered without it, exit 0, no traceback; its points table damaged: one line
    naming it, exit 2 (the report's numbers are the points')."""
    cases: list[Case] = []
    config = m2_config(box, concurrencies=[2], prompts_per_concurrency=2, warmup_per_concurrency=0)
    ran = box.alflow("run", "m2", "--config", str(box.config("m2.yaml", config)))
    runs = run_dirs(box)
    if ran.code != 0 or not runs:
        return Verdict(f"{code_text(ran.code)}: {cut(ran.first_error())}", "a run to damage", False)
    # an M2 run's points table damaged: the report refuses in one line naming it (round 17: it rendered
    # summary.json's points as if nothing were wrong); every other table: a warning and the report without it
    tables = sorted(p.name for p in runs[-1].glob("*.parquet") if p.name != "spec_stats.parquet")
    for how in ("missing", "truncated", "garbage"):
        copy = box.work / f"damaged-points-{how}"
        shutil.copytree(runs[-1], copy)
        path = copy / "spec_stats.parquet"
        if how == "missing":
            path.unlink()
        else:
            path.write_bytes(
                os.urandom(3000) if how == "garbage" else path.read_bytes()[: path.stat().st_size // 2]
            )
        shown = box.alflow("report", str(copy))
        ok = shown.code == 2 and len(shown.error_lines()) == 1 and "spec_stats.parquet" in shown.stderr
        bucket, why = bucket_of(shown.text, ok=ok, kind="clear", timed_out=shown.code is None)
        cases.append(
            Case(f"report of a run with a {how} points table ({code_text(shown.code)})", bucket, why)
        )
    for how in ("missing", "truncated", "garbage"):
        copy = box.work / f"damaged-{how}"
        shutil.copytree(runs[-1], copy)
        for name in tables:
            path = copy / name
            if how == "missing":
                path.unlink()
            elif how == "truncated":
                path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
            else:
                path.write_bytes(os.urandom(3000))
        shown = box.alflow("report", str(copy))
        warned = [line for line in shown.stderr.splitlines() if line.startswith("warning: ")]
        named = all(any(name in line for line in warned) for name in tables)
        ok = shown.code == 0 and bool(tables) and named and len(warned) == len(tables)
        bucket, why = bucket_of(shown.text, ok=ok, kind="clear", timed_out=shown.code is None)
        cases.append(Case(f"report of a run with {how} tables ({code_text(shown.code)})", bucket, why))
    bad = [c for c in cases if c.bucket not in GOOD]
    return Verdict(
        f"{len(cases) - len(bad)}/{len(cases)} named in one line each" if not bad else "; ".join(f"{c.name}: {c.bucket}" for c in bad),
        "exit 0, one warning line naming each missing or damaged table, the report rendered without it; a damaged "
        "points table: exit 2, one line naming it",
        not bad,
        details=(f"tables: {', '.join(tables)}",),
        cases=tuple(cases),
    )  # fmt: skip


BROKEN_PLUGINS = {
    "raises at import": "SPEC = 1 / 0",
    "exits at import": "import sys\nsys.exit(3)",
    "not a spec": "SPEC = 42",
    "an import that never returns": "import time\ntime.sleep(3600)",
    "a config that is no server model": (
        "from alflow.plugins import FrameworkSpec\nSPEC = FrameworkSpec('evil', 'builtins:dict', 'builtins:len')"
    ),
    # what a config module does to the process that imports it (a process of its own tries it first)
    "a config module that never returns": "import time\ntime.sleep(3600)",
    "a config module that ends the process": "import os\nos._exit(7)",
    "a config module that writes to fd 1": "import os\nos.write(1, b'{not json')\nEvilServer = PLUGIN = 1",
    "a config module that forks": (
        "import os, time\nif os.fork() == 0:\n    time.sleep(60)\n    os._exit(0)\nEvilServer = PLUGIN = 1"
    ),
}
"""Third-party plugins that break as they load: the spec module of an ``evil`` entry point, or (``a config
module ...``) the config module of a spec that names it."""
_CONFIG_SPEC = (
    "from alflow.plugins import FrameworkSpec\n"
    "SPEC = FrameworkSpec('evil', 'evil_alflow.config:EvilServer', 'evil_alflow.config:PLUGIN')"
)


def broken_plugins(box: Box) -> Verdict:
    """A broken third-party plugin (issue #49): ``--version`` and ``--help`` answer, ``alflow frameworks`` lists the
    built-in ones and the broken one under "left out", one warning line naming its distribution; no traceback."""
    cases: list[Case] = []
    for name, module in BROKEN_PLUGINS.items():
        site = box.work / f"plugin-{len(cases)}"
        (site / "evil_alflow").mkdir(parents=True)
        (site / "evil_alflow" / "__init__.py").write_text("")
        spec = _CONFIG_SPEC if name.startswith("a config module") else module
        if spec is _CONFIG_SPEC:
            (site / "evil_alflow" / "config.py").write_text(module + "\n")
        (site / "evil_alflow" / "spec.py").write_text(spec + "\n")
        info = site / "evil_alflow-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: evil-alflow\nVersion: 0.1\n")
        (info / "entry_points.txt").write_text("[alflow.frameworks]\nevil = evil_alflow.spec:SPEC\n")
        env = {"PYTHONPATH": os.pathsep.join((str(site), str(ROOT)))}
        for args in (("--version",), ("--help",), ("frameworks", "--json")):
            ran = box.alflow(*args, env=env, timeout_s=HANG_S)
            warned = [line for line in ran.stderr.splitlines() if "framework plugin left out" in line]
            ok = ran.code == 0 and len(warned) == (1 if args[0] == "frameworks" else 0)
            if ok and args[0] == "frameworks":
                listed = json.loads(ran.stdout)
                ok = "evil-alflow 0.1" in warned[0] and len(listed["left_out"]) == 1
            bucket, why = bucket_of(ran.text, ok=ok, kind="clear", timed_out=ran.code is None)
            cases.append(Case(f"{name}: alflow {' '.join(args)} ({code_text(ran.code)})", bucket, why))
    return _verdict_of(
        cases, "answered",
        "exit 0; --version and --help load no plugin; frameworks lists it left out, one warning naming the distribution",
    )  # fmt: skip


def hostile_folders(box: Box) -> Verdict:
    """``alflow report`` of each hostile run folder of tests/unit/hostile_runs.py (seeded; issue #49): the report,
    or one line and exit 2; never a traceback, a hang or a crash."""
    from tests.unit.hostile_runs import hostile_root, unblock_fifos

    cases: list[Case] = []
    inputs = Path(tempfile.mkdtemp(prefix="alflow-hostile-"))  # not scanned: the inputs hold NULs
    root, rels = hostile_root(inputs, seed=49, runs=10)
    try:
        for rel in rels:
            ran = box.alflow("report", str(root / rel), timeout_s=HANG_S)
            errors = [line for line in ran.stderr.splitlines() if line.startswith("error: ")]
            ok = ran.code == 0 or (ran.code == 2 and len(errors) == 1)
            bucket, why = bucket_of(ran.text, ok=ok, kind="clear", timed_out=ran.code is None)
            cases.append(Case(f"report {rel} ({code_text(ran.code)})", bucket, why))
    finally:
        unblock_fifos(root)
        shutil.rmtree(inputs, ignore_errors=True)
    return _verdict_of(
        cases, "reported or refused in one line",
        "exit 0 with the report, or exit 2 with one error line; no traceback, no hang",
    )  # fmt: skip


# --------------------------------------------------------------------------------------------
# Issue #49's classes: the site under hostile roots, printed secrets, impossible history, frozen workers, chat text

PAGE_S = 1.0
"""The longest a page of the results site may take (issue #49: every page under a second)."""


def _verdict_of(cases: list[Case], ok_text: str, expected: str) -> Verdict:
    """A scenario's verdict from its cases: how many held, else each bad case with its bucket."""
    bad = [c for c in cases if c.bucket not in GOOD]
    outcome = (
        f"{len(cases) - len(bad)}/{len(cases)} {ok_text}"
        if not bad
        else "; ".join(f"{c.name}: {c.bucket} {c.why}".strip() for c in bad)
    )
    return Verdict(outcome, expected, not bad, cases=tuple(cases))


def get_page(url: str, timeout_s: float = HANG_S) -> tuple[int | None, bytes, float]:
    """Status, body and seconds of a GET (status None: no answer within ``timeout_s``)."""
    started = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:  # loopback site
            return int(r.status), r.read(), time.monotonic() - started
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), time.monotonic() - started
    except OSError:
        return None, b"", time.monotonic() - started


def serve_site(box: Box, root: str) -> tuple[subprocess.Popen[bytes], str]:
    """``alflow results serve ROOT`` on a free port, waited for until its index answers; the process, its URL."""
    port = free_port()
    proc = box.popen("results", "serve", root, "--port", str(port), "--refresh-s", "1", "--no-cache")
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if get_page(base + "/", timeout_s=5)[0] == 200:
            break
        time.sleep(0.3)
    return proc, base


def long_id_run(root: Path) -> str:
    """A copy of the fixture M2 run whose model id and label are two million characters around a URL with a
    password (the configuration refuses such ids; a hand-made or older folder can hold one), and a file that is a
    symlink out of the root; its rel."""
    from tests.unit.test_site import M2

    rel = "m2/20261202T000000Z-longid"
    shutil.copytree(root / M2, root / rel)
    secret = f"https://user:{CANARIES['stored URL password']}@metrics.example/x "
    long = "m" * 1_000_000 + secret + "n" * 1_000_000
    path = root / rel / "manifest.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["config"]["model"]["id"] = long
    data["config"]["server"]["label"] = long
    path.write_text(json.dumps(data), encoding="utf-8")
    (root / rel / "escape.json").symlink_to("/etc/passwd")
    return rel


def straddle_run(root: Path) -> str:
    """A copy of the fixture M2 run listing a log whose 1.5 MiB line holds a credential across the site's part of
    1 MiB (round 16: each part was redacted alone and the token was served); its rel."""
    from tests.unit.test_site import M2

    rel = "m2/20261202T000001Z-straddle"
    shutil.copytree(root / M2, root / rel)
    path = root / rel / "manifest.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["files"]["straddle.log"] = next(iter(data["files"].values()))
    path.write_text(json.dumps(data), encoding="utf-8")
    head = b"w " * (((1 << 20) - 26) // 2) + b" "  # the token's first 3 bytes end the first part
    credential = f"Authorization: Bearer {CANARIES['stored URL password']} and more\nnext line\n".encode()
    (root / rel / "straddle.log").write_bytes(head + credential + b"z " * (1 << 18) + b"\n")
    return rel


def hostile_site(box: Box) -> Verdict:
    """``alflow results serve local://ROOT`` over seeded hostile folders (tests/unit/hostile_runs.py), a run
    whose model id is two million characters holding a password URL (issue #49 items 1-3) and a log whose long line
    holds a credential across the site's parts (:func:`straddle_run`): every page answers in
    under a second, never 500, never shows the password or a file outside the root; SIGTERM stops the site."""
    from tests.unit.hostile_runs import hostile_root, unblock_fifos
    from tests.unit.test_site import M2

    cases: list[Case] = []
    inputs = Path(tempfile.mkdtemp(prefix="alflow-hostile-"))  # not scanned: the inputs hold NULs
    root, rels = hostile_root(inputs, seed=50, runs=8)
    rels.append(long_id_run(root))
    straddle = straddle_run(root)
    paths = [
        "/",
        "/api/runs",
        "/trends",
        "/api/trends",
        "/reference",
        "/api/reference",
        "/?q=" + "a" * 60_000,
    ]
    for rel in rels:
        paths += [f"/runs/{rel}/", f"/api/runs/{rel}", f"/runs/{rel}/files/manifest.json"]
        paths += [f"/compare?run={rel}&run={M2}"]
    paths.append(f"/runs/{straddle}/files/straddle.log")
    escape = f"/runs/{rels[-1]}/files/escape.json"
    proc, base = serve_site(box, f"local://{root}")
    try:
        slowest = 0.0
        for path in [*paths, escape]:
            status, body, took = get_page(base + path)
            slowest = max(slowest, took)
            expected = (404,) if path == escape else (200, 400, 404, 413)
            ok = status in expected and took < PAGE_S and b"root:x:0:0" not in body
            bucket, why = bucket_of(
                body.decode(errors="replace"), ok=ok, kind="clear", timed_out=status is None
            )
            if bucket == "silent":
                why = f"answered {status} in {took:.2f} s (expected {'/'.join(map(str, expected))} under {PAGE_S} s)"
            cases.append(Case(f"GET {cut(path, 70)} ({status})", bucket, why))
        proc.send_signal(signal.SIGTERM)
        ran = box.collect(proc, 15)
        bucket, why = bucket_of(ran.text, ok=ran.code is not None, kind="clear", timed_out=ran.code is None)
        cases.append(
            Case(f"SIGTERM stops the site ({code_text(ran.code)}, slowest page {slowest:.2f} s)", bucket, why)
        )
    finally:
        stop(proc)
        unblock_fifos(root)
        shutil.rmtree(inputs, ignore_errors=True)
    return _verdict_of(
        cases,
        "pages answered",
        f"every page under {PAGE_S} s, never 500, no password, no file outside the root",
    )


def printed_secrets(box: Box) -> Verdict:
    """Secrets the round-3 testers saw printed or stored (issue #49 item 6): a results root URL's password (the site
    refuses an http:// root since round 14: its one line shows no password), ``PREFECT_API_URL``'s password printed
    by the webhook helper, secret keys of ``--extra-body`` stored in ``summary.json``. The harness searches everything
    printed and written for them."""
    cases: list[Case] = []

    def case(name: str, ran: Ran, ok: bool, kind: str = "clear") -> None:
        bucket, why = bucket_of(ran.text, ok=ok, kind=kind, timed_out=ran.code is None)
        cases.append(Case(f"{name} ({code_text(ran.code)})", bucket, why))

    root_url = f"http://user:{CANARIES['results root password']}@127.0.0.1:9/results"
    ran = box.alflow("results", "serve", root_url, "--port", str(free_port()), timeout_s=HANG_S)
    # an http:// root is no object store (round 14): refused in one line that shows no password
    case("results serve of an http root URL with a password", ran, ran.code == 2)
    ran = box.alflow(
        "--url", "http://127.0.0.1:9/hook", "--out", str(box.work / "automations.yaml"),
        env={"PREFECT_API_URL": f"http://u:{CANARIES['Prefect API password']}@127.0.0.1:9/api"},
        module="alflow_deployments.webhook", timeout_s=HANG_S,
    )  # fmt: skip
    case("webhook helper with a password in PREFECT_API_URL", ran, ran.code not in (0, None))
    port = free_port()
    sim = start_sim(box, FAST_SIM, port=port)
    body_json = json.dumps(
        {
            "api_key": CANARIES["extra-body key"],
            "extra_headers": {"Authorization": CANARIES["extra-body header"]},
        }
    )
    ran = box.alflow(
        "bench", "--base-url", f"http://127.0.0.1:{port}", "--num-prompts", "4", "--concurrency", "2",
        "--isl", "32", "--osl", "16", "--vocab-size", "20000", "--no-progress", "--json",
        "--extra-body", body_json, "--out", str(box.work / "bench-extra-body"),
    )  # fmt: skip
    stop(sim)
    case("bench --extra-body with secret keys, stored", ran, ran.code == 0, "accepted")
    return _verdict_of(cases, "kept their secrets", "no password or key printed, served or stored")


def _forge(run: Path, how: str) -> None:
    """Rewrite a stored run's request stamps: ``negative`` (each first token after the end: TPOT below zero) or
    ``zero`` (the first token at the end: TPOT 0), the rest kept (the table's metadata too: its schema version)."""
    path = run / "requests.parquet"
    metadata = pl.read_parquet_metadata(path)
    first, end = pl.col("first_token_ns"), pl.col("end_ns")
    frame = pl.read_parquet(path).with_columns(
        first_token_ns=end + (end - first) if how == "negative" else end
    )
    frame.write_parquet(path, metadata=metadata)


def impossible_history(box: Box) -> Verdict:
    """M2 runs on the sim judged against a history whose TPOT was forged negative, then zero (issue #49 item 7):
    each verdict is "not compared" (not comparable, with the reason) or "not enough history", never improved,
    unchanged or regressed. A run whose client was the bottleneck is measured again (at most twice)."""
    cases: list[Case] = []
    config = m2_config(
        box, concurrencies=[2], prompts_per_concurrency=8, warmup_per_concurrency=1, client_processes=2,
        regression={"enabled": True, "history_runs": 5, "min_history": 2, "resamples": 200},
    )  # fmt: skip
    config["server"]["extra_args"] = ["--time-scale", "1", "--seed", "5"]  # real time: the client keeps up
    config["server"]["image"] = "alflow-sim:forged"
    config["workload"] = {"kind": "random", "isl": 64, "osl": 32}
    path = box.config("m2-history.yaml", config)

    def measured() -> tuple[Ran, dict[str, Any]]:
        """One M2 run and its point's verdict (measured again while its client was the bottleneck)."""
        for _ in range(3):
            ran = box.alflow("run", "m2", "--config", str(path))
            runs = run_dirs(box)
            verdict_file = runs[-1] / "regression.json" if runs else None
            if ran.code != 0 or verdict_file is None or not verdict_file.is_file():
                break
            (point,) = json.loads(verdict_file.read_text(encoding="utf-8"))["points"]
            if "bottleneck" not in point["message"]:
                return ran, point
        return ran, {}

    seed, _ = measured()
    first = run_dirs(box)
    if seed.code != 0 or not first:
        cases.append(Case(f"history run ({code_text(seed.code)})", "silent", cut(seed.first_error())))
        return _verdict_of(cases, "", "")
    history = first[-1]
    for i in (1, 2):  # two more history runs: copies of the measured one, earlier, each its own run id
        copy = history.parent / f"20200101T00000{i}Z-copy{i}"
        shutil.copytree(history, copy)
        data = manifest(copy)
        data["run_id"] = f"{data['run_id']}-copy{i}"
        (copy / "manifest.json").write_text(json.dumps(data), encoding="utf-8")
    for how in ("negative", "zero"):
        for run in run_dirs(box):
            if run.name.startswith("20200101") or run == history:
                _forge(run, how)
        ran, point = measured()
        outcome, message = point.get("outcome", "(no verdict)"), point.get("message", "")
        ok = ran.code == 0 and (
            (outcome == "not compared" and "not comparable" in message) or outcome == "not enough history"
        )
        bucket, why = bucket_of(ran.text, ok=ok, kind="clear", timed_out=ran.code is None)
        cases.append(Case(f"history TPOT {how}: {outcome}: {cut(message, 80)}", bucket, why))
    return _verdict_of(cases, "refused", "not compared (not comparable: reason), never improved or unchanged")


def _spawned_children(parent: int) -> list[int]:
    """Live processes started by multiprocessing's spawn whose parent is ``parent``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            status = (entry / "status").read_text()
            cmdline = (entry / "cmdline").read_bytes()
            ppid = re.search(r"^PPid:\s+(\d+)", status, re.MULTILINE)
            state = re.search(r"^State:\s+(\S)", status, re.MULTILINE)
            if (
                ppid
                and int(ppid.group(1)) == parent
                and b"spawn_main" in cmdline
                and state
                and state.group(1) != "Z"
            ):
                found.append(int(entry.name))
    return sorted(found)


def frozen_worker(box: Box) -> Verdict:
    """``alflow bench --client-processes 2`` with one worker stopped by SIGSTOP mid-load (issue #49 item 8): the
    run ends with one line naming the silent worker within its silence limit (5 s) and the grace, none left."""
    port = free_port()
    sim = start_sim(box, ["--time-scale", "1", "--seed", "5"], port=port)  # 2,000 tokens take many seconds
    proc = box.popen(
        "bench", "--base-url", f"http://127.0.0.1:{port}", "--endpoint", "completions", "--isl", "24",
        "--osl", "2000", "--vocab-size", "20000", "--concurrency", "4", "--num-prompts", "8",
        "--client-processes", "2", "--timeout", "60", "--stall-timeout", "5", "--no-progress",
        "--out", str(box.work / "bench-frozen"),
    )  # fmt: skip
    deadline, workers = time.monotonic() + 60, list[int]()
    while time.monotonic() < deadline and proc.poll() is None and len(workers) < 2:
        workers = _spawned_children(proc.pid)
        time.sleep(0.3)
    time.sleep(4)  # the load under way
    if workers:
        os.kill(workers[0], signal.SIGSTOP)
    started = time.monotonic()
    ran = box.collect(proc, 90)
    took = time.monotonic() - started
    stop(sim)
    errors = ran.error_lines()
    ok = (
        bool(workers)
        and ran.code == 2
        and len(errors) == 1
        and "stopped or frozen" in errors[0]
        and took < 40
    )
    bucket, why = bucket_of(ran.text, ok=ok, kind="clear", timed_out=ran.code is None)
    name = f"a stopped worker ({code_text(ran.code)} after {took:.0f} s): {cut(ran.first_error(), 90)}"
    return _verdict_of([Case(name, bucket, why)], "ended", "exit 2 with one line naming the frozen worker")


CHAT_HOSTILE = (
    "<@U024BE7LH> <#C024BE7LR|general> <!subteam^S123|@team>",
    "&lt;!channel&gt; &amp;lt;!here&amp;gt;",
    "![pixel](https://evil.example/p.png) [docs](javascript:alert(1))",
    "``` code fence\nforged: yes ```",
    "nul\x00bell\x07del\x7f csi\x9b31m next\x85line",
    "\u2066isolate\u2069 \ufeffbom \u00adsoft\u200dzwj",
    "ftp://admin:" + "Pw" * 20 + "@files.example/x <https://a|b>",
    "\u0661\u0662 " + "\U0001f600" * 400,
)
"""Strings a model id, image or run folder may hold (issue #49 item 5), unlike tests/unit/test_automations_file.py's."""


def notifications(box: Box) -> Verdict:
    """The regression notification of ``deployments/automations.yaml`` rendered by Prefect's own template renderer
    for an event whose model, image and run folder are hostile (issue #49 item 5): every string inside inline code
    and nothing of Slack's control syntax, no raw control or format character, bounded length."""
    del box  # rendered here, in Prefect's server code: no command line prints the message
    from prefect.server.events.jinja_filters import all_filters
    from prefect.server.events.schemas.events import ReceivedEvent
    from prefect.server.utilities.user_templates import register_user_template_filters, render_user_template

    from alflow.results.regression import PointVerdict
    from alflow_deployments import webhook
    from alflow_tasks.regression import REGRESSION_EVENT, alert_event

    register_user_template_filters(all_filters)
    [automation] = webhook.load_automations()
    [action] = automation["actions"]
    cases: list[Case] = []
    for hostile in CHAT_HOSTILE:
        point = PointVerdict(
            series={"framework": "sim", "image": hostile, "model": hostile, "thinking": "off"},
            concurrency=2, k=1, outcome="regressed", message=f"{hostile}: regressed", reference=hostile,
        )  # fmt: skip
        resource, payload = alert_event(point, flow_run_id="f00", flow="m2", run_dir=f"results/m2/{hostile}")
        event = ReceivedEvent.model_validate(
            {"event": REGRESSION_EVENT, "resource": resource, "payload": payload, "id": uuid.uuid4(),
             "occurred": datetime.now(UTC)}
        )  # fmt: skip
        context = {"event": event, "flow_run": None}
        text = "\n".join(
            asyncio.run(render_user_template(action[part], context)) for part in ("subject", "body")
        )
        outside = "".join(part for line in text.splitlines() for part in line.split("`")[0::2])
        problems = [
            what
            for what, bad in (
                ("Slack control syntax", "<" in text or ">" in text.replace(" -> ", "")),
                ("an unclosed code span", any(line.count("`") % 2 for line in text.splitlines())),
                ("a mention or link outside code", "@" in outside or "](" in outside),
                ("a control or format character", any(not c.isprintable() for c in text.replace("\n", ""))),
                ("a password", "Pw" * 20 in text),
                ("unbounded", len(text) > 3_000),
            )
            if bad
        ]
        bucket = "injection" if problems else "clear"
        cases.append(Case(f"chat text of {cut(repr(hostile), 60)}", bucket, ", ".join(problems)))
    return _verdict_of(
        cases, "inert", "every string as inline code; no mention, link, control character or password"
    )


SCENARIOS: dict[str, Callable[[Box], Verdict]] = {
    "start-failure": start_failure,
    "crash-mid-point": crash_mid_point,
    "error-events": error_events,
    "stalled-stream": stalled_stream,
    "counter-reset": counter_reset,
    "sigkill-m2": sigkill_m2,
    "sigterm-m2": sigterm_m2,
    "sigterm-bench": sigterm_bench,
    "concurrent-writers": concurrent_writers,
    "bad-inputs": bad_inputs,
    "secret-canaries": secret_canaries,
    "hostile-names": hostile_names,
    "unicode-and-controls": unicode_and_controls,
    "lying-usage": lying_usage,
    "m0-symlink-audit": m0_symlink_audit,
    "damaged-run": damaged_run,
    "broken-plugins": broken_plugins,
    "hostile-folders": hostile_folders,
    "hostile-site": hostile_site,
    "printed-secrets": printed_secrets,
    "impossible-history": impossible_history,
    "frozen-worker": frozen_worker,
    "notifications": notifications,
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
    print_buckets(results)


def bucket_counts(results: list[Result]) -> dict[str, int]:
    """Cases per bucket, every bucket listed (0 where none)."""
    counts = dict.fromkeys(BUCKETS, 0)
    for r in results:
        for c in r.cases:
            counts[c.bucket] += 1
    return counts


def print_buckets(results: list[Result]) -> None:
    """The bucket table: cases per bucket (target: 0 outside clear and accepted), then every bad case."""
    counts = bucket_counts(results)
    rows = [
        (b, str(n), "" if b in GOOD else ("yes" if n == 0 else "NO"), BUCKETS[b]) for b, n in counts.items()
    ]
    rows.append(("TOTAL", str(sum(counts.values())), "", f"cases in {len(results)} scenarios"))
    header = ("bucket", "cases", "target 0", "meaning")
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    print()
    print(line.format(*header))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print(line.format(*row))
    bad = [(r.scenario, c) for r in results for c in r.bad_cases]
    for scenario, c in bad:
        print(f"  {c.bucket}: {scenario}: {c.name}{': ' + c.why if c.why else ''}")


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
    buckets = bucket_counts(results)
    met = all(v == 0 for v in t.values()) and all(n == 0 for b, n in buckets.items() if b not in GOOD)
    if args.json:
        print(json.dumps({"scenarios": [r.to_json() for r in results], "totals": t, "buckets": buckets,
                          "targets_met": met, "wall_s": round(wall_s, 1)}, indent=2))  # fmt: skip
    else:
        print_table(results, wall_s)
    sys.exit(0 if met else 1)


if __name__ == "__main__":
    main()
