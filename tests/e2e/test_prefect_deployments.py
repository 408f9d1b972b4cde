"""A real `prefect server`, deployments from prefect.yaml, a process worker, UI-style custom runs.

Two runs of `m2-benchmark` aimed at one GPU host (one global concurrency limit of 1) are submitted
together; the worker starts both, and the limit makes their servers live one after the other.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PREFECT = str(Path(sys.executable).parent / "prefect")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def prefect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    home = tmp_path_factory.mktemp("prefect-home")
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
    log = (home / "server.log").open("wb")
    server = subprocess.Popen(
        [PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"prefect server exited: {(home / 'server.log').read_text()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/api/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    else:
        server.kill()
        pytest.fail("prefect server did not become healthy within 180 s")
    try:
        yield env
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def _cli(env: dict[str, str], *args: str, timeout: float = 180) -> str:
    out = subprocess.run(
        [PREFECT, "--no-prompt", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert out.returncode == 0, (
        f"prefect {' '.join(args)} failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}"
    )
    return out.stdout


def _m2_parameters(tmp_path: Path, tag: str) -> dict[str, Any]:
    spec = next(
        d
        for d in yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"]
        if d["name"] == "m2-benchmark"
    )
    params: dict[str, Any] = spec["parameters"]["params"]
    params["placement"] = {
        "runner": {"kind": "process"},
        "gpu_host": "gpu-e2e-node",
        "strict_limit": True,
        "results_root": str(tmp_path / f"results-{tag}"),
    }
    params["concurrencies"] = [4]
    return {"params": params}


_RETRY_STATUS = frozenset({429, 502, 503})
"""Answers Prefect's own client retries: a busy server (SQLite locked, workers saturated) says 503."""
_RETRY_ERRORS = (httpx.ConnectError, httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)
"""Connection refused or reset before a response: the request did not complete, so try again."""


async def _api(
    env: dict[str, str], method: str, path: str, body: dict[str, Any] | None = None, *, attempts: int = 6
) -> Any:
    """One Prefect REST call, retried on 429/502/503 and connection resets (0.5, 1, 2, 4, 8 s backoff)."""
    async with httpx.AsyncClient(base_url=env["PREFECT_API_URL"], timeout=30) as client:
        for attempt in range(attempts):
            final = attempt == attempts - 1
            try:
                resp = await client.request(method, path, json=body)
            except _RETRY_ERRORS:
                if final:
                    raise
            else:
                if final or resp.status_code not in _RETRY_STATUS:
                    resp.raise_for_status()
                    return resp.json()
            await asyncio.sleep(0.5 * 2**attempt)
    raise AssertionError("unreachable")


async def test_api_calls_retry_a_busy_server_and_a_reset_connection() -> None:
    """A loopback server answers 503, then drops the connection, then 200: one call gets the 200."""
    from aiohttp import web

    seen: list[str] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        seen.append(request.path)
        if len(seen) == 1:
            return web.json_response({"detail": "Service Unavailable"}, status=503)
        if len(seen) == 2:
            assert request.transport is not None
            request.transport.abort()  # connection reset before any response
            return web.Response()
        return web.json_response({"id": "run-1"})

    app = web.Application()
    app.router.add_route("*", "/api/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        env = {"PREFECT_API_URL": f"http://127.0.0.1:{port}/api"}
        assert await _api(env, "POST", "/deployments/x/create_flow_run", {}) == {"id": "run-1"}
        assert len(seen) == 3
        seen.clear()
        with pytest.raises(httpx.HTTPStatusError, match="503"):
            await _api(env, "GET", "/flow_runs/x", attempts=1)
    finally:
        await runner.cleanup()


def test_ui_style_runs_on_a_worker_share_one_gpu_host_in_turn(
    prefect_server: dict[str, str], tmp_path: Path
) -> None:
    env = prefect_server
    _cli(env, "work-pool", "create", "local", "--type", "process")
    _cli(env, "gcl", "create", "gpu-e2e-node", "--limit", "1")
    _cli(env, "deploy", "--name", "m2-benchmark")

    deployment = asyncio.run(_api(env, "GET", "/deployments/name/m2-benchmark/m2-benchmark"))
    runs = [
        asyncio.run(
            _api(
                env,
                "POST",
                f"/deployments/{deployment['id']}/create_flow_run",
                {"parameters": _m2_parameters(tmp_path, tag), "state": {"type": "SCHEDULED"}},
            )
        )
        for tag in ("a", "b")
    ]
    worker = subprocess.run(
        [PREFECT, "worker", "start", "--pool", "local", "--run-once", "--limit", "2"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=480,
        check=False,
    )
    states = [asyncio.run(_api(env, "GET", f"/flow_runs/{r['id']}"))["state"] for r in runs]
    assert all(s["type"] == "COMPLETED" for s in states), (
        f"{states}\n{worker.stdout[-3000:]}\n{worker.stderr[-3000:]}"
    )

    windows = []
    for run in runs:
        task_runs = asyncio.run(
            _api(env, "POST", "/task_runs/filter", {"flow_runs": {"id": {"any_": [run["id"]]}}, "limit": 200})
        )
        by_name = {t["name"].rsplit("-", 1)[0]: t for t in task_runs}
        start = by_name["start_server"]["start_time"]
        end = by_name["stop_server"]["end_time"]
        windows.append((start, end))
        artifacts = asyncio.run(
            _api(env, "POST", "/artifacts/filter", {"artifacts": {"flow_run_id": {"any_": [run["id"]]}}})
        )
        kinds = {a["type"] for a in artifacts}
        assert {"markdown", "table", "progress"} <= kinds, kinds
    (_, a_end), (b_start, _) = sorted(windows)
    assert a_end <= b_start, f"servers of the two runs overlapped: {windows}"


README_DEPLOY_LINES = (
    "prefect work-pool create local --type process",
    "prefect work-pool create gpu-h200 --type process",
    "ALFLOW_HOME=$PWD prefect --no-prompt deploy --all",
    "ALFLOW_HOME=$PWD prefect worker start --pool local",
)
"""The README's team setup, as written (tests/integration/test_readme_commands.py points here)."""


def _readme_env(env: dict[str, str]) -> dict[str, str]:
    """The server's environment with this interpreter's bin first on PATH (``prefect`` as the README types it)."""
    out = {k: v for k, v in env.items() if k != "ALFLOW_HOME"}  # the README line sets it itself
    out["PATH"] = os.pathsep.join([str(Path(PREFECT).parent), env.get("PATH", "")])
    return out


def _delete_pools(env: dict[str, str]) -> None:
    for pool in ("local", "gpu-h200"):
        subprocess.run(
            [PREFECT, "--no-prompt", "work-pool", "delete", pool], env=env, cwd=ROOT,
            capture_output=True, timeout=120, check=False,
        )  # fmt: skip


def test_the_readme_team_setup_lines_run_as_written(prefect_server: dict[str, str]) -> None:
    """The README's team setup lines, through bash from the project root: pools, every deployment, a worker.

    The other test of this module makes the ``local`` pool: the pools are removed before and after, so
    the README's ``work-pool create`` runs on a server without them, in either order.
    """
    env = _readme_env(prefect_server)
    *setup, worker_line = README_DEPLOY_LINES
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert all(line in readme for line in README_DEPLOY_LINES)
    _delete_pools(env)
    try:
        for line in setup:  # the pools, then every deployment
            done = subprocess.run(
                ["bash", "-c", line],
                env=env,
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            assert done.returncode == 0, f"{line}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        names = {d["name"] for d in yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"]}
        found = asyncio.run(_api(env, "POST", "/deployments/filter", {"limit": 200}))
        assert names <= {d["name"] for d in found}, found
        worker = subprocess.Popen(
            ["bash", "-c", worker_line],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        seen: list[str] = []
        # never wait forever for the "started" line
        stuck = threading.Timer(180, os.killpg, (worker.pid, signal.SIGKILL))
        stuck.start()
        try:
            assert worker.stdout is not None
            for line in worker.stdout:
                seen.append(line)
                if "started" in line.lower():
                    break
            assert worker.poll() is None, "".join(seen)[-3000:]
        finally:
            os.killpg(worker.pid, signal.SIGINT)  # Ctrl-C, as a person stops it
            try:
                worker.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait(timeout=10)
            stuck.cancel()
            if worker.stdout is not None:
                worker.stdout.close()
        assert any("started" in line.lower() for line in seen), "".join(seen)[-3000:]
    finally:
        _delete_pools(env)
