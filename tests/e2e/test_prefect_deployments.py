"""A real `prefect server` on PostgreSQL, deployments from prefect.yaml, a process worker, UI-style custom runs.

The server (``prefect_server``, tests/e2e/conftest.py) lives for the whole test session in a fresh
PostgreSQL database; pools and limits are made with the idempotent helpers of prefect_support.
Two runs of `m2-benchmark` aimed at one GPU host (one global concurrency limit of 1) are submitted
together; the worker starts both, and the limit makes their servers live one after the other.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from alflow.config import benchmark_params, load_preset
from tests.e2e.prefect_support import PREFECT, ROOT, api, cli, ensure_limit, ensure_pool, fetch

pytestmark = pytest.mark.services


def _m2_parameters(tmp_path: Path, tag: str) -> dict[str, Any]:
    """A UI custom run of m2-benchmark with the advanced form: its short form's full configuration, placed here.

    The preset is emptied (a preset given with ``params`` replaces their placement); the short form's
    concurrencies still win over ``params``.
    """
    spec = next(
        d
        for d in yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"]
        if d["name"] == "m2-benchmark"
    )
    short: dict[str, Any] = spec["parameters"]
    preset = load_preset(short.pop("preset"), ROOT)
    params = benchmark_params(preset=preset, **short).model_dump(mode="json")
    params["placement"] = {
        "runner": {"kind": "process"},
        "gpu_host": "gpu-e2e-node",
        "strict_limit": True,
        "results_root": str(tmp_path / f"results-{tag}"),
    }
    return {"preset": None, "concurrencies": [4], "params": params}


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
        assert await api(env, "POST", "/deployments/x/create_flow_run", {}) == {"id": "run-1"}
        assert len(seen) == 3
        seen.clear()
        with pytest.raises(httpx.HTTPStatusError, match="503"):
            await api(env, "GET", "/flow_runs/x", attempts=1)
    finally:
        await runner.cleanup()


def test_the_server_keeps_its_state_in_this_sessions_postgres_database(
    prefect_server: dict[str, str], prefect_database: str
) -> None:
    """A flow made through the REST API is a row of ``flow`` in the session's PostgreSQL database, and no SQLite file appears."""
    env = prefect_server
    assert env["PREFECT_API_DATABASE_CONNECTION_URL"] == prefect_database
    assert prefect_database.startswith("postgresql+asyncpg://"), prefect_database
    name = f"pg-probe-{secrets.token_hex(4)}"
    flow = asyncio.run(api(env, "POST", "/flows/", {"name": name}))
    rows = fetch(prefect_database, "SELECT id::text, name, version() FROM flow WHERE name = $1", name)
    assert [(r[0], r[1]) for r in rows] == [(flow["id"], name)], rows
    assert rows[0][2].startswith("PostgreSQL "), rows[0][2]
    assert not (Path(env["PREFECT_HOME"]) / "prefect.db").exists()


def test_ui_style_runs_on_a_worker_share_one_gpu_host_in_turn(
    prefect_server: dict[str, str], tmp_path: Path
) -> None:
    env = prefect_server
    ensure_pool(env, "local", "process")
    ensure_limit(env, "gpu-e2e-node", 1)
    cli(env, "deploy", "--name", "m2-benchmark")

    deployment = asyncio.run(api(env, "GET", "/deployments/name/m2-benchmark/m2-benchmark"))
    runs = [
        asyncio.run(
            api(
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
    states = [asyncio.run(api(env, "GET", f"/flow_runs/{r['id']}"))["state"] for r in runs]
    assert all(s["type"] == "COMPLETED" for s in states), (
        f"{states}\n{worker.stdout[-3000:]}\n{worker.stderr[-3000:]}"
    )

    windows = []
    for run in runs:
        task_runs = asyncio.run(
            api(env, "POST", "/task_runs/filter", {"flow_runs": {"id": {"any_": [run["id"]]}}, "limit": 200})
        )
        by_name = {t["name"].rsplit("-", 1)[0]: t for t in task_runs}
        start = by_name["start_server"]["start_time"]
        end = by_name["stop_server"]["end_time"]
        windows.append((start, end))
        artifacts = asyncio.run(
            api(env, "POST", "/artifacts/filter", {"artifacts": {"flow_run_id": {"any_": [run["id"]]}}})
        )
        kinds = {a["type"] for a in artifacts}
        assert {"markdown", "table", "progress"} <= kinds, kinds
    (_, a_end), (b_start, _) = sorted(windows)
    assert a_end <= b_start, f"servers of the two runs overlapped: {windows}"


TEAM_SETUP_PAGE = ROOT / "docs" / "running" / "prefect.md"
"""The docs page holding the team setup (the README shows the same lines in its tour)."""
README_DEPLOY_LINES = (
    "prefect work-pool create local --type process",
    "prefect work-pool create gpu-h200 --type process",
    "ALFLOW_HOME=$PWD prefect --no-prompt deploy --all",
    "ALFLOW_HOME=$PWD prefect worker start --pool local",
)
"""The team setup of docs/running/prefect.md, as written (tests/integration/test_readme_commands.py points here)."""


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
    """The docs' team setup lines, through bash from the project root: pools, every deployment, a worker.

    Other tests of the session make the ``local`` pool (the server lives for the whole session): the
    pools are removed before and after, so the README's ``work-pool create`` runs on a server without
    them, in any order (a later test makes ``local`` again with ``ensure_pool``).
    """
    env = _readme_env(prefect_server)
    *setup, worker_line = README_DEPLOY_LINES
    page = TEAM_SETUP_PAGE.read_text(encoding="utf-8")
    assert all(line in page for line in README_DEPLOY_LINES)
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
        found = asyncio.run(api(env, "POST", "/deployments/filter", {"limit": 200}))
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
