"""Run many ``alflow`` command lines as real processes without paying an interpreter start for each.

A bad-input table of ~180 rows spent ~3 minutes of a CI run starting interpreters and importing alflow (1.1-2.2 s
of CPU a row on two cores) before each row's check ran for a few milliseconds. :class:`ForkedCli` starts one
server process that imports ``alflow.cli.root`` once and then forks a child per command line: the child sets the
row's working folder, environment and standard streams (files, ``/dev/null`` for stdin) and calls the console
script's ``main(argv)``, exactly what ``python -m alflow.cli`` runs after its imports. Each row is still its own
process with its own exit code, stdout and stderr; what the fork skips is the interpreter start and the imports.

Limits, which the callers keep: a module that reads the environment at import time sees the server's environment,
not the row's (Prefect's settings do; alflow.cli.root does not import Prefect, so rows that set variables Prefect
reads must run as a plain subprocess), and the interpreter start itself is not exercised (a sample of rows runs as
a plain subprocess too).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import Future
from pathlib import Path
from types import TracebackType

ROOT = Path(__file__).resolve().parents[1]

_SERVER = r"""
import json, os, select, signal, sys, time
import importlib
cli_main = importlib.import_module("alflow.cli.root")
sys.stdout.flush()
inbox = sys.stdin.buffer
outbox = os.fdopen(os.dup(1), "w", buffering=1)
running = {}  # pid -> (job id, deadline)
pending = b""
open_input = True
while open_input or running:
    ready, _, _ = select.select([inbox] if open_input else [], [], [], 0.01)
    if ready:
        chunk = os.read(inbox.fileno(), 65536)
        if not chunk:
            open_input = False
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            job = json.loads(line)
            pid = os.fork()
            if pid == 0:
                code = 70
                try:
                    os.setsid()
                    os.chdir(job["cwd"])
                    os.environ.clear()
                    os.environ.update(job["env"])
                    null = os.open(os.devnull, os.O_RDONLY)
                    os.dup2(null, 0)
                    out = os.open(job["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                    err = os.open(job["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                    os.dup2(out, 1)
                    os.dup2(err, 2)
                    sys.argv = ["alflow", *job["argv"]]
                    try:
                        cli_main.main(job["argv"])
                        code = 0
                    except SystemExit as exc:
                        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
                except BaseException:
                    import traceback
                    traceback.print_exc()
                    code = 1
                finally:
                    try:
                        sys.stdout.flush()
                        sys.stderr.flush()
                    finally:
                        os._exit(code)
            running[pid] = (job["id"], time.monotonic() + job["timeout"])
    while running:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            break
        job_id, _ = running.pop(pid)
        code = os.waitstatus_to_exitcode(status)
        outbox.write(json.dumps({"id": job_id, "returncode": code}) + "\n")
    now = time.monotonic()
    for pid, (job_id, deadline) in list(running.items()):
        if now > deadline:
            os.killpg(pid, signal.SIGKILL)
            running[pid] = (job_id, float("inf"))
"""


class ForkedCli:
    """A fork server for ``alflow`` command lines (see the module doc); use as a context manager."""

    def __init__(self, env: dict[str, str]) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="alflow-forked-cli-")
        self._server = subprocess.Popen(
            [sys.executable, "-c", _SERVER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            cwd=ROOT,
        )
        self._lock = threading.Lock()
        self._jobs: dict[int, tuple[Future[int], float]] = {}
        self._next = 0
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._server.stdout is not None
        for line in self._server.stdout:
            answer = json.loads(line)
            with self._lock:
                future, _ = self._jobs.pop(answer["id"])
            future.set_result(answer["returncode"])
        with self._lock:  # the server ended: every job still waiting failed
            for future, _ in self._jobs.values():
                future.set_exception(RuntimeError("the fork server ended"))
            self._jobs.clear()

    def run(
        self, argv: list[str], env: dict[str, str], cwd: Path, timeout_s: float
    ) -> subprocess.CompletedProcess[str]:
        """Run ``alflow ARGV`` in a forked child; like ``subprocess.run(..., capture_output=True, text=True)``."""
        future: Future[int] = Future()
        with self._lock:
            job_id = self._next
            self._next += 1
            self._jobs[job_id] = (future, timeout_s)
        out, err = Path(self._tmp.name, f"{job_id}.out"), Path(self._tmp.name, f"{job_id}.err")
        job = {"id": job_id, "argv": argv, "env": env, "cwd": str(cwd), "timeout": timeout_s,
               "stdout": str(out), "stderr": str(err)}  # fmt: skip
        assert self._server.stdin is not None
        with self._lock:
            self._server.stdin.write(json.dumps(job).encode() + b"\n")
            self._server.stdin.flush()
        code = future.result(timeout=timeout_s + 30)
        stdout = out.read_text(errors="replace")
        stderr = err.read_text(errors="replace")
        return subprocess.CompletedProcess(["alflow", *argv], code, stdout, stderr)

    def close(self) -> None:
        """Let the running children finish, stop the server, remove the captured output."""
        if self._server.stdin is not None:
            self._server.stdin.close()
        try:
            self._server.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self._server.kill()
            self._server.wait()
        self._reader.join(timeout=10)
        if self._server.stdout is not None:
            self._server.stdout.close()
        self._tmp.cleanup()

    def __enter__(self) -> ForkedCli:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
