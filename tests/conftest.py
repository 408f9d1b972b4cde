"""Shared test configuration: every test is marked by the folder it lives in."""

from __future__ import annotations

from pathlib import Path

import pytest

_MARKS = {"unit": pytest.mark.unit, "integration": pytest.mark.integration, "e2e": pytest.mark.e2e}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark tests under tests/unit, tests/integration and tests/e2e with their folder's marker."""
    for item in items:
        parts = Path(str(item.fspath)).parts
        for name, mark in _MARKS.items():
            if name in parts:
                item.add_marker(mark)


def pytest_configure(config: pytest.Config) -> None:
    """alflow's state folder (the registry of started servers) in a folder of this test session.

    Set before any test runs and inherited by every process the tests start, so tests never see or
    touch the user's own registry, and the registry a test session leaves can be checked.
    """
    import os
    import tempfile

    if "ALFLOW_STATE_DIR" not in os.environ:
        os.environ["ALFLOW_STATE_DIR"] = tempfile.mkdtemp(prefix="alflow-test-state-")


@pytest.fixture
def run_dirs_in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Servers started without a log_dir (runners, jobs) use a temporary directory: keep those under tmp_path.

    A module asks for it with ``pytestmark = pytest.mark.usefixtures("run_dirs_in_tmp_path")``.
    """
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
