"""``alflow results serve`` as a process: it serves, then stops cleanly on SIGTERM and SIGINT (port closed, exit 0).

Also: the catalogue cache goes under ``$XDG_CACHE_HOME/alflow/catalog`` and nothing is written into the root.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "4f9de94"


def _start(root: Path, env: dict[str, str], *args: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "alflow.cli", "results", "serve", str(root), "--port", "0", *args],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    assert proc.stderr is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        found = re.search(r"(http://127\.0\.0\.1:\d+/)", line)
        if found:
            return proc, found.group(1)
        if not line and proc.poll() is not None:
            break
    proc.kill()
    pytest.fail(f"the site did not start: {proc.stderr.read()}")


def _port_closed(url: str) -> bool:
    host, port = url.split("//")[1].rstrip("/").rsplit(":", 1)
    with socket.socket() as s:
        return s.connect_ex((host, int(port))) != 0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_the_site_serves_and_stops_cleanly_on_a_signal(sig: signal.Signals, tmp_path: Path) -> None:
    root = tmp_path / "results"
    shutil.copytree(FIXTURES, root)
    before = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    proc, url = _start(root, env)
    try:
        with urllib.request.urlopen(url + "api/runs", timeout=30) as answer:
            assert answer.status == 200
            assert b'"total":5' in answer.read()
        proc.send_signal(sig)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert _port_closed(url)
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*")) == before  # the root is only read
    assert len(list((tmp_path / "cache" / "alflow" / "catalog").glob("*.json"))) == 1


def test_the_site_with_a_token_on_loopback_refuses_requests_without_it(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "ALFLOW_TEST_SITE_TOKEN": "tok-123456-abcdef",
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }
    proc, url = _start(FIXTURES, env, "--token-env", "ALFLOW_TEST_SITE_TOKEN", "--no-cache")
    try:
        with pytest.raises(urllib.error.HTTPError) as denied:
            urllib.request.urlopen(url, timeout=30)
        assert denied.value.code == 401
        request = urllib.request.Request(url, headers={"Authorization": "Bearer tok-123456-abcdef"})
        with urllib.request.urlopen(request, timeout=30) as answer:
            assert answer.status == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
        assert proc.stderr is not None
        assert "tok-123456-abcdef" not in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not (tmp_path / "cache").exists()  # --no-cache
