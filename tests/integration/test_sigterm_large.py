"""SIGTERM ends ``alflow bench`` within seconds at the largest allowed concurrency (issue #35).

A bench at concurrency 65,536 (:data:`~alflow.config.base.MAX_CONCURRENCY`) streams at a real-time sim; once the
load is on (requests running, or the server too busy to answer its metrics), SIGTERM must end the command within
10 s with exit code 143, no traceback, the records so far in ``--out`` and no process of its own left behind.
Before the fix it died at once without its records, and its client processes stayed up to half a minute.

The client processes are as many as this machine's open-files limit needs (the command refuses fewer); the
server gets the same raised limit, so it holds as many streams as it can.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

from alflow.bench import OPEN_FILES_MARGIN
from alflow.config.base import MAX_CONCURRENCY
from alflow.loadgen.runner import MAX_PROCESSES

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
EXIT_WITHIN_S = 10.0


@contextlib.contextmanager
def _open_files_raised() -> Iterator[None]:
    """This process's soft limit of open files raised to the hard one while the sim starts (it inherits it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _split() -> tuple[int, int]:
    """The largest concurrency this machine's open-files limit allows (at most 65,536), and its client processes."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    fits = MAX_CONCURRENCY if hard == resource.RLIM_INFINITY else max(1, hard - OPEN_FILES_MARGIN)
    concurrency = min(MAX_CONCURRENCY, fits * MAX_PROCESSES)
    return concurrency, -(-concurrency // fits)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_") and k != "OPENAI_API_KEY"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def _running(port: int) -> float | None:
    """Requests the sim is running; None when it does not answer (busy with the load's connections)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:  # loopback sim
            text = r.read().decode()
    except OSError:
        return None
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("vllm:num_requests_running")
    )


def _group(pgid: int) -> list[int]:
    """Live (not zombie) processes of the process group ``pgid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()  # state ppid pgrp ...
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append(int(entry.name))
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="client processes and /proc: Linux")
def test_sigterm_ends_a_bench_at_65536_streams_within_seconds(tmp_path: Path) -> None:
    concurrency, processes = _split()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    with _open_files_raised():  # the server holds as many streams as it may
        sim = subprocess.Popen(
            [sys.executable, "-m", "alflow.sim", "serve", "--host", "127.0.0.1", "--port", str(port)],
            env=_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
    out = tmp_path / "run"
    bench: subprocess.Popen[bytes] | None = None
    try:
        deadline = time.monotonic() + 60
        while _running(port) is None:
            assert sim.poll() is None, "the sim exited"
            assert time.monotonic() < deadline, "the sim did not start"
            time.sleep(0.2)
        bench = subprocess.Popen(
            [sys.executable, "-m", "alflow.cli", "bench", "--base-url", f"http://127.0.0.1:{port}",
             "--endpoint", "completions", "--concurrency", str(concurrency), "--client-processes", str(processes),
             "--num-prompts", str(concurrency), "--isl", "8", "--osl", "4096", "--no-progress", "--out", str(out)],
            env=_env(), cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 180
        while (running := _running(port)) is not None and running == 0:  # None: busy with the load
            assert bench.poll() is None, bench.communicate()[1].decode(errors="replace")[-2000:]
            assert time.monotonic() < deadline, "the load never started"
            time.sleep(0.2)
        time.sleep(2.0)  # streams open and in flight
        assert bench.poll() is None, "the bench ended before the signal"
        sent = time.monotonic()
        bench.send_signal(signal.SIGTERM)
        _, err = bench.communicate(timeout=60)
        took = time.monotonic() - sent
        stderr = err.decode(errors="replace")
        assert took < EXIT_WITHIN_S, f"exited {took:.1f} s after SIGTERM"
        assert bench.returncode == 128 + signal.SIGTERM, (bench.returncode, stderr[-2000:])
        assert "Traceback" not in stderr, stderr[-2000:]
        left_deadline = time.monotonic() + 3
        while _group(bench.pid) and time.monotonic() < left_deadline:
            time.sleep(0.1)
        assert not _group(bench.pid), "client processes left behind"
        kept = pl.read_parquet(out / "records.parquet")  # the records so far are kept (written, readable)
        said = [line for line in stderr.splitlines() if "before it ended" in line]
        assert said == [
            f"warning: interrupted before it ended: {kept.height} requests recorded, kept in "
            f"{out / 'records.parquet'}; no summary written"
        ], stderr[-2000:]
    finally:
        if bench is not None and bench.poll() is None:
            os.killpg(bench.pid, signal.SIGKILL)
            bench.wait()
        for pid in _group(bench.pid) if bench is not None else ():
            os.kill(pid, signal.SIGKILL)
        os.killpg(sim.pid, signal.SIGKILL)
        sim.wait()
