"""Hostile round 17 (issue #49): F3, the points table (``spec_stats.parquet`` of an M2 or sweep run) read with no check,
and M4, a ``requests.parquet`` column of the right kind but the wrong type.

F3: K=0 with AL 3.27, concurrency -4 or 2^62, TPOT -5 ms, throughput -1e300, the same points twice were shown as
"All N point(s) valid", ``passed`` and trended; a ``valid`` of integers or an ``achieved_al`` struct made the run
"store no benchmark points". Now every such table makes its run ``unreadable`` with one line of reason in the
catalogue, the site and ``alflow report``, and no trend line. M4: ``warmup`` of integers, ``start_ns`` or
``chunk_ns`` of booleans failed inside polars without naming the column or the file.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from alflow.cli import app
from alflow.results.catalog import Catalog, read_entry
from alflow.results.point_table import checked_points, point_problem
from alflow.results.rows import M2Point
from alflow.results.store import PARQUET_VERSION_KEY, StoreError, open_run
from alflow.results.view import m2_points
from tests.unit.test_site import M2, make_root, serving

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "runs"
SWEEP = "sweep/20261205T060358Z-5ed2cc0a0ccf"
META = {PARQUET_VERSION_KEY: "1"}

Shape = Callable[[pl.DataFrame], pl.DataFrame]
BAD_POINTS: dict[str, tuple[Shape, str]] = {
    "k-zero": (lambda f: f.with_columns(pl.lit(0).alias("k")), "column k holds 0"),
    "k-99": (lambda f: f.with_columns(pl.lit(99).alias("k")), "column k holds 99"),
    "al-above-k-plus-1": (
        lambda f: f.with_columns(pl.lit(1).alias("k")),  # AL 3.3 at K=1
        "column target_al holds",
    ),
    "achieved-al-nan": (
        lambda f: f.with_columns(pl.lit(float("nan")).alias("achieved_al")),
        "column achieved_al",
    ),
    "concurrency-negative": (
        lambda f: f.with_columns(pl.lit(-4).alias("concurrency")),
        "concurrency holds -4",
    ),
    "concurrency-2^62": (
        lambda f: f.with_columns(pl.lit(2**62).alias("concurrency")),
        "concurrency holds 46116",
    ),
    "concurrency-uint64-max": (
        lambda f: f.with_columns(pl.lit(2**64 - 1, dtype=pl.UInt64).alias("concurrency")),
        "concurrency holds",
    ),
    "tpot-negative": (
        lambda f: f.with_columns(pl.lit(-5.0).alias("median_tpot_ms")),
        "median_tpot_ms holds -5.0",
    ),
    "throughput-minus-1e300": (
        lambda f: f.with_columns(pl.lit(-1e300).alias("output_throughput_per_gpu")),
        "output_throughput_per_gpu holds -1e+300",
    ),
    "throughput-inf": (
        lambda f: f.with_columns(pl.lit(float("inf")).alias("output_throughput")),
        "holds inf",
    ),
    "duplicated-rows": (lambda f: pl.concat([f, f]), "are the same point"),
    "repeat-negative": (lambda f: f.with_columns(pl.lit(-1).alias("repeat")), "column repeat holds -1"),
    "repeat-float": (lambda f: f.with_columns(pl.lit(0.5).alias("repeat")), "column repeat holds Float64"),
    "valid-int": (lambda f: f.with_columns(pl.lit(7).alias("valid")), "column valid holds Int32"),
    "achieved-al-struct": (
        lambda f: f.with_columns(pl.struct(a=pl.lit(1)).alias("achieved_al")),
        "column achieved_al holds Struct",
    ),
    "k-text": (lambda f: f.with_columns(pl.lit("3").alias("k")), "column k holds String"),
    "concurrency-null": (
        lambda f: f.with_columns(pl.lit(None, dtype=pl.Int64).alias("concurrency")),
        "column concurrency is empty",
    ),
    "no-k-column": (lambda f: f.drop("k"), "no column k"),
    "completed-negative": (
        lambda f: f.with_columns(pl.lit(-2).alias("completed")),
        "column completed holds -2",
    ),
    "histogram-negative": (
        lambda f: f.with_columns(pl.lit([5, -1, 3, 2]).alias("histogram_observed")),
        "column histogram_observed holds -1",
    ),
}


def _write_points(run: Path, shape: Shape) -> None:
    table = run / "spec_stats.parquet"
    shape(pl.read_parquet(table)).write_parquet(table, metadata=META)


def _bad_run(root: Path, name: str, rel: str = M2) -> str:
    """A copy of the fixture run ``rel`` whose points table is ``BAD_POINTS[name]`` (its rel)."""
    flow, name_of_run = rel.split("/", 1)
    stamp = name_of_run[:16]
    new = f"{flow}/{stamp}-bad{sorted(BAD_POINTS).index(name):03d}"
    shutil.copytree(root / rel, root / new)
    _write_points(root / new, BAD_POINTS[name][0])
    return new


@pytest.mark.parametrize("name", sorted(BAD_POINTS))
def test_an_impossible_points_table_makes_its_run_unreadable_with_the_reason(
    tmp_path: Path, name: str
) -> None:
    root = make_root(tmp_path)
    rel = _bad_run(root, name)
    entry = read_entry(rel, str(root / rel))
    assert entry.status == entry.outcome == "unreadable", entry
    assert entry.points == ()  # never trended
    assert entry.problem is not None
    assert BAD_POINTS[name][1] in entry.problem, entry.problem
    assert f"{rel}/spec_stats.parquet" in entry.problem
    assert str(root) not in entry.problem
    assert "\n" not in entry.problem
    with pytest.raises(StoreError, match=r"spec_stats\.parquet"):
        m2_points(open_run(root / rel))


@pytest.mark.parametrize("name", ["k-zero", "valid-int", "duplicated-rows", "throughput-minus-1e300"])
@pytest.mark.parametrize("fmt", ["md", "html", "csv"])
def test_report_show_of_an_impossible_points_table_is_one_line_exit_2(
    tmp_path: Path, name: str, fmt: str
) -> None:
    root = make_root(tmp_path)
    rel = _bad_run(root, name)
    out = tmp_path / f"out.{fmt}"
    ran = CliRunner().invoke(app, ["report", "show", str(root / rel), "-f", fmt, "-o", str(out)])
    assert ran.exit_code == 2, ran.output
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1, ran.stderr
    assert lines[0].startswith(f"error: {root / rel}/spec_stats.parquet"), lines
    assert BAD_POINTS[name][1] in lines[0]
    assert "valid" not in ran.stdout
    assert not out.exists()


def test_a_sweep_with_an_impossible_points_table_is_unreadable_and_refused(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    rel = _bad_run(root, "k-zero", SWEEP)
    entry = read_entry(rel, str(root / rel))
    assert entry.status == "unreadable"
    assert "column k holds 0" in (entry.problem or "")
    ran = CliRunner().invoke(app, ["report", "k-schedule", str(root / rel)])
    assert ran.exit_code == 2
    assert "column k holds 0" in ran.output


def test_summary_points_of_a_run_without_its_table_are_checked_the_same(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    rel = _bad_run(root, "k-zero")
    run = root / rel
    manifest = json.loads((run / "manifest.json").read_text())
    del manifest["files"]["spec_stats.parquet"]
    (run / "manifest.json").write_text(json.dumps(manifest))
    summary = json.loads((run / "summary.json").read_text())
    summary["points"][1]["k"] = 0
    (run / "summary.json").write_text(json.dumps(summary))
    entry = read_entry(rel, str(run))
    assert entry.status == "unreadable"
    assert "summary.json points: row 2: column k holds 0" in (entry.problem or "")


def test_a_points_table_that_cannot_be_read_is_that_reason_not_no_points(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    rel = _bad_run(root, "k-zero")
    (root / rel / "spec_stats.parquet").write_bytes(b"not parquet")
    entry = read_entry(rel, str(root / rel))
    assert entry.status == "unreadable"
    assert "not a readable parquet file" in (entry.problem or "")
    ran = CliRunner().invoke(app, ["report", "show", str(root / rel), "-f", "md"])
    assert ran.exit_code == 2
    assert "stored no benchmark points" not in ran.output
    assert "not a readable parquet file" in ran.stderr


async def test_the_site_neither_lists_as_passed_nor_trends_an_impossible_points_table(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    bad = {_bad_run(root, name) for name in BAD_POINTS}
    async with serving(root) as site:
        runs = {r["rel"]: r for r in json.loads((await site.get("/api/runs")).body)["rows"]}
        assert {runs[rel]["outcome"] for rel in bad} == {"unreadable"}
        trends = json.loads((await site.get("/api/trends")).body)
        assert set(trends["choices"]["ks"]) == {3}
        assert set(trends["choices"]["concurrencies"]) == {4, 8, 16}
        drawn = {p["rel"] for s in trends["series"] for p in s["points"]}
        assert not drawn & bad
        for rel in sorted(bad)[:3]:  # an unreadable run's page: 404 with the reason
            page = await site.get(f"/runs/{rel}/")
            assert page.status == 404
            assert f"{rel}/spec_stats.parquet" in page.text
            assert "All 3 point(s) valid" not in page.text


def test_every_points_table_of_a_previous_release_passes_the_check(tmp_path: Path) -> None:
    runs = sorted(
        p.parent for p in FIXTURES.glob("*/*/*/manifest.json") if p.parent.parent.name in ("m2", "sweep")
    )
    assert len(runs) == 4
    for stored in runs:
        copy = tmp_path / stored.parents[1].name / stored.parent.name / stored.name
        shutil.copytree(stored, copy)
        points = m2_points(open_run(copy))
        assert points
        assert all(point_problem(p) is None for p in points)
        entry = read_entry(f"{stored.parent.name}/{stored.name}", str(copy))
        assert entry.status == "complete", entry.problem


def test_what_alflow_stores_passes_and_the_bounds_are_named() -> None:
    good = {"concurrency": 4, "k": 3, "target_al": 2.5, "achieved_al": 4.0, "repeat": 0}
    inf_interactivity = {**good, "median_interactivity_tokens_per_s": float("inf")}  # 1 / TPOT at TPOT 0
    assert (
        len(
            checked_points(
                "t", [good, {**good, "repeat": 1}, {**inf_interactivity, "concurrency": 8}], flow="m2"
            )
        )
        == 3
    )
    for field, value, says in [
        ("achieved_al", 4.1, "K + 1 = 4"),
        ("achieved_al", 0.5, "[1, K + 1 = 4]"),
        ("concurrency", 65_537, "[1, 65,536]"),
        ("repeat", 100, "[0, 99]"),
        ("fit_p_value", 1.5, "[0, 1]"),
        ("nodes", 0, "[1, 4,096]"),
        ("median_itl_ms", float("nan"), "finite"),
    ]:
        problem = point_problem(M2Point.model_validate({**good, field: value}))
        assert problem is not None
        assert problem.startswith(f"column {field} holds"), problem
        assert says in problem, problem


def test_the_catalogue_cache_of_an_older_version_is_not_used(tmp_path: Path) -> None:
    from alflow.results import catalog

    assert catalog.CACHE_VERSION >= 8  # entries of version 7 listed impossible points as passed


# --------------------------------------------------------------------------------------------
# M4: requests.parquet of the right kind, the wrong type

BAD_REQUESTS: dict[str, Shape] = {
    "warmup": lambda f: f.with_columns(pl.col("warmup").cast(pl.Int32)),
    "start_ns": lambda f: f.with_columns((pl.col("start_ns") > 0).alias("start_ns")),
    "chunk_ns": lambda f: f.with_columns(pl.col("chunk_ns").list.eval(pl.element() > 0)),
    "error": lambda f: f.with_columns(pl.col("error").cast(pl.Categorical)),
    "concurrency": lambda f: f.with_columns(pl.col("concurrency").cast(pl.String)),
}


@pytest.mark.parametrize("column", sorted(BAD_REQUESTS))
def test_a_requests_column_of_the_wrong_type_is_named_with_its_file(tmp_path: Path, column: str) -> None:
    root = make_root(tmp_path)
    table = root / M2 / "requests.parquet"
    BAD_REQUESTS[column](pl.read_parquet(table)).write_parquet(table, metadata=META)
    with pytest.raises(StoreError) as caught:
        open_run(root / M2).table("requests")
    message = str(caught.value)
    assert message.startswith(f"{table}: column {column} holds"), message
    assert "alflow writes" in message, message
    ran = CliRunner().invoke(app, ["report", "show", str(root / M2), "-f", "csv"])
    assert ran.exit_code == 2, ran.output
    assert ran.stderr.strip().splitlines() == [ran.stderr.strip()]
    assert f"{table}: column {column} holds" in ran.stderr
    assert "predicate" not in ran.stderr
    md = CliRunner().invoke(app, ["report", "show", str(root / M2), "-f", "md"])  # what survived, one warning
    assert md.exit_code == 0
    assert f"column {column} holds" in md.stderr
    assert "Traceback" not in md.output


def test_a_requests_integer_column_of_another_width_reads_as_alflow_writes_it(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    table = root / M2 / "requests.parquet"
    frame = pl.read_parquet(table)
    frame.with_columns(pl.col("start_ns").cast(pl.UInt64), pl.col("turn").cast(pl.Int64)).write_parquet(
        table, metadata=META
    )
    read = open_run(root / M2).table("requests")
    assert read.schema["start_ns"] == pl.Int64
    assert read.schema["turn"] == pl.Int32
    assert read["start_ns"].to_list() == frame["start_ns"].to_list()
    big = frame.with_columns(pl.lit(2**64 - 1, dtype=pl.UInt64).alias("end_ns"))
    big.write_parquet(table, metadata=META)
    with pytest.raises(StoreError, match=r"column\(s\) end_ns hold integers beyond"):
        open_run(root / M2).table("requests")


def test_the_catalogue_over_every_bad_shape_still_reads_the_good_runs(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    for name in BAD_POINTS:
        _bad_run(root, name)
    catalog = Catalog(str(root), min_refresh_s=0)
    assert catalog.get(M2) is not None
    assert catalog.get(M2).status == "complete"
    assert {k.k for k in catalog.series_keys()} == {3}
