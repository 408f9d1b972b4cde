"""SIGHUP (a closed terminal, a dropped ssh session) ends ``alflow bench --out`` as SIGTERM does (round 18, F4).

Before the fix the command died at once, exit 129, with nothing written: the ``--out`` folder was not even made.
Now it stops the load, keeps the records so far in ``--out`` and says so in one line, exit 129, no traceback.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import polars as pl
import pytest

pytestmark = pytest.mark.integration


def _env() -> dict[str, str]:
    return {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _up(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as answer:
            return int(answer.status) == 200
    except OSError:
        return False


def test_sighup_keeps_the_records_of_bench_out(tmp_path: Path) -> None:
    port = _free_port()
    sim = subprocess.Popen(
        [sys.executable, "-m", "alflow.sim", "serve", "--host", "127.0.0.1", "--port", str(port), "--time-scale", "0"],
        env=_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    out = tmp_path / "bout"
    bench: subprocess.Popen[bytes] | None = None
    try:
        deadline = time.monotonic() + 60
        while not _up(port):
            assert sim.poll() is None, "the sim exited"
            assert time.monotonic() < deadline, "the sim did not start"
            time.sleep(0.2)
        bench = subprocess.Popen(
            [sys.executable, "-m", "alflow.cli", "bench", "--base-url", f"http://127.0.0.1:{port}", "--no-progress",
             "--isl", "16", "--osl", "32", "--concurrency", "2", "--duration", "60", "--request-rate", "5",
             "--out", str(out)],
            env=_env(), cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            start_new_session=True,
        )  # fmt: skip
        time.sleep(6.0)  # started, some requests done
        assert bench.poll() is None, bench.communicate()[1].decode(errors="replace")[-2000:]
        bench.send_signal(signal.SIGHUP)
        _, err = bench.communicate(timeout=60)
        stderr = err.decode(errors="replace")
        assert bench.returncode == 128 + signal.SIGHUP, (bench.returncode, stderr[-2000:])
        assert "Traceback" not in stderr, stderr[-2000:]
        kept = pl.read_parquet(out / "records.parquet")
        said = [line for line in stderr.splitlines() if "before it ended" in line]
        assert said == [
            f"warning: interrupted before it ended: {kept.height} requests recorded, kept in "
            f"{out / 'records.parquet'}; no summary written"
        ], stderr[-2000:]
    finally:
        if bench is not None and bench.poll() is None:
            os.killpg(bench.pid, signal.SIGKILL)
            bench.wait()
        os.killpg(sim.pid, signal.SIGKILL)
        sim.wait()
