"""Start the simulated engine from Python: in a thread of this process, or as a subprocess.

- :func:`start_in_thread` runs the server on its own event loop in a daemon thread (fast to start;
  good for tests); the handle has ``base_url``, ``port``, ``metrics_url`` and ``stop()``.
- :class:`SimProcess` runs ``python -m alflow.sim serve --host 127.0.0.1 --port 0 ARGS`` and waits for
  the printed port and ``/health``; on exit it sends SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Self

from alflow.errors import AlflowError
from alflow.serving.app import OnReady, ServerThread
from alflow.sim.config import SimConfig, emitter_of
from alflow.sim.server import LISTENING_PREFIX, serve

log = logging.getLogger(__name__)


class SimStartError(AlflowError):
    """The simulated server did not come up (the message carries the end of its log)."""


class SimThread(ServerThread):
    """A simulated server running on its own event loop in a daemon thread (``crashed`` set by a simulated crash)."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.crashed = threading.Event()

        def run(stop: asyncio.Event, on_ready: OnReady) -> Awaitable[None]:
            def crash() -> None:
                self.crashed.set()
                stop.set()

            return serve(config, stop=stop, on_ready=on_ready, crash=crash)

        super().__init__(run, config.host, name="alflow-sim", error=SimStartError)

    @property
    def metrics_url(self) -> str:
        """URL of the dialect's Prometheus text."""
        return self.base_url + emitter_of(self.config.dialect).metrics_path

    def start(self, timeout_s: float = 30.0) -> Self:
        """Start the thread and wait until the server listens (its start-up delay comes on top)."""
        return super().start(timeout_s + self.config.startup_delay_s)


def start_in_thread(config: SimConfig, timeout_s: float = 30.0) -> SimThread:
    """Start a simulated server in a daemon thread of this process (``config.port`` 0 = any port)."""
    return SimThread(config).start(timeout_s)


class SimProcess:
    """``python -m alflow.sim serve --host 127.0.0.1 --port 0 ARGS`` as a subprocess (a context manager)."""

    def __init__(
        self,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        timeout_s: float = 60.0,
        python: str = sys.executable,
        host: str = "127.0.0.1",
    ) -> None:
        self.args = list(args)
        self.env = dict(os.environ if env is None else env)
        delay = _flag_value(self.args, "--startup-delay")
        try:
            extra_s = float(delay) if delay is not None else 0.0
        except ValueError:
            extra_s = 0.0  # the server itself reports the bad value
        self.timeout_s = timeout_s + max(0.0, extra_s)
        self.python = python
        self.host = host
        self.port = 0
        self.dialect = _flag_value(self.args, "--dialect") or "vllm"
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self.log_path: Path | None = None

    @property
    def pid(self) -> int:
        """Process id of the server."""
        if self._proc is None:
            raise SimStartError("the simulated server is not running")
        return self._proc.pid

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://{self.host}:{self.port}"

    @property
    def metrics_url(self) -> str:
        """URL of the dialect's Prometheus text."""
        return self.base_url + emitter_of(self.dialect).metrics_path

    def logs(self) -> str:
        """The server's stderr so far."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")

    def poll(self) -> int | None:
        """The exit code if the process has exited, else None."""
        return None if self._proc is None else self._proc.poll()

    def start(self) -> SimProcess:
        """Start the process; wait for the listening line and a 200 from ``/health``."""
        fd, name = tempfile.mkstemp(prefix="alflow-sim-", suffix=".log")
        os.close(fd)
        self.log_path = Path(name)
        self._log = self.log_path.open("wb")
        cmd = [self.python, "-m", "alflow.sim", "serve", "--host", self.host, "--port", "0", *self.args]
        self.env.setdefault("PYTHONUNBUFFERED", "1")
        self._proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self._log, env=self.env)
        deadline = time.monotonic() + self.timeout_s
        try:
            self.port = self._read_port(deadline)
            self._wait_health(deadline)
        except BaseException:
            self.stop()
            raise
        return self

    def _read_port(self, deadline: float) -> int:
        assert self._proc is not None
        assert self._proc.stdout is not None
        found: list[int] = []
        out = self._proc.stdout

        def reader() -> None:
            for raw in out:
                line = raw.decode(errors="replace").strip()
                if not found and line.startswith(LISTENING_PREFIX):
                    found.append(int(line.rsplit(":", 1)[1]))
            # keep draining until EOF so the child never blocks on a full pipe

        thread = threading.Thread(target=reader, name="alflow-sim-stdout", daemon=True)
        thread.start()
        while time.monotonic() < deadline:
            if found:
                return found[0]
            if self._proc.poll() is not None:
                thread.join(1.0)
                if found:
                    return found[0]
                raise SimStartError(
                    f"simulated server exited with code {self._proc.returncode} before listening:\n{self._tail()}"
                )
            time.sleep(0.01)
        raise SimStartError(f"simulated server printed no port within {self.timeout_s} s:\n{self._tail()}")

    def _wait_health(self, deadline: float) -> None:
        url = self.base_url + "/health"
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url, timeout=2.0) as resp:  # noqa: S310 - our own loopback URL
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if self.poll() is not None:
                raise SimStartError(f"simulated server exited with code {self.poll()}:\n{self._tail()}")
            time.sleep(0.02)
        raise SimStartError(f"simulated server not healthy within {self.timeout_s} s:\n{self._tail()}")

    def _tail(self, lines: int = 30) -> str:
        return "\n".join(self.logs().splitlines()[-lines:])

    def stop(self, timeout_s: float = 5.0) -> int | None:
        """SIGTERM, wait, then SIGKILL; return the exit code."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout_s)
        if proc is not None and proc.stdout is not None:
            proc.stdout.close()
        if self._log is not None:
            self._log.close()
            self._log = None
        return None if proc is None else proc.returncode

    def __enter__(self) -> SimProcess:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
        if self.log_path is not None and exc_type is None:
            with contextlib.suppress(OSError):
                self.log_path.unlink()


def _flag_value(args: Sequence[str], flag: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None
