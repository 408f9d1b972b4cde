"""Shared by the tiny-engine tests: skip locally without ``alflow[tiny]``, fail under CI."""

from __future__ import annotations

import importlib
import os

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
