"""The results site's raw files: how fast a large log and a large download come out, and what they cost the server.

Writes a temporary results root with one run listing two SYNTHETIC files, a text log (lines with a credential in a
URL, which the site redacts on the way out) and a binary download, starts ``alflow results serve`` on it as a user
would (its own process, port 0, no cache), then downloads each file ``--repeats`` times over HTTP and reads the
server's peak resident memory (``VmHWM`` in ``/proc/<pid>/status``) before and after. A site that read a file whole
would grow by about the file's size (the log: twice, with its redacted copy); one that streams it stays flat.

Run::

    .venv/bin/python benchmarks/site_files.py [--mib 256] [--repeats 3]
"""

from __future__ import annotations

import argparse
import http.client
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from alflow.results.store import RunWriter

LOG_LINE = "{i:09d} GET https://user:pw{i:09d}@metrics.example:8000/metrics?token=tk{i:09d} 200 {pad}\n"


def _write_root(root: Path, mib: int) -> str:
    """One run listing ``server.log`` and ``profile.bin`` of about ``mib`` MiB each; its ``<flow>/<run>``."""
    with RunWriter(str(root), "m2", config={"model": {"id": "synthetic-model"}, "k": 3}) as run:
        run.write_summary({"flow": "m2", "points": []})
        run.write_text("server.log", "")
        run.write_text("profile.bin", "")
        run_dir = Path(run.dir)
    size = mib << 20
    with (run_dir / "server.log").open("w", encoding="utf-8") as f:
        written, i = 0, 0
        while written < size:
            line = LOG_LINE.format(i=i, pad="x" * 40)
            f.write(line)
            written += len(line)
            i += 1
    with (run_dir / "profile.bin").open("wb") as f:
        block = os.urandom(1 << 20)
        for _ in range(mib):
            f.write(block)
    return f"{run_dir.parent.name}/{run_dir.name}"


def _peak_rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE)
    assert match, status
    return int(match.group(1)) / 1024


def _start(root: Path) -> tuple[subprocess.Popen[str], str, int]:
    argv = [sys.executable, "-m", "alflow.cli", "results", "serve", str(root), "--port", "0", "--no-cache"]
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    assert proc.stderr is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        match = re.search(r"http://([\d.]+):(\d+)/", line)
        if match:
            return proc, match.group(1), int(match.group(2))
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise SystemExit("alflow results serve did not start")


def _download(host: str, port: int, path: str) -> tuple[int, float, bytes]:
    """Bytes received, seconds taken, and the last 200 bytes of the body."""
    conn = http.client.HTTPConnection(host, port, timeout=300)
    started = time.perf_counter()
    conn.request("GET", path)
    resp = conn.getresponse()
    assert resp.status == 200, (resp.status, resp.read()[:300])
    total, tail = 0, b""
    while chunk := resp.read(1 << 20):
        total += len(chunk)
        tail = (tail + chunk)[-200:]
    took = time.perf_counter() - started
    conn.close()
    return total, took, tail


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=256, help="size of each file in MiB (default 256)")
    ap.add_argument("--repeats", type=int, default=3, help="downloads of each file (default 3)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="alflow-site-files-") as tmp:
        root = Path(tmp) / "results"
        t0 = time.perf_counter()
        rel = _write_root(root, args.mib)
        print(
            f"root: one run with two {args.mib} MiB synthetic files ({time.perf_counter() - t0:.1f} s to write)"
        )
        proc, host, port = _start(root)
        try:
            _download(host, port, "/api/runs")
            idle = _peak_rss_mib(proc.pid)
            print(f"server peak RSS after start and one page: {idle:.0f} MiB\n")
            print("| file | MiB sent | median s | MiB/s | server peak RSS MiB after | growth MiB |")
            print("|---|---:|---:|---:|---:|---:|")
            for name in ("server.log", "profile.bin"):
                times = []
                for _ in range(args.repeats):
                    total, took, tail = _download(host, port, f"/runs/{rel}/files/{name}")
                    times.append(took)
                    redacted = b"https://***@" in tail and re.search(rb"pw\d", tail) is None
                    if name == "server.log" and not redacted:
                        raise SystemExit(f"the log's end is not redacted: {tail!r}")
                times.sort()
                median = times[len(times) // 2]
                peak = _peak_rss_mib(proc.pid)
                print(
                    f"| `{name}` | {total / 2**20:,.0f} | {median:.2f} | {total / 2**20 / median:,.0f} | "
                    f"{peak:.0f} | {peak - idle:+.0f} |"
                )
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)


if __name__ == "__main__":
    main()
