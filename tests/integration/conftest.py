"""Integration fixtures: one Prefect test harness for the whole session (it costs ~12 s)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def prefect_harness() -> Iterator[None]:
    """A fresh temporary Prefect API and database for the flows of this session."""
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=180):
        yield
