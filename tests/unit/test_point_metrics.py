"""Each client figure of an M2 point is declared once (alflow.metrics.point_metrics) and read from there."""

from __future__ import annotations

import pytest

from alflow.methods.points import M2Point
from alflow.metrics.client import LatencyStats
from alflow.metrics.point_metrics import P90_ITL, POINT_METRICS, point_values
from alflow.reports.content.m1 import _client_section
from alflow.reports.content.m2 import points_table
from alflow.site.pages import METRICS
from tests.unit.test_points import _client

pytestmark = pytest.mark.unit

ITL = LatencyStats(10.0, 9.0, 2.0, ((50.0, 9.0), (90.0, 14.5), (99.0, 20.0)))


def _row(**figures: float | None) -> M2Point:
    return M2Point(concurrency=4, k=3, target_al=2.5, framework="sim", valid=True, metrics=figures)


def test_every_declared_figure_is_a_stored_column_computed_by_its_formula_and_read_back() -> None:
    client = _client(itl=ITL)
    values = point_values(client)
    assert list(values) == [m.name for m in POINT_METRICS]
    assert values[P90_ITL.name] == 14.5  # the formula: the ITL's 90th percentile
    assert values["median_tpot_ms"] == 12.5
    assert values["output_throughput_per_gpu"] == 256.0
    point = _row(**values)
    row = point.model_dump()
    assert {m.name: row[m.name] for m in POINT_METRICS} == values  # one flat column each
    assert "metrics" not in row
    assert M2Point.model_validate(row) == point


def test_a_row_stored_before_a_figure_was_declared_reads_it_as_none() -> None:
    row = _row(**point_values(_client(itl=ITL))).model_dump()
    del row[P90_ITL.name]
    old = M2Point.model_validate(row)
    assert old.value(P90_ITL) is None
    assert old.value(POINT_METRICS[0]) == 512.0


def test_the_reports_and_the_site_show_the_declared_figures_by_their_display_name() -> None:
    table = points_table([_row(**point_values(_client(itl=ITL)))])
    shown = [m for m in POINT_METRICS if m.table]
    assert P90_ITL in shown
    assert table.columns[3 : 3 + len(shown)] == [m.heading for m in shown]
    assert table.rows[0][table.columns.index("p90 ITL ms")] == "14.50"
    client = {"completed": 8, "p90_itl_ms": 14.5, "median_tpot_ms": 12.5}
    (section,) = _client_section(client).tables
    assert ["p90 ITL ms", "14.50"] in [list(r) for r in section.rows]
    assert [name for name, _, _ in METRICS] == [
        *(m.name for m in POINT_METRICS if m.trend),
        "achieved_al",
    ]
