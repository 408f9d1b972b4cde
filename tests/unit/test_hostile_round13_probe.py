"""Hostile round 13 of issue #49: the plugin probe sees alflow's values (not functions) rebound or changed in place.

R13-5: a plugin rebound ``alflow.util.redact._ASSIGNED_HINTS`` (a tuple) and ``_TOKEN_HINTS`` and cleared
``alflow.site.guard.HEADERS`` in place; the probe compared only callables, listed the plugin as clean, and every
secret in free text was printed and stored once it loaded.
"""

from __future__ import annotations

import re
import sys
import time
import types

import pytest

pytestmark = pytest.mark.unit


def _changed(before: dict[str, object], after: dict[str, object]) -> list[str]:
    """What the probe's child names (as :func:`alflow.plugin_probe._child` compares)."""
    return [name for name, value in before.items() if after.get(name) != value]


@pytest.fixture
def values(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """A module of alflow's holding one value of each kind, as an imported alflow module is seen."""
    module = types.ModuleType("alflow._r13_values")
    module.HINTS = ("token=", "key=")  # type: ignore[attr-defined]
    module.WORDS = frozenset({"TOKEN", "KEY"})  # type: ignore[attr-defined]
    module.PATTERN = re.compile(r"sk-[a-z]+")  # type: ignore[attr-defined]
    module.POLICY = "default-src 'none'"  # type: ignore[attr-defined]
    module.LIMIT = 2_000  # type: ignore[attr-defined]
    module.JSON = sys.modules["json"]  # type: ignore[attr-defined]
    module.HEADERS = {"Content-Security-Policy": "default-src 'none'", "X-Frame-Options": "DENY"}  # type: ignore[attr-defined]
    module.ORDER = ["a", "b"]  # type: ignore[attr-defined]
    module.NAMES = {"a", "b"}  # type: ignore[attr-defined]
    module.RAW = bytearray(b"abc")  # type: ignore[attr-defined]
    module.NESTED = {"vllm": {"rate": 0.5}, "rows": (["x"],)}  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return module


REBOUND = {
    "HINTS": ("\x00",),
    "WORDS": frozenset(),
    "PATTERN": re.compile("(?!)"),
    "POLICY": "",
    "LIMIT": 10**9,
    "JSON": types.ModuleType("json"),
    "HEADERS": {},
}


@pytest.mark.parametrize("attr", sorted(REBOUND))
def test_a_rebound_value_of_alflow_is_named(
    attr: str, values: types.ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tuple, a frozenset, a compiled regex, a string, an int, a module or a dict put in a value's place is seen."""
    from alflow.plugin_probe import _interpreter_state

    before = _interpreter_state()
    monkeypatch.setattr(values, attr, REBOUND[attr])
    assert _changed(before, _interpreter_state()) == [f"alflow._r13_values.{attr}"]


def _clear(m: types.ModuleType) -> None:
    m.HEADERS.clear()


def _replace_header(m: types.ModuleType) -> None:
    m.HEADERS["Content-Security-Policy"] = "default-src *"


def _append(m: types.ModuleType) -> None:
    m.ORDER.append("c")


def _reorder(m: types.ModuleType) -> None:
    m.ORDER.reverse()


def _add(m: types.ModuleType) -> None:
    m.NAMES.add("c")


def _discard(m: types.ModuleType) -> None:
    m.NAMES.discard("a")


def _overwrite(m: types.ModuleType) -> None:
    m.RAW[0] = 0


def _nested(m: types.ModuleType) -> None:
    m.NESTED["vllm"]["rate"] = 1.0


def _nested_in_tuple(m: types.ModuleType) -> None:
    m.NESTED["rows"][0].append("y")


IN_PLACE = {
    "HEADERS": (_clear, _replace_header),
    "ORDER": (_append, _reorder),
    "NAMES": (_add, _discard),
    "RAW": (_overwrite,),
    "NESTED": (_nested, _nested_in_tuple),
}


@pytest.mark.parametrize(
    ("attr", "change"), [(attr, change) for attr, changes in IN_PLACE.items() for change in changes]
)
def test_a_value_of_alflow_changed_in_place_is_named(
    attr: str, change: object, values: types.ModuleType
) -> None:
    """A dict cleared or given another value, a list grown or reordered, a set, a bytearray, a nested table."""
    from alflow.plugin_probe import _interpreter_state

    before = _interpreter_state()
    change(values)  # type: ignore[operator]
    assert _changed(before, _interpreter_state()) == [f"alflow._r13_values.{attr}"]


def test_the_real_redaction_hints_and_security_headers_are_watched(monkeypatch: pytest.MonkeyPatch) -> None:
    """The values of the report: the redaction prefilters rebound, the site's headers cleared."""
    import alflow.site.guard as guard
    import alflow.util.redact as redact
    from alflow.plugin_probe import _interpreter_state

    before = _interpreter_state()
    monkeypatch.setattr(redact, "_ASSIGNED_HINTS", ("\x00",))
    monkeypatch.setattr(redact, "_TOKEN_HINTS", ("\x00",))
    monkeypatch.delitem(guard.HEADERS, "Content-Security-Policy")
    changed = _changed(before, _interpreter_state())
    assert sorted(changed) == [
        "alflow.site.guard.HEADERS",
        "alflow.util.redact._ASSIGNED_HINTS",
        "alflow.util.redact._TOKEN_HINTS",
    ]


def test_using_alflow_changes_nothing_the_probe_watches(values: types.ModuleType) -> None:
    """A plugin that only uses alflow (redacts, reads the tables, stores a row) is not blamed."""
    import dataclasses

    from alflow.plugin_probe import _interpreter_state
    from alflow.util.redact import redact_urls_in_text
    from alflow.util.rows import dump_row

    @dataclasses.dataclass
    class Row:
        a: int

    before = _interpreter_state()
    redact_urls_in_text("http://u:pw@h/ token=abc sk-abcdefghijklmnopqrstuvwxyz")
    dump_row(Row(1))  # fills alflow.util.rows' cache of adapters
    _ = values.HEADERS["X-Frame-Options"], list(values.NAMES), values.PATTERN.search("sk-x")
    assert _changed(before, _interpreter_state()) == []


def test_a_large_or_cyclic_value_costs_little(values: types.ModuleType) -> None:
    """The contents are read by identity, bounded: a 2,000,000-item list or a list holding itself is quick."""
    from alflow.plugin_probe import _interpreter_state

    values.BIG = list(range(2_000_000))  # type: ignore[attr-defined]
    values.LOOP = []  # type: ignore[attr-defined]
    values.LOOP.append(values.LOOP)  # type: ignore[attr-defined]
    values.MAP = {i: str(i) for i in range(200_000)}  # type: ignore[attr-defined]
    start = time.perf_counter()
    before = _interpreter_state()
    assert time.perf_counter() - start < 2.0
    values.LOOP.append(1)  # type: ignore[attr-defined]
    assert _changed(before, _interpreter_state()) == ["alflow._r13_values.LOOP"]
