"""One rule of which stored column types read as alflow's (review of #49): the points and the requests tables share it.

``store._record_dtype_fits`` (requests) and ``point_table._fits`` (points) were two copies of the rule; now both
tables use :func:`alflow.results.point_table.dtype_fits`.
"""

from __future__ import annotations

import polars as pl
import pytest

from alflow.results import point_table, store
from alflow.results.point_table import dtype_fits

pytestmark = pytest.mark.unit

CASES = [
    (pl.Int64(), pl.Int64(), True),
    (pl.Int32(), pl.Int64(), True),  # another width: cast, a value beyond it refused then
    (pl.UInt64(), pl.Int64(), True),
    (pl.Null(), pl.Boolean(), True),
    (pl.Float64(), pl.Int64(), False),
    (pl.String(), pl.Int64(), False),
    (pl.Int64(), pl.Float64(), True),  # an integer is a number
    (pl.Float32(), pl.Float64(), True),
    (pl.String(), pl.Float64(), False),
    (pl.Int64(), pl.Boolean(), False),  # a warmup or valid of integers
    (pl.Boolean(), pl.String(), False),
    (pl.List(pl.Int32()), pl.List(pl.Int64()), True),
    (pl.List(pl.String()), pl.List(pl.Int64()), False),
    (pl.Int64(), pl.List(pl.Int64()), False),
    (pl.Struct({"a": pl.Int64()}), pl.Float64(), False),
]


@pytest.mark.parametrize(("got", "expected", "fits"), CASES)
def test_the_rule(got: pl.DataType, expected: pl.DataType, fits: bool) -> None:
    assert dtype_fits(got, expected) is fits


def test_both_tables_use_the_one_rule() -> None:
    assert getattr(store, "dtype_fits") is point_table.dtype_fits  # noqa: B009 (not re-exported)
    assert not hasattr(store, "_record_dtype_fits")
    assert not hasattr(point_table, "_fits")
