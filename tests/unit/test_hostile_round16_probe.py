"""Hostile round 16 of issue #49: the plugin probe sees the methods of the standard classes a command goes through.

Plugins replaced ``subprocess.Popen.__init__`` and ``Popen.communicate`` (every server command line, API keys in it),
``pathlib.Path.write_text``, ``Path.open`` and ``Path.read_text`` (a run's files), ``http.client.HTTPConnection.request``
and ``putheader`` (every request's headers) and ``concurrent.futures.ThreadPoolExecutor.submit``; the probe compared
only those modules' functions, not their classes' methods, and listed each plugin as clean. The watched libraries now
include them, with ``urllib.request``, ``shutil``, ``tempfile``, ``io``, ``logging`` (its handlers) and ``threading``.
The child's own run of a plugin that does so is ``tests/integration/test_plugin_probe_round16.py``.
"""

from __future__ import annotations

import importlib
import sys

import pytest

pytestmark = pytest.mark.unit

REPORTED = [
    ("subprocess", "Popen", "__init__"),
    ("subprocess", "Popen", "communicate"),
    ("pathlib", "Path", "write_text"),
    ("pathlib", "Path", "open"),
    ("pathlib", "Path", "read_text"),
    ("pathlib", "PosixPath", "write_text"),  # set over the one PosixPath inherits from Path
    ("http.client", "HTTPConnection", "request"),
    ("http.client", "HTTPConnection", "putheader"),
    ("concurrent.futures.thread", "ThreadPoolExecutor", "submit"),
    ("urllib.request", "OpenerDirector", "open"),
    ("urllib.request", "Request", "add_header"),
    ("tempfile", "TemporaryDirectory", "cleanup"),
    ("io", "IOBase", "writelines"),  # io's Python classes (the C ones cannot be changed by anyone)
    ("logging", "Handler", "handle"),
    ("logging", "StreamHandler", "emit"),
    ("logging", "Logger", "callHandlers"),
    ("logging.handlers", "RotatingFileHandler", "emit"),
    ("threading", "Thread", "start"),
    ("threading", "Thread", "run"),
]
LIBRARIES = [
    "subprocess",
    "pathlib",
    "http",
    "urllib",
    "concurrent",
    "shutil",
    "tempfile",
    "io",
    "logging",
    "threading",
]


def _state() -> dict[str, object]:
    from alflow.plugin_probe import _WATCHED_LIBRARIES, _WATCHED_SUBMODULES, _interpreter_state

    for name in (*_WATCHED_LIBRARIES, *_WATCHED_SUBMODULES):  # as the probe's child loads them first
        importlib.import_module(name)
    return _interpreter_state()


@pytest.mark.parametrize(("module", "owner", "attr"), REPORTED, ids=[f"{m}.{o}.{a}" for m, o, a in REPORTED])
def test_r16_a_patched_standard_class_method_is_seen(
    module: str, owner: str, attr: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each plugin of the round: the probe names the method it replaced, by where its class is defined."""
    from alflow.plugin_probe import _changes

    cls = getattr(importlib.import_module(module), owner)
    before = _state()
    monkeypatch.setattr(cls, attr, lambda *a, **k: None, raising=False)
    assert _changes(before, _state()) == [f"{cls.__module__}.{cls.__qualname__}.{attr}"]


def _classes_of(library: str) -> list[type]:
    """The classes of ``library``'s loaded modules that Python code can change (defined there, not in C)."""
    found = {
        id(v): v
        for name, m in list(sys.modules.items())
        if m is not None and name.partition(".")[0] == library
        for v in list(vars(m).values())
        if isinstance(v, type)
        and isinstance(v.__module__, str)
        and v.__module__.partition(".")[0] == library
        and not v.__flags__ & (1 << 8)
    }
    return sorted(found.values(), key=lambda c: f"{c.__module__}.{c.__qualname__}")


@pytest.mark.parametrize("library", LIBRARIES)
def test_r16_every_class_of_the_new_libraries_is_watched(
    library: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The class of input: in each library, every class's methods, one replaced and one set over an inherited one."""
    from alflow.plugin_probe import _WATCHED_LIBRARIES, _changes

    assert library in _WATCHED_LIBRARIES
    before = _state()
    classes = _classes_of(library)
    assert classes, library
    for cls in classes[:: max(1, len(classes) // 6)]:  # six or so of each library's, spread over its modules
        own = sorted(a for a, v in vars(cls).items() if callable(v))[:1]  # io's ABCs define none of their own
        where = f"{cls.__module__}.{cls.__qualname__}"
        with monkeypatch.context() as patch:
            for attr in own:
                patch.setattr(cls, attr, lambda *a, **k: None)
            patch.setattr(cls, "__r16_added__", lambda *a, **k: None, raising=False)
            named = _changes(before, _state())
        assert [n.replace("[2]", "") for n in named] == [f"{where}.{a}" for a in (*own, "__r16_added__")], cls
    assert _changes(before, _state()) == []


def test_r16_two_classes_of_one_name_are_both_watched(monkeypatch: pytest.MonkeyPatch) -> None:
    """``urllib.parse.SplitResult`` subclasses a namedtuple named SplitResult too: a method set on either is seen."""
    import urllib.parse

    from alflow.plugin_probe import _changes

    sub = urllib.parse.SplitResult
    (base,) = [b for b in sub.__bases__ if b.__qualname__ == "SplitResult"]
    before = _state()
    with monkeypatch.context() as patch:
        patch.setattr(sub, "geturl", lambda self: "http://evil.example/")
        assert _changes(before, _state()) == ["urllib.parse.SplitResult[2].geturl"]
    with monkeypatch.context() as patch:
        patch.setattr(base, "_replace", lambda self, **k: self)
        assert _changes(before, _state()) == ["urllib.parse.SplitResult._replace"]
    assert _changes(before, _state()) == []


def test_r16_the_submodules_loaded_first_hold_the_classes_the_round_patched() -> None:
    """A plugin that imports ``concurrent.futures.thread`` (or ``http.client``) first is compared all the same."""
    from alflow.plugin_probe import _WATCHED_LIBRARIES, _WATCHED_SUBMODULES

    for name in ("http.client", "urllib.request", "concurrent.futures.thread", "logging.handlers"):
        assert name in _WATCHED_SUBMODULES
        assert name.partition(".")[0] in _WATCHED_LIBRARIES


def test_r16_what_a_clean_plugin_does_with_them_changes_nothing(tmp_path: object) -> None:
    """Files written and read, a thread pool and a thread run, a log handler added and removed: nothing changes."""
    import http.client
    import logging
    import logging.handlers
    import shutil
    import tempfile
    import threading
    import urllib.request
    from concurrent.futures import ThreadPoolExecutor
    from pathlib import Path

    from alflow.plugin_probe import _changes

    before = _state()
    folder = Path(str(tmp_path))
    (folder / "a.txt").write_text("x")
    with (folder / "a.txt").open() as f:
        f.read()
    shutil.copy(folder / "a.txt", folder / "b.txt")
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        Path(tmp, "c").write_bytes(b"y")
    with ThreadPoolExecutor(1) as pool:
        pool.submit(len, "abc").result()
    thread = threading.Thread(target=len, args=("a",))
    thread.start()
    thread.join()
    logger = logging.getLogger("r16.plugin")
    handler = logging.handlers.RotatingFileHandler(folder / "log.txt")
    logger.addHandler(handler)
    logger.warning("hello")
    logger.removeHandler(handler)
    handler.close()
    http.client.HTTPConnection("127.0.0.1", 9, timeout=1)  # made, never connected
    urllib.request.Request("http://127.0.0.1:9/", headers={"X": "y"})
    assert _changes(before, _state()) == []


def test_r16_the_state_stays_cheap() -> None:
    """One state: about 32,500 entries, tens of milliseconds (well under the 0.3 s the child waits anyway)."""
    import time

    from alflow.plugin_probe import _interpreter_state

    _state()
    started = time.perf_counter()
    state = _interpreter_state()
    assert time.perf_counter() - started < 1.0
    assert len(state) < 60_000
