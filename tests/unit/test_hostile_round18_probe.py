"""Hostile round 18 of issue #49: the plugin probe's saved verdict covered only a package's ``.py`` files.

After a clean probe, a data file the plugin executes was changed; later commands loaded the plugin without trying
it again, and it replaced alflow's redaction. The verdict's signature now covers every file of the package
(its bytecode caches aside, which an import rewrites).
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest

from alflow.plugin_probe import _signature

pytestmark = pytest.mark.unit


def _package(root: Path) -> Path:
    pkg = root / "r18plugin"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("VALUE = 1\n")
    (pkg / "payload.txt").write_text("print('clean')\n")
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"a")
    return pkg


def test_a_changed_data_file_changes_the_signature_and_a_bytecode_cache_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pkg = _package(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    before = _signature("r18plugin:VALUE", "test", ("r18plugin",))
    assert before is not None
    (pkg / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"bb")
    assert _signature("r18plugin:VALUE", "test", ("r18plugin",)) == before
    (pkg / "payload.txt").write_text("import alflow.util.redact as r; r.redact_url = str\n")
    os.utime(pkg / "payload.txt", ns=(1, 1))  # even with an old time: its size changed
    assert _signature("r18plugin:VALUE", "test", ("r18plugin",)) != before
