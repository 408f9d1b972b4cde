"""``alflow results serve`` as a process for the e2e tests: started on a free loopback port, stopped cleanly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.e2e.prefect_support import free_port

ALFLOW = str(Path(sys.executable).parent / "alflow")


@contextmanager
def serve_results(root: Path, env: dict[str, str], log_path: Path) -> Iterator[str]:
    """``alflow results serve ROOT`` on a free loopback port (its URL); stopped with SIGINT, exit status 0."""
    port = free_port()
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [ALFLOW, "results", "serve", str(root), "--host", "127.0.0.1", "--port", str(port)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                assert proc.poll() is None, log_path.read_text()
                try:
                    if httpx.get(url + "/", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, "the results site did not answer within 60 s"
                time.sleep(0.3)
            yield url
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
    assert proc.returncode == 0, log_path.read_text()[-2000:]
