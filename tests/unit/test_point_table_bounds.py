"""The points table's bound is the flow's (review of #49): every table alflow can write is read, one past it is not.

The reader refused any table of more than 10,000 points, but a sweep stores one M2 run per K (each K once, up to 16)
and an M2 run stops at 1,000 points: 11 Ks x 10 concurrencies x 100 repeats (11,000 points, a sweep alflow writes)
was "unreadable". Now an M2 run is read up to :data:`RUN_MAX_POINTS`, a sweep up to 16 x that.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from alflow.acceptance.synthetic import K_MAX, K_MIN
from alflow.methods import m2
from alflow.results import point_table, view
from alflow.results.point_table import (
    MAX_POINTS,
    RUN_MAX_POINTS,
    PointTableError,
    checked_point_table,
    checked_points,
)
from alflow.results.rows import M2Point
from alflow.results.store import open_run

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "ab3cdad"
SWEEP = "sweep/20261207T175931Z-93ae634c684d"


def _points(ks: int, concurrencies: int, repeats: int) -> pl.DataFrame:
    """A sweep's points table as alflow writes it: ``ks`` Ks, each at ``concurrencies`` x ``repeats`` points."""
    row: dict[str, Any] = pl.read_parquet(FIXTURES / SWEEP / "spec_stats.parquet").row(0, named=True)
    return pl.DataFrame(
        [
            {**row, "k": k, "concurrency": c, "repeat": r}
            for k in range(K_MIN, K_MIN + ks)
            for c in range(1, concurrencies + 1)
            for r in range(repeats)
        ]
    )


def test_the_bounds_are_what_alflow_writes() -> None:
    assert m2.MAX_POINTS == RUN_MAX_POINTS == MAX_POINTS["m2"] == 1_000  # an M2 run stops there
    assert (
        MAX_POINTS["sweep"] == (K_MAX - K_MIN + 1) * RUN_MAX_POINTS == 16_000
    )  # one M2 run per K, each K once


def test_a_sweep_of_11_ks_x_10_concurrencies_x_100_repeats_is_read(tmp_path: Path) -> None:
    root = tmp_path / "results"
    shutil.copytree(FIXTURES, root)
    path = root / SWEEP / "spec_stats.parquet"
    metadata = pl.read_parquet_metadata(path)
    _points(11, 10, 100).write_parquet(path, metadata=metadata)
    assert len(view.m2_points(open_run(root / SWEEP))) == 11_000


def test_the_largest_sweep_is_read_and_one_point_more_is_refused() -> None:
    largest = _points(K_MAX - K_MIN + 1, 10, 100)
    assert largest.height == MAX_POINTS["sweep"]
    assert len(checked_point_table("t", largest, "sweep")[1]) == 16_000
    with pytest.raises(
        PointTableError, match=r"^t: more than 16,000 points, not read \(sweep runs write at most"
    ):
        checked_point_table("t", pl.concat([largest, largest.head(1)]), "sweep")


def test_an_m2_run_is_read_to_its_own_bound_and_not_past_it() -> None:
    rows = _points(1, 10, 100)
    assert len(checked_point_table("t", rows, "m2")[1]) == 1_000
    more = pl.concat([rows, rows.head(1)])
    with pytest.raises(
        PointTableError, match=r"^t: more than 1,000 points, not read \(m2 runs write at most 1,000\)"
    ):
        checked_point_table("t", more, "m2")
    with pytest.raises(PointTableError, match="more than 1,000 points"):
        checked_points("summary.json points", list(more.iter_rows(named=True)), flow="m2", strict=False)


def test_a_points_table_is_checked_once_as_its_points_are_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``view.m2_points`` checked every row twice: once as the store read the table, once more itself."""
    root = tmp_path / "results"
    shutil.copytree(FIXTURES, root)
    checked: list[int] = []
    real = point_table.point_problem

    def counted(p: M2Point) -> str | None:
        checked.append(p.k)
        return real(p)

    monkeypatch.setattr(point_table, "point_problem", counted)
    points = view.m2_points(open_run(root / SWEEP))
    assert len(points) == 2
    assert len(checked) == 2
