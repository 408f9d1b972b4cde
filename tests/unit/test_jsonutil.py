"""Strict JSON: non-finite numbers become null with the reason beside them, never NaN/Infinity."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from alflow.util.jsonutil import dumps, dumps_bytes, finite, note_nonfinite

pytestmark = pytest.mark.unit


def _strict_loads(text: str) -> Any:
    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_fields_become_null_with_a_note_beside_them() -> None:
    data = {"al": math.inf, "rate": -math.inf, "p": math.nan, "ok": 1.5, "n": 3, "name": "x"}
    assert finite(data) == {
        "al": None,
        "al_note": "not finite: inf",
        "rate": None,
        "rate_note": "not finite: -inf",
        "p": None,
        "p_note": "not finite: nan",
        "ok": 1.5,
        "n": 3,
        "name": "x",
    }


def test_list_elements_are_noted_on_the_field_holding_the_list() -> None:
    data = {"rates": (0.5, math.nan, [1.0, math.inf]), "rows": [{"x": math.inf}]}
    out = finite(data)
    assert out["rates"] == [0.5, None, [1.0, None]]
    assert out["rates_note"] == "not finite at [1]: nan, [2][1]: inf"
    assert out["rows"] == [{"x": None, "x_note": "not finite: inf"}]
    assert "rows_note" not in out


def test_a_producers_reason_wins_over_the_generic_note() -> None:
    data: dict[str, Any] = {"al": math.inf, "speedup": math.nan}
    note_nonfinite(data, "no draft steps", ["al"])
    assert finite(data) == {
        "al": None,
        "al_note": "not finite: no draft steps",
        "speedup": None,
        "speedup_note": "not finite: nan",
    }


def test_top_level_values_and_unknown_types() -> None:
    assert finite(math.inf) is None
    assert finite([math.nan, 1]) == [None, 1]
    assert _strict_loads(dumps({"path": Path("/x"), "k": {3: 1.0}})) == {"path": "/x", "k": {"3": 1.0}}
    assert dumps_bytes({"a": 1}, indent=None) == b'{"a": 1}\n'


_leaf = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=5))
_tree = st.recursive(
    _leaf,
    lambda kids: st.one_of(
        st.lists(kids, max_size=4),
        st.tuples(kids, kids),
        st.dictionaries(st.text(max_size=4), kids, max_size=4),
    ),
    max_leaves=20,
)


@given(_tree)
def test_any_data_gives_strict_json_and_keeps_finite_numbers(data: Any) -> None:
    back = _strict_loads(dumps(data))

    def same(a: Any, b: Any) -> None:
        if isinstance(a, float) and not math.isfinite(a):
            assert b is None
        elif isinstance(a, dict):
            for key, value in a.items():
                same(value, b[key])
        elif isinstance(a, list | tuple):
            assert len(a) == len(b)
            for x, y in zip(a, b, strict=True):
                same(x, y)
        else:
            assert a == b

    same(data, back)


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_the_cli_json_output_is_strict(value: float, capsys: pytest.CaptureFixture[str]) -> None:
    from alflow.cli.common import emit_json

    emit_json({"x": value})
    assert _strict_loads(capsys.readouterr().out) == {"x": None, "x_note": f"not finite: {_word(value)}"}


def _word(x: float) -> str:
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
