"""Golden files: rendered text pinned under ``tests/unit/golden/``.

A test compares what it renders with the stored file. To change a pinned file deliberately, run the
test with ``ALFLOW_UPDATE_GOLDEN=1``, then read the diff (``git diff tests/unit/golden``) before committing.
"""

from __future__ import annotations

import os
from pathlib import Path

GOLDEN_DIR = Path(__file__).parent / "golden"
UPDATE_ENV = "ALFLOW_UPDATE_GOLDEN"


def assert_golden(name: str, text: str) -> None:
    """``text`` must equal the golden file ``name`` (rewritten instead when ``ALFLOW_UPDATE_GOLDEN=1``)."""
    path = GOLDEN_DIR / name
    if os.environ.get(UPDATE_ENV) == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    if not path.exists():
        raise AssertionError(
            f"golden file {path} is missing: run with {UPDATE_ENV}=1 to write it, then review it"
        )
    expected = path.read_text(encoding="utf-8")
    assert text == expected, (
        f"rendered text differs from {path} (run with {UPDATE_ENV}=1 to update, then review)"
    )
