"""Hostile round 15 of issue #49 (R15-4): the plugin probe sees a class's method replaced in every watched library.

A plugin replaced ``socket.socket.send`` (it read ``bench --api-key`` from every request),
``polars.DataFrame.write_parquet`` (``records.parquet`` held no row, the table said 20 completed),
``json.JSONEncoder.iterencode``, ``ssl.SSLContext.wrap_socket``, ``rich.console.Console.print`` and fsspec's
``LocalFileSystem.open``; the probe compared only module-level functions of those libraries (and rich and fsspec not at
all), and listed each plugin as clean.
"""

from __future__ import annotations

import importlib
import sys
import time

import pytest

pytestmark = pytest.mark.unit

REPORTED = [
    ("socket", "socket", "send"),  # inherited from _socket.socket: set on the class, not replaced in its dict
    ("ssl", "SSLContext", "wrap_socket"),
    ("json.encoder", "JSONEncoder", "iterencode"),
    ("polars.dataframe.frame", "DataFrame", "write_parquet"),
    ("polars.lazyframe.frame", "LazyFrame", "collect"),
    ("rich.console", "Console", "print"),
    ("fsspec.implementations.local", "LocalFileSystem", "open"),  # inherited from AbstractFileSystem
    ("pydantic.main", "BaseModel", "model_validate"),
]


def _state() -> dict[str, object]:
    from alflow.plugin_probe import _WATCHED_LIBRARIES, _WATCHED_SUBMODULES, _interpreter_state

    for name in (*_WATCHED_LIBRARIES, *_WATCHED_SUBMODULES):  # as the probe's child loads them first
        importlib.import_module(name)
    return _interpreter_state()


@pytest.mark.parametrize(("module", "owner", "attr"), REPORTED, ids=[f"{m}.{o}.{a}" for m, o, a in REPORTED])
def test_a_patched_class_method_the_report_named_is_seen(
    module: str, owner: str, attr: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each plugin of the report: the probe names the method it replaced, by where its class is defined."""
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
        if isinstance(v, type) and v.__module__.partition(".")[0] == library and not v.__flags__ & (1 << 8)
    }
    return sorted(found.values(), key=lambda c: f"{c.__module__}.{c.__qualname__}")


def _watched() -> tuple[str, ...]:
    from alflow.plugin_probe import _WATCHED_LIBRARIES

    return _WATCHED_LIBRARIES


@pytest.mark.parametrize(
    "library", ["socket", "ssl", "json", "polars", "fsspec", "rich", "numpy", "pydantic"]
)
def test_every_watched_library_s_class_methods_are_watched(
    library: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The class of input: in each library, a method replaced on a class and one set over an inherited one."""
    from alflow.plugin_probe import _changes

    assert library in _watched()
    before = _state()
    classes = [c for c in _classes_of(library) if any(callable(v) for v in vars(c).values())]
    assert classes, library
    cls = classes[len(classes) // 2]
    own = sorted(a for a, v in vars(cls).items() if callable(v))[0]
    monkeypatch.setattr(cls, own, lambda *a, **k: None)
    monkeypatch.setattr(cls, "__r15_added__", lambda *a, **k: None, raising=False)
    where = f"{cls.__module__}.{cls.__qualname__}"
    assert _changes(before, _state()) == [f"{where}.{own}", f"{where}.__r15_added__"]


def test_a_deleted_method_is_named_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A method deleted (its inherited one takes its place) is one name, not two."""
    from alflow.plugin_probe import _changes

    encoder = importlib.import_module("json.encoder").JSONEncoder
    before = _state()
    monkeypatch.delattr(encoder, "default")
    assert _changes(before, _state()) == ["json.encoder.JSONEncoder.default"]


def test_what_a_clean_plugin_does_changes_nothing() -> None:
    """A plugin's own pydantic model, a polars frame written and JSON encoded: no watched method changes."""
    import io
    import json

    import polars as pl
    from pydantic import BaseModel

    from alflow.plugin_probe import _changes

    before = _state()

    class Server(BaseModel):
        port: int = 1

    Server.model_validate({"port": 2})
    pl.DataFrame({"a": [1]}).lazy().collect().write_parquet(io.BytesIO())
    json.dumps({"a": Server().model_dump()})
    assert _changes(before, _state()) == []


def test_every_submodule_loaded_first_is_of_a_watched_library() -> None:
    """The modules loaded before the plugin are the watched libraries' (each importable: none silently missing)."""
    from alflow.plugin_probe import _WATCHED_LIBRARIES, _WATCHED_SUBMODULES

    for name in _WATCHED_SUBMODULES:
        assert name.partition(".")[0] in _WATCHED_LIBRARIES
        importlib.import_module(name)


def test_the_state_stays_cheap() -> None:
    """Taking the state twice (before and after the plugin) stays well under the 0.3 s the child waits anyway."""
    from alflow.plugin_probe import _interpreter_state

    _state()
    started = time.perf_counter()
    _interpreter_state()
    assert time.perf_counter() - started < 1.0
