"""Shared by the tiny-engine tests: skip locally without ``alflow[tiny]``, fail under CI."""

from __future__ import annotations

import importlib
import os
from typing import Any

import pytest


def require_tiny(*modules: str) -> None:
    """Skip the calling test module when a module of the extra is missing; fail instead under CI."""
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            message = (
                f"{name} is not installed ({exc}); the tiny engine needs alflow[tiny]: "
                "bash scripts/setup.sh --tiny"
            )
            if os.environ.get("CI"):
                pytest.fail(message + " (CI is set: scripts/setup.sh --dev must install it)", pytrace=False)
            pytest.skip(message, allow_module_level=True)


def tiny_engine_module() -> Any:
    """``alflow.tiny.engine``, or skip the test (fail it under CI=true) when the alflow[tiny] extra is missing."""
    try:
        from alflow.tiny import engine
    except Exception as exc:  # ImportError or the engine's own "extra missing" error
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true: the tiny engine must be installed (alflow[tiny]): {exc}")
        pytest.skip(f"the tiny engine is not installed (pip install 'alflow[tiny]'): {exc}")
    return engine
