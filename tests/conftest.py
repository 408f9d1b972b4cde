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
