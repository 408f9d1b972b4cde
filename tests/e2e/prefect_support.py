"""A real ``prefect server`` on PostgreSQL for the e2e tests, and the helpers that talk to it.

The fixtures live in ``tests/e2e/conftest.py`` (``prefect_database``, ``prefect_server``); this module
holds what they and the tests share:

- ``postgres_problem()``: why the PostgreSQL of ``$ALFLOW_E2E_POSTGRES_URL`` (default ``POSTGRES_URL``,
  started by ``scripts/ci-services.sh``) cannot be used, or None;
- ``create_database()`` / ``drop_database()``: one fresh database per test session, named
  ``prefect_e2e_<pid>_<random>``, owned by the URL's role (it has CREATEDB);
- ``start_prefect_server()`` / ``stop_prefect_server()``: ``prefect server start`` on that database;
- ``cli(env, *args)``: ``prefect --no-prompt ARGS`` from the project root, asserting exit status 0;
- ``api(env, method, path, body)``: one REST call, retried when the server is busy;
- ``ensure_pool(env, name, pool_type)`` and ``ensure_limit(env, name, limit)``: idempotent, since the
  server lives for the whole session and several tests make the same pool or limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx

from alflow.util.procguard import pid_alive

ROOT = Path(__file__).resolve().parents[2]
PREFECT = str(Path(sys.executable).parent / "prefect")

POSTGRES_URL = "postgresql+asyncpg://alflow:alflow@127.0.0.1:5432/prefect_e2e"
"""The default of ``$ALFLOW_E2E_POSTGRES_URL``: the role and database ``scripts/ci-services.sh`` creates."""

SESSION_DATABASE = re.compile(r"prefect_e2e_(\d+)_[0-9a-f]{8}")
"""The name of a test session's database: the pid of the pytest process that made it, then random."""

HEALTHY_WITHIN_S = 180.0


def postgres_url() -> str:
    """The SQLAlchemy URL (``postgresql+asyncpg://...``) of the database the sessions' databases are made from."""
    return os.environ.get("ALFLOW_E2E_POSTGRES_URL", POSTGRES_URL)


def _with_database(url: str, database: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).set(database=database).render_as_string(hide_password=False)


def _asyncpg_dsn(url: str) -> str:
    """asyncpg's DSN for a SQLAlchemy URL (``postgresql+asyncpg://`` -> ``postgresql://``)."""
    from sqlalchemy.engine import make_url

    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


async def _fetch(url: str, query: str, *args: object) -> list[Any]:
    import asyncpg

    conn = await asyncpg.connect(_asyncpg_dsn(url), timeout=10)
    try:
        return list(await conn.fetch(query, *args))
    finally:
        await conn.close()


def fetch(url: str, query: str, *args: object) -> list[Any]:
    """Rows of one query on the database of ``url`` (asyncpg, as the URL's role)."""
    return asyncio.run(_fetch(url, query, *args))


def postgres_problem() -> str | None:
    """Why the PostgreSQL of ``$ALFLOW_E2E_POSTGRES_URL`` cannot be used here (None when it can)."""
    url = postgres_url()
    try:
        import asyncpg  # noqa: F401  (prefect depends on it; say so plainly when it is missing)
    except ImportError as exc:
        return f"asyncpg is not importable ({exc}): PostgreSQL cannot be reached"
    try:
        rows = fetch(url, "SELECT rolcreatedb FROM pg_roles WHERE rolname = current_user")
    except Exception as exc:  # refused, timed out, bad password, no such database, ...
        shown = _redact(url)
        return f"PostgreSQL at {shown} does not answer: {type(exc).__name__}: {exc}"
    if not rows or not rows[0][0]:
        return f"the role of {_redact(url)} may not create databases (it needs CREATEDB)"
    return None


def _redact(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


async def _drop_left_over(conn: Any) -> None:
    """Drop the databases of earlier sessions whose pytest process is gone (killed before its teardown)."""
    import asyncpg

    rows = await conn.fetch(
        "SELECT datname FROM pg_database WHERE datname LIKE 'prefect\\_e2e\\_%' AND pg_get_userbyid(datdba) = current_user"
    )
    for row in rows:
        match = SESSION_DATABASE.fullmatch(row["datname"])
        if match is None or int(match.group(1)) == os.getpid() or pid_alive(int(match.group(1))):
            continue
        with contextlib.suppress(asyncpg.PostgresError):  # no FORCE: one still in use stays
            await conn.execute(f'DROP DATABASE IF EXISTS "{row["datname"]}"')


async def _create(url: str, name: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(_asyncpg_dsn(url), timeout=10)
    try:
        await _drop_left_over(conn)
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()


async def _drop(url: str, name: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(_asyncpg_dsn(url), timeout=10)
    try:
        for attempt in range(10):
            try:
                await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                return
            except asyncpg.PostgresError:
                # FORCE cannot end a session the role may not signal (e.g. an autovacuum worker on the
                # database for a moment): wait for it to finish, then try again
                if attempt == 9:
                    raise
                await asyncio.sleep(1.0)
    finally:
        await conn.close()


async def _dump_postgres(url: str) -> str:
    import asyncpg

    conn = await asyncpg.connect(_asyncpg_dsn(url), timeout=10)
    try:
        tables = await conn.fetch(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY table_name"
        )
        lines = []
        for (table,) in tables:
            rows = await conn.fetch(f'SELECT t::text FROM "{table}" t')
            lines += [f"{table}: {row[0]}" for row in rows]
        return "\n".join(lines)
    finally:
        await conn.close()


def database_dump(url: str) -> str:
    """Every row of the Prefect database at ``url`` (SQLite or PostgreSQL, a SQLAlchemy URL) as text."""
    if url.startswith("sqlite"):
        import sqlite3

        connection = sqlite3.connect(url.split("///", 1)[1])
        try:
            return "\n".join(connection.iterdump())
        finally:
            connection.close()
    assert url.startswith("postgresql"), url
    return asyncio.run(_dump_postgres(url))


def create_database() -> str:
    """A new empty database ``prefect_e2e_<pid>_<random>``; its SQLAlchemy URL (for Prefect)."""
    name = f"prefect_e2e_{os.getpid()}_{secrets.token_hex(4)}"
    asyncio.run(_create(postgres_url(), name))
    return _with_database(postgres_url(), name)


def drop_database(url: str) -> None:
    """Drop the database of ``url`` (made by ``create_database``), closing what still uses it."""
    from sqlalchemy.engine import make_url

    name = make_url(url).database
    assert name is not None, url
    assert SESSION_DATABASE.fullmatch(name), f"not a test session's database: {url}"
    asyncio.run(_drop(postgres_url(), name))


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (bind port 0)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class PrefectServer:
    """A started ``prefect server start``: its process, log and the environment that points at it."""

    process: subprocess.Popen[bytes]
    log: IO[bytes]
    log_path: Path
    env: dict[str, str]


def start_prefect_server(home: Path, database_url: str) -> PrefectServer:
    """``prefect server start`` on ``database_url`` with ``PREFECT_HOME=home``, healthy (else AssertionError).

    ``env`` holds the caller's environment plus ``PREFECT_HOME``, ``PREFECT_API_URL``,
    ``PREFECT_API_DATABASE_CONNECTION_URL`` (this database), ``ALFLOW_HOME`` (the project root) and
    analytics off: the environment for ``prefect`` commands, workers and the tests' REST calls.
    """
    port = free_port()
    env = {
        **os.environ,
        "PREFECT_HOME": str(home),
        "PREFECT_API_URL": f"http://127.0.0.1:{port}/api",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_API_DATABASE_CONNECTION_URL": database_url,
        "ALFLOW_HOME": str(ROOT),
        "DO_NOT_TRACK": "1",
        # a run that finds a global concurrency limit taken (a GPU host's slot) asks again after the limit's
        # average occupancy, capped at this (30 s by default): runs that share one host wait seconds, not 30
        "PREFECT_SERVER_CONCURRENCY_MAXIMUM_CONCURRENCY_SLOT_WAIT_SECONDS": "2",
    }
    log_path = home / "server.log"
    log = log_path.open("wb")
    process = subprocess.Popen(
        [PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    server = PrefectServer(process, log, log_path, env)
    deadline = time.monotonic() + HEALTHY_WITHIN_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            stop_prefect_server(server)
            raise AssertionError(f"prefect server exited: {log_path.read_text()[-3000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/api/health", timeout=2).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    stop_prefect_server(server)
    raise AssertionError(
        f"prefect server did not become healthy within {HEALTHY_WITHIN_S:.0f} s: {log_path.read_text()[-3000:]}"
    )


def stop_prefect_server(server: PrefectServer) -> None:
    """SIGTERM, then SIGKILL after 20 s; close its log."""
    server.process.terminate()
    try:
        server.process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait(timeout=10)
    server.log.close()


def cli(env: dict[str, str], *args: str, timeout: float = 180) -> str:
    """``prefect --no-prompt ARGS`` from the project root; its stdout (AssertionError unless it exits 0)."""
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


RETRY_STATUS = frozenset({429, 502, 503})
"""Answers Prefect's own client retries: a busy server (database locked, workers saturated) says 503."""
RETRY_ERRORS = (httpx.ConnectError, httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)
"""Connection refused or reset before a response: the request did not complete, so try again."""


async def api(
    env: dict[str, str], method: str, path: str, body: dict[str, Any] | None = None, *, attempts: int = 6
) -> Any:
    """One Prefect REST call, retried on 429/502/503 and connection resets (0.5, 1, 2, 4, 8 s backoff).

    ``path`` is relative to ``env["PREFECT_API_URL"]`` (``/flow_runs/...``); the JSON answer (None for
    an empty one, e.g. 204), or ``httpx.HTTPStatusError`` for any other error status (and for a retried one on the last attempt).
    """
    async with httpx.AsyncClient(base_url=env["PREFECT_API_URL"], timeout=30) as client:
        for attempt in range(attempts):
            final = attempt == attempts - 1
            try:
                resp = await client.request(method, path, json=body)
            except RETRY_ERRORS:
                if final:
                    raise
            else:
                if final or resp.status_code not in RETRY_STATUS:
                    resp.raise_for_status()
                    return resp.json() if resp.content else None
            await asyncio.sleep(0.5 * 2**attempt)
    raise AssertionError("unreachable")


def _get_or_none(env: dict[str, str], path: str) -> Any:
    """``GET path``'s JSON, or None when the server answers 404."""
    try:
        return asyncio.run(api(env, "GET", path))
    except httpx.HTTPStatusError as exc:
        if exc.response.status_code == 404:
            return None
        raise


def ensure_pool(env: dict[str, str], name: str, pool_type: str = "process") -> dict[str, Any]:
    """The work pool ``name`` of type ``pool_type``, created (``prefect work-pool create``) when missing.

    An existing pool of another type is an error (AssertionError), not silently replaced. Returns the
    pool as the REST API shows it.
    """
    pool: dict[str, Any] | None = _get_or_none(env, f"/work_pools/{name}")
    if pool is None:
        cli(env, "work-pool", "create", name, "--type", pool_type)
        pool = asyncio.run(api(env, "GET", f"/work_pools/{name}"))
        assert pool is not None
    assert pool["type"] == pool_type, f"work pool {name} exists with type {pool['type']}, not {pool_type}"
    return pool


def ensure_limit(env: dict[str, str], name: str, limit: int) -> dict[str, Any]:
    """The global concurrency limit ``name`` active with ``limit`` slots, created (``prefect gcl create``) when missing.

    An existing limit is set to ``limit`` and made active. One with slots still held (left by an earlier
    test of this session) is an AssertionError naming them, rather than a run that waits for them.
    Returns the limit as the REST API shows it.
    """
    found: dict[str, Any] | None = _get_or_none(env, f"/v2/concurrency_limits/{name}")
    if found is None:
        cli(env, "gcl", "create", name, "--limit", str(limit))
    else:
        assert found["active_slots"] == 0, (
            f"global concurrency limit {name} has {found['active_slots']} slot(s) held by an earlier test"
        )
        if found["limit"] != limit or not found["active"]:
            asyncio.run(api(env, "PATCH", f"/v2/concurrency_limits/{name}", {"limit": limit, "active": True}))
    now: dict[str, Any] = asyncio.run(api(env, "GET", f"/v2/concurrency_limits/{name}"))
    assert now["limit"] == limit, now
    assert now["active"], now
    return now
