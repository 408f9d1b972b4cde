"""Hostile round 16 of issue #49: the probe's child leaves out a plugin that patches a standard class's method.

Each plugin module of the round, tried by :func:`alflow.plugin_probe.probe` in a child process as a command tries it:
``subprocess.Popen.__init__``/``communicate``, ``pathlib.Path.write_text``/``open``/``read_text``,
``http.client.HTTPConnection.request``/``putheader``, ``concurrent.futures.ThreadPoolExecutor.submit`` (imported by the
plugin itself, first), and the libraries watched with them; a plugin that only uses them stays clean.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

PATCHED = [  # (what the plugin imports, the class as it reaches it, the method, where the class is defined)
    ("subprocess", "subprocess.Popen", "__init__", "subprocess.Popen"),
    ("subprocess", "subprocess.Popen", "communicate", "subprocess.Popen"),
    ("pathlib", "pathlib.Path", "write_text", "pathlib.Path"),
    ("pathlib", "pathlib.Path", "open", "pathlib.Path"),
    ("pathlib", "pathlib.Path", "read_text", "pathlib.Path"),
    ("http.client", "http.client.HTTPConnection", "request", "http.client.HTTPConnection"),
    ("http.client", "http.client.HTTPConnection", "putheader", "http.client.HTTPConnection"),
    ("concurrent.futures", "concurrent.futures.ThreadPoolExecutor", "submit", "concurrent.futures.thread.ThreadPoolExecutor"),
    ("urllib.request", "urllib.request.OpenerDirector", "open", "urllib.request.OpenerDirector"),
    ("tempfile", "tempfile.TemporaryDirectory", "cleanup", "tempfile.TemporaryDirectory"),
    ("logging", "logging.Handler", "handle", "logging.Handler"),
    ("threading", "threading.Thread", "start", "threading.Thread"),
]  # fmt: skip
CLEAN = """
import logging, tempfile, threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

with tempfile.TemporaryDirectory() as tmp:
    Path(tmp, "a").write_text("x")
    Path(tmp, "a").read_text()
with ThreadPoolExecutor(1) as pool:
    pool.submit(len, "abc").result()
t = threading.Thread(target=len, args=("a",))
t.start()
t.join()
logging.getLogger("r16.clean").addHandler(logging.NullHandler())
SPEC = None
"""


def _probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str) -> str | None:
    from alflow.plugin_probe import probe

    (tmp_path / "evil16.py").write_text(source)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # no verdict kept from another test
    return probe("evil16:SPEC", 120.0)


@pytest.mark.parametrize(
    ("module", "owner", "attr", "where"), PATCHED, ids=[f"{o}.{a}" for _, o, a, _ in PATCHED]
)
def test_r16_a_plugin_patching_a_standard_class_method_is_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str, owner: str, attr: str, where: str
) -> None:
    source = (
        f"import {module}\n_o = {owner}.{attr}\n"
        f"def _p(self, *a, **k):\n    return _o(self, *a, **k)\n{owner}.{attr} = _p\nSPEC = None\n"
    )
    why = _probe(tmp_path, monkeypatch, source)
    assert why == f"it changes the interpreter when imported: {where}.{attr}"


def test_r16_a_plugin_that_only_uses_them_is_clean(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _probe(tmp_path, monkeypatch, CLEAN) is None
