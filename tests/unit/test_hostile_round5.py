"""Hostile round 5 (issue #49): each case that broke, mended at its class, checked here."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from alflow import plugins
from alflow.methods.regression import THROUGHPUT, HistoryRun, judge_point, not_comparable
from alflow.results import store, view
from alflow.results.catalog import Catalog
from alflow.results.store import StoreError, open_run
from tests.unit.test_catalog import key, point, write_run
from tests.unit.test_regression import KEY, SETTINGS, _point, _runs
from tests.unit.test_site import M2, make_root

pytestmark = pytest.mark.unit


def test_a_runs_json_files_are_read_once_however_many_points_ask(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A report of 1,000 points took 16 s: every point re-read summary.json (quadratic)."""
    run = open_run(make_root(tmp_path) / M2)
    reads: list[str] = []
    real = store._read_json
    monkeypatch.setattr(store, "_read_json", lambda s, p: reads.append(p) or real(s, p))
    for _ in range(50):
        view.scheme(run)
    assert len(reads) == 1


def test_a_run_of_more_points_than_any_measures_is_unreadable_not_a_stalled_root(tmp_path: Path) -> None:
    """A spec_stats of 1,000,000 rows held the whole root's catalogue refresh for a minute."""
    root = make_root(tmp_path)
    path = root / M2 / "spec_stats.parquet"
    frame, metadata = pl.read_parquet(path), pl.read_parquet_metadata(path)
    pl.concat([frame] * (view.max_points("m2") + 1)).write_parquet(path, metadata=metadata)
    with pytest.raises(StoreError, match="more than 1,000 points"):
        view.m2_points(open_run(root / M2))
    entry = Catalog(str(root), min_refresh_s=0).get(M2)
    assert entry is not None
    assert entry.status == "unreadable"


def test_a_requests_table_without_a_column_alflow_writes_reads_it_as_nulls(tmp_path: Path) -> None:
    """A requests.parquet without chunk_ns gave a traceback on its run's page and refused its whole report."""
    root = make_root(tmp_path)
    path = root / M2 / "requests.parquet"
    metadata = pl.read_parquet_metadata(path)
    pl.read_parquet(path).drop("chunk_ns").write_parquet(path, metadata=metadata)
    table = open_run(root / M2).table("requests")
    assert table["chunk_ns"].null_count() == table.height
    from alflow.reports.render import render_run

    assert "<html" in render_run(str(root / M2)).lower()


def test_a_history_point_valid_with_an_impossible_al_is_no_history(tmp_path: Path) -> None:
    for al in (99.0, float("nan"), 0.5):
        write_run(tmp_path, "2026-01-01T00:00:00+00:00", points=[point(4, achieved_al=al)])
    good = write_run(tmp_path, "2026-01-02T00:00:00+00:00")
    got = Catalog(str(tmp_path)).history(key(), before="2026-02-01T00:00:00+00:00", n=10)
    assert [e.rel for e, _ in got] == [f"m2/{good.name}"]


def test_a_history_run_whose_every_request_lacks_a_metric_does_not_count_toward_min_history() -> None:
    """One run of one-token requests (no TPOT, no rate) counted, so min_history=2 was met by one real run."""
    nulls = pl.DataFrame(
        {"tpot_ms": [None] * 50, "tokens_per_s_per_request": [None] * 50},
        schema={"tpot_ms": pl.Float64, "tokens_per_s_per_request": pl.Float64},
    )
    history = [HistoryRun(f"m2/r{i}", (_point(),), f) for i, f in enumerate([*_runs(12, 2, 200), nulls])]
    settings = SETTINGS.model_copy(update={"min_history": 3})
    got = judge_point(KEY, _point(), _runs(13, 1, 200)[0], history, settings)
    assert got.outcome == "not enough history"
    assert got.message.startswith("2 good history run(s)")


def test_a_request_of_decades_is_an_impossible_rate() -> None:
    """Two history runs of 31-year requests judged a normal run "improved +8e12 %"."""
    tiny = pl.Series([3e-17] * 50)
    why = not_comparable(THROUGHPUT, pl.Series([100.0] * 50), tiny)
    assert why is not None
    assert "50 of 50 values impossible in the history" in why


def test_a_plugins_reason_is_printable_redacted_and_never_raises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "str_raises_alflow.py").write_text(
        "class E(Exception):\n    def __str__(self):\n        raise ValueError('no')\nraise E()\n"
    )
    (tmp_path / "secret_alflow.py").write_text(
        "raise RuntimeError('pip https://user:Pw-Canary-16@mirror.example/simple \\x1b[2J\\u202eevil')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(plugins.PluginError, match=r"E \(its message cannot be read\)"):
        plugins.resolve_within("str_raises_alflow:SPEC", "entry point 'e'", seconds=5)
    with pytest.raises(plugins.PluginError) as info:
        plugins.resolve_within("secret_alflow:SPEC", "entry point 's'", seconds=5)
    text = str(info.value)
    assert "Canary-16" not in text
    assert "\x1b" not in text
    assert "\u202e" not in text


def test_a_history_whose_resampled_median_can_be_zero_gives_no_verdict() -> None:
    """Fault suite: one zero-TPOT history run of three gave "unchanged, [-5 %, +inf %]": TPOT could never regress."""
    normal = _runs(12, 2, 200)
    zeros = normal[0].with_columns(pl.lit(0.0).alias("tpot_ms"))
    history = [HistoryRun(f"m2/r{i}", (_point(),), f) for i, f in enumerate([zeros, *normal])]
    got = judge_point(KEY, _point(), _runs(13, 1, 200)[0], history, SETTINGS)
    assert got.outcome == "not compared"
    assert "tpot_ms: the history's resampled median is 0 in some draws" in got.message
