"""Integration fixtures: one Prefect API for the whole session (it costs ~5-12 s to start)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest

from tests.e2e import prefect_support


@pytest.fixture(scope="session")
def prefect_harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A fresh temporary Prefect API and database for the flows of this session (this worker's).

    Where the PostgreSQL of ``scripts/ci-services.sh`` answers: a ``prefect server`` on a database of its own,
    made for this session and dropped at its end. Else Prefect's test harness (SQLite). On SQLite the server
    answers 503 ("database is locked") when a flow run is created while it writes the events a flow's end sent,
    and the client retries about 2 s later: 9 times in test_flows and test_demo_sim alone.

    No flow run heartbeats, as ``alflow demo`` on its temporary server: no one watches them here, and a flow
    run joins its heartbeat thread at its end (up to a second, half a second per flow run on average).
    """
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    with contextlib.ExitStack() as stack:
        stack.enter_context(temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}))
        if prefect_support.postgres_problem() is not None:
            from prefect.testing.utilities import prefect_test_harness

            stack.enter_context(prefect_test_harness(server_startup_timeout=180))
            yield
            return
        url = prefect_support.create_database()
        stack.callback(prefect_support.drop_database, url)
        try:
            server = prefect_support.start_prefect_server(tmp_path_factory.mktemp("prefect-harness"), url)
        except AssertionError as exc:
            pytest.fail(str(exc))
        stack.callback(prefect_support.stop_prefect_server, server)
        stack.enter_context(_settings(server.env["PREFECT_API_URL"], url))
        yield


@contextlib.contextmanager
def _settings(api_url: str, database_url: str) -> Iterator[None]:
    """This process's flows talk to ``api_url`` and the server's database is ``database_url`` (as Prefect's test
    harness sets them, for the tests that read the database); logs and events drained after."""
    import prefect.context
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker
    from prefect.settings import PREFECT_API_URL, PREFECT_SERVER_DATABASE_CONNECTION_URL, temporary_settings

    updates = {PREFECT_API_URL: api_url, PREFECT_SERVER_DATABASE_CONNECTION_URL: database_url}
    with (
        temporary_settings(updates=updates),
        prefect.context._temporary_global_settings_context(prefect.context.get_settings_context()),
    ):
        try:
            yield
        finally:
            with contextlib.suppress(RuntimeError):  # never started
                APILogWorker.instance().drain()
            EventsWorker.drain_all()
