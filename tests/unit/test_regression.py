"""Regression verdicts (alflow.methods.regression): the statistics, the rules, the stored model, the report."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from alflow.config import RegressionSettings, SpecMethod, ThinkingMode
from alflow.loadgen.frames import records_frame
from alflow.loadgen.records import RequestRecord
from alflow.methods.regression import (
    MIN_REQUESTS,
    HistoryRun,
    compare_metrics,
    gather_children,
    judge_point,
    judge_reference,
    judge_run,
    metric_outcome,
    root_and_rel,
)
from alflow.reference.table import ReferenceEntry, ReferenceTable
from alflow.reports.content.base import Report
from alflow.reports.content.regression import regression_section
from alflow.reports.render import render
from alflow.results.catalog import Catalog, read_verdicts
from alflow.results.regression import REGRESSION_FILE, MetricChange, PointVerdict, RegressionReport
from alflow.results.rows import M2Point
from alflow.results.series import SeriesKey
from alflow.results.store import RunWriter, open_run
from alflow.results.view import regression_report
from alflow.util.rows import dump_row
from alflow_tasks.regression import REGRESSION_EVENT, alert_event

pytestmark = pytest.mark.unit

SETTINGS = RegressionSettings(resamples=500)
KEY = SeriesKey("sim", "alflow-sim", "test-llama", 3, 4, "off", target_al="2.5000")


def _sample(rng: random.Random, n: int, scale: float = 1.0) -> pl.DataFrame:
    """``n`` requests: lognormal TPOT around 20 ms x ``scale``, the request rate 1000 / TPOT."""
    tpot = [scale * rng.lognormvariate(3.0, 0.15) for _ in range(n)]
    return pl.DataFrame({"tpot_ms": tpot, "tokens_per_s_per_request": [1000.0 / t for t in tpot]})


def _runs(seed: int, runs: int, n: int, scale: float = 1.0) -> list[pl.DataFrame]:
    rng = random.Random(seed)
    return [_sample(rng, n, scale) for _ in range(runs)]


def _by_metric(changes: list[MetricChange]) -> dict[str, MetricChange]:
    return {m.metric: m for m in changes}


# -- the statistics --------------------------------------------------------------------------------


def test_a_known_slowdown_is_detected_and_its_interval_covers_the_truth() -> None:
    history = _runs(1, 5, 400)
    current = _runs(2, 1, 400, scale=1.08)[0]  # every request 8% slower: the medians' true change is +8%
    got = _by_metric(compare_metrics(current, history, SETTINGS))
    tpot = got["tpot_ms"]
    assert tpot.outcome == "regressed"  # higher TPOT is worse
    assert tpot.low is not None
    assert tpot.high is not None
    assert tpot.change is not None
    assert tpot.low < 0.08 < tpot.high
    assert tpot.low > 0.03  # the interval is on the worse side and beyond the threshold
    rate = got["tokens_per_s_per_request"]
    assert rate.outcome == "regressed"  # lower throughput is worse
    assert rate.high is not None
    assert rate.high < 0
    assert rate.low is not None
    assert rate.low < 1 / 1.08 - 1 < rate.high
    assert tpot.p_value is not None
    assert tpot.p_value < 1e-6


def test_a_speedup_is_improved_in_both_metrics() -> None:
    got = _by_metric(compare_metrics(_runs(3, 1, 400, scale=0.9)[0], _runs(4, 4, 400), SETTINGS))
    assert {m.outcome for m in got.values()} == {"improved"}
    assert got["tpot_ms"].change is not None
    assert got["tpot_ms"].change < 0
    assert got["tokens_per_s_per_request"].change is not None
    assert got["tokens_per_s_per_request"].change > 0


def test_no_shift_is_unchanged() -> None:
    got = compare_metrics(_runs(5, 1, 400)[0], _runs(6, 5, 400), SETTINGS)
    assert [m.outcome for m in got] == ["unchanged", "unchanged"]
    for m in got:
        assert m.low is not None
        assert m.high is not None
        assert m.low < 0 < m.high


def test_a_significant_change_below_the_threshold_is_unchanged() -> None:
    # 2% slower on many requests: the interval excludes zero, but the change is under the 3% threshold
    history, current = _runs(7, 5, 3000), _runs(8, 1, 3000, scale=1.02)[0]
    got = _by_metric(compare_metrics(current, history, SETTINGS))["tpot_ms"]
    assert got.low is not None
    assert got.low > 0
    assert got.outcome == "unchanged"
    loose = _by_metric(compare_metrics(current, history, SETTINGS.model_copy(update={"threshold": 0.01})))
    assert loose["tpot_ms"].outcome == "regressed"


@pytest.mark.parametrize(
    ("change", "low", "high", "higher_is_worse", "want"),
    [
        (0.05, 0.02, 0.08, True, "regressed"),
        (0.05, 0.02, 0.08, False, "improved"),
        (-0.05, -0.08, -0.02, True, "improved"),
        (-0.05, -0.08, -0.02, False, "regressed"),
        (0.05, -0.01, 0.11, True, "unchanged"),  # the interval straddles zero
        (0.02, 0.01, 0.03, True, "unchanged"),  # below the 3% threshold
    ],
)
def test_a_metric_regresses_only_with_both_its_interval_and_the_threshold(
    change: float, low: float, high: float, higher_is_worse: bool, want: str
) -> None:
    assert metric_outcome(change, low, high, higher_is_worse=higher_is_worse, threshold=0.03) == want


def test_the_bootstrap_is_reproducible_from_its_seed() -> None:
    history, current = _runs(9, 4, 300), _runs(10, 1, 300, scale=1.02)[0]
    one = compare_metrics(current, history, SETTINGS)
    two = compare_metrics(current, history, SETTINGS)
    assert one == two
    other = compare_metrics(current, history, SETTINGS.model_copy(update={"seed": 1}))
    assert [(m.low, m.high) for m in other] != [(m.low, m.high) for m in one]
    assert [m.change for m in other] == [m.change for m in one]  # the medians do not depend on the seed


def test_run_to_run_spread_widens_the_interval() -> None:
    """History runs that disagree with each other give a wider interval than the requests alone would."""
    rng = random.Random(11)
    steady = [_sample(rng, 300) for _ in range(4)]
    spread = [_sample(rng, 300, scale) for scale in (0.92, 0.97, 1.03, 1.08)]
    current = _sample(rng, 300)
    narrow = _by_metric(compare_metrics(current, steady, SETTINGS))["tpot_ms"]
    wide = _by_metric(compare_metrics(current, spread, SETTINGS))["tpot_ms"]
    assert narrow.low is not None
    assert narrow.high is not None
    assert wide.low is not None
    assert wide.high is not None
    assert wide.high - wide.low > 2 * (narrow.high - narrow.low)


def test_settings_refuse_a_min_history_above_the_history() -> None:
    with pytest.raises(ValueError, match="min_history=5 is more than history_runs=3"):
        RegressionSettings(history_runs=3, min_history=5)


# -- the point rules -----------------------------------------------------------------------------


def _point(**fields: Any) -> M2Point:
    base: dict[str, Any] = {"concurrency": 4, "k": 3, "target_al": 2.5, "achieved_al": 2.5, "valid": True}
    base.update(fields)
    return M2Point.model_validate(base)


def _history(runs: int, n: int = 200, scale: float = 1.0) -> list[HistoryRun]:
    return [HistoryRun(f"m2/run{i}", (_point(),), frame) for i, frame in enumerate(_runs(12, runs, n, scale))]


def test_fewer_good_history_runs_than_min_history_is_not_enough_history() -> None:
    current = _runs(13, 1, 200, scale=2.0)[0]
    got = judge_point(KEY, _point(), current, _history(2), SETTINGS)
    assert got.outcome == "not enough history"
    assert "fewer than min_history=3" in got.message
    # a history run with too few request records does not count
    short = [*_history(2), HistoryRun("m2/short", (_point(),), _runs(14, 1, MIN_REQUESTS - 1)[0])]
    assert judge_point(KEY, _point(), current, short, SETTINGS).outcome == "not enough history"
    assert judge_point(KEY, _point(), current, _history(3), SETTINGS).outcome == "regressed"


def _forged(runs: int, tpot: list[float]) -> list[HistoryRun]:
    frame = pl.DataFrame({"tpot_ms": tpot, "tokens_per_s_per_request": [100.0] * len(tpot)})
    return [HistoryRun(f"m2/forged{i}", (_point(),), frame) for i in range(runs)]


@pytest.mark.parametrize(
    ("history_tpot", "fragment"),
    [
        ([-20.0] * 50, "values impossible in the history"),  # was "improved -200 %"
        ([1e12] * 50, "values impossible in the history"),  # a TPOT of 10^12 ms was "improved"
        ([float("nan")] * 50, "values impossible in the history"),
        (
            [3e-8] * 50,
            "values impossible in the history",
        ),  # a forged tiny TPOT was "regressed +517,946,600 %"
        (
            [0.0] * 50,
            "the median of the history is 0",
        ),  # the sim at time scale 0: was 0 % with an infinite interval
    ],
)
def test_impossible_history_is_not_comparable_never_improved_or_unchanged(
    history_tpot: list[float], fragment: str
) -> None:
    """#49: history with negative, absurd or zero latencies was judged; now it is refused with its reason."""
    current = _runs(17, 1, 200)[0].with_columns(pl.lit(100.0).alias("tokens_per_s_per_request"))
    got = judge_point(KEY, _point(), current, _forged(3, history_tpot), SETTINGS)
    tpot = _by_metric(got.metrics)["tpot_ms"]
    assert (tpot.outcome, tpot.change) == ("not compared", None)
    assert fragment in tpot.note
    assert got.outcome == "not compared"  # the other metric was compared, but the history is not sane
    assert got.message.startswith("not comparable: tpot_ms: ")
    assert "(compared only: tokens_per_s_per_request " in got.message
    assert _by_metric(got.metrics)["tokens_per_s_per_request"].outcome == "unchanged"


def test_a_point_whose_every_metric_is_impossible_is_not_compared_with_the_reason() -> None:
    frame = pl.DataFrame({"tpot_ms": [-1.0] * 50, "tokens_per_s_per_request": [-5.0] * 50})
    got = judge_point(KEY, _point(), frame, _history(3), SETTINGS)
    assert got.outcome == "not compared"
    assert got.message.startswith("not comparable: tpot_ms: 50 of 50 values impossible in this point")
    assert "tokens_per_s_per_request: 50 of 50 values impossible" in got.message


def test_a_comparison_of_no_metric_is_not_compared_never_unchanged() -> None:
    """#49: when neither side had enough values of any metric the point read "unchanged"."""
    empty = pl.DataFrame({"tpot_ms": [None] * 50, "tokens_per_s_per_request": [None] * 50}, schema={
        "tpot_ms": pl.Float64, "tokens_per_s_per_request": pl.Float64})  # fmt: skip
    got = judge_point(KEY, _point(), empty, _history(3), SETTINGS)
    assert got.outcome == "not compared"
    assert got.message == f"not comparable: no metric has {MIN_REQUESTS} values on both sides"


def test_partial_and_client_bound_points_are_not_compared() -> None:
    current = _runs(15, 1, 200, scale=2.0)[0]
    partial = judge_point(KEY, _point(partial=True, valid=False), current, _history(3), SETTINGS)
    assert (partial.outcome, partial.message) == ("not compared", "the point stopped mid-way (partial)")
    bound = judge_point(
        KEY, _point(client_verdict="client-bound", client_reasons="loop lag"), current, _history(3), SETTINGS
    )
    assert bound.outcome == "not compared"
    assert "loop lag" in bound.message


def test_a_failed_al_audit_is_a_regression_of_the_al_and_speed_is_not_compared() -> None:
    bad = _point(valid=False, achieved_al=2.1, audit="achieved AL 2.1 outside 2.5 +/- 0.05")
    current = _runs(16, 1, 200, scale=0.5)[0]  # twice as fast: would be "improved" if compared
    got = judge_point(KEY, bad, current, _history(3), SETTINGS)
    assert got.outcome == "regressed"
    assert [m.metric for m in got.metrics] == ["achieved_al"]
    assert got.metrics[0].change == pytest.approx(2.1 / 2.5 - 1)
    assert "TPOT and throughput are not compared" in got.message
    assert judge_point(KEY, bad, current, _history(1), SETTINGS).outcome == "not enough history"


# -- a stored run against a catalogue ----------------------------------------------------------------


def _records(concurrency: int, repeat: int, tpot_ms: float, rng: random.Random, n: int = 40) -> pl.DataFrame:
    ms = 1_000_000
    rows = []
    for i in range(n):
        tpot = tpot_ms * rng.uniform(0.95, 1.05)
        end = int((30 + 15 * tpot) * ms)
        rows.append(
            RequestRecord(
                request_id=i, session_id=f"s{i}", start_ns=0, first_token_ns=30 * ms, end_ns=end, done_ns=end,
                chunk_ns=[30 * ms, end], input_tokens=16, output_tokens=16, http_status=200,
            )
        )  # fmt: skip
    return records_frame(rows).with_columns(
        pl.lit(concurrency).alias("concurrency"), pl.lit(repeat).alias("repeat")
    )


def _m2_run(
    root: Path,
    run_id: str,
    tag: str,
    tpot_ms: float,
    *,
    seed: int,
    started: str,
    repo: str = "alflow-sim",
    target_al: float = 2.5,
    config: Mapping[str, object] | None = None,
) -> RunWriter:
    """An M2 run of image REPO:TAG at concurrencies 4 (two repeats) and 8, every request's TPOT near ``tpot_ms``."""
    from datetime import datetime

    writer = RunWriter(
        str(root),
        "m2",
        run_id=run_id,
        started=datetime.fromisoformat(started),
        simulated=True,
        config={
            "model": {"id": "test-llama"},
            "k": 3,
            "thinking": "off",
            "server": {"framework": "sim", "image": f"{repo}:{tag}"},
            **(config or {}),
        },
    )
    rng = random.Random(seed)
    plan = [(4, 0), (4, 1), (8, 0)]
    writer.write_table("requests", pl.concat([_records(c, r, tpot_ms, rng) for c, r in plan]))
    points = [
        _point(concurrency=c, repeat=r, framework="sim", target_al=target_al).model_dump() for c, r in plan
    ]
    writer.write_table("spec_stats", pl.DataFrame(points))
    return writer


def test_a_stored_run_is_judged_against_its_series_in_the_results_root(tmp_path: Path) -> None:
    root = tmp_path / "results"
    for i, tag in enumerate(("n1", "n2", "n3")):
        _m2_run(root, f"h{i}", tag, 20.0, seed=i, started=f"2026-12-0{i + 1}T00:00:00+00:00").finish()
    other = _m2_run(root, "x0", "n1", 20.0, seed=9, started="2026-12-04T00:00:00+00:00", repo="other-sim")
    other.finish()  # another image repository: another series
    # another target AL: another series (at AL 1.5 the same server is slower per token, not a regression)
    _m2_run(root, "t0", "n1", 10.0, seed=8, started="2026-12-04T12:00:00+00:00", target_al=1.5).finish()
    slow = _m2_run(root, "slow", "n4", 30.0, seed=7, started="2026-12-05T00:00:00+00:00")
    report = judge_run(open_run(slow.dir), SETTINGS)
    assert report.kind == "m2"
    assert [(p.concurrency, p.repeat, p.outcome) for p in report.points] == [
        (4, 0, "regressed"),
        (4, 1, "regressed"),
        (8, 0, "regressed"),
    ]
    point = report.points[0]
    assert point.series == {**dump_row(KEY), "concurrency": 4}
    assert sorted(point.history) == [
        f"m2/{Path(w).name}" for w in sorted(str(p) for p in (root / "m2").glob("*-h*"))
    ]
    tpot = next(m for m in point.metrics if m.metric == "tpot_ms")
    assert tpot.change == pytest.approx(0.5, abs=0.05)

    slow.write_json(REGRESSION_FILE, report.model_dump(mode="json"))
    assert "regression.json" in open_run(slow.dir).manifest.files
    stored = regression_report(open_run(slow.dir))
    assert stored == report  # the stored model reads back as written
    entry = Catalog(str(root)).get(root_and_rel(slow.dir)[1])
    assert entry is not None
    assert entry.verdict == "regressed"
    worst, per_series = read_verdicts(json.loads((Path(slow.dir) / "regression.json").read_text()))
    assert worst == "regressed"
    assert (KEY, "regressed") in per_series

    # the same timing as its history, judged before the slow run: unchanged
    same = _m2_run(root, "same", "n4", 20.0, seed=8, started="2026-12-04T12:00:00+00:00")
    assert {p.outcome for p in judge_run(open_run(same.dir), SETTINGS).points} == {"unchanged"}


def test_another_workload_or_server_setup_is_another_series(tmp_path: Path) -> None:
    """Runs of other prompt lengths, method or engine arguments are never a run's history; defaults spelled out are."""
    root = tmp_path / "results"
    shape = {"kind": "random", "isl": 1024, "osl": 1024, "range_ratio": 0.8, "endpoint": "chat"}
    base = {"workload": shape, "method": "mtp"}
    server = {"framework": "sim", "image": "alflow-sim:n1"}
    others = {
        "o0": {"workload": {**shape, "osl": 128}, "method": "mtp"},
        "o1": {"workload": {**shape, "endpoint": "completions"}, "method": "mtp"},
        "o2": {**base, "method": "eagle3"},
        "o3": {**base, "server": {**server, "extra_args": ["--max-num-seqs", "8"]}},
        "o4": {**base, "server": {**server, "parallelism": {"tp": 2}}},
        "o5": {**base, "server": {**server, "enable_prefix_caching": True}},
    }
    for i, (run_id, config) in enumerate(others.items()):  # all fast: were they history, "slow" would regress
        _m2_run(
            root, run_id, "n1", 10.0, seed=i, started=f"2026-11-0{i + 1}T00:00:00+00:00", config=config
        ).finish()
    # the same setup with its defaults written out (as a later release writes them): the same series
    spelled = {**base, "server": {**server, "parallelism": {"tp": 1, "pp": 1}, "enable_prefix_caching": False,
                                  "extra_args": []}}  # fmt: skip
    for i in range(3):
        config = spelled if i == 2 else base
        _m2_run(
            root, f"h{i}", "n1", 20.0, seed=10 + i, started=f"2026-11-1{i}T00:00:00+00:00", config=config
        ).finish()
    slow = _m2_run(root, "slow", "n2", 30.0, seed=20, started="2026-11-20T00:00:00+00:00", config=base)
    report = judge_run(open_run(slow.dir), SETTINGS)
    assert {p.outcome for p in report.points} == {"regressed"}  # against 20 ms, not the 10 ms of other setups
    point = report.points[0]
    assert sorted(Path(h).name[-2:] for h in point.history) == ["h0", "h1", "h2"]
    assert point.series["workload"] == "random isl 1024 osl 1024 range_ratio 0.8 endpoint chat · mtp"
    labels = {key.label() for key in Catalog(str(root)).series_keys()}
    assert any("osl 128" in label for label in labels)
    assert any("eagle3" in label for label in labels)
    assert len({label for label in labels if "c=4" in label}) == 7  # six other setups and the judged one


def test_a_sweep_gathers_its_childrens_verdicts(tmp_path: Path) -> None:
    child = RegressionReport(
        kind="m2",
        method="m",
        points=[
            PointVerdict(series=dump_row(KEY), concurrency=4, k=3, outcome="regressed", message="slower")
        ],
    )
    got = gather_children([("m2/a", child), ("m2/b", None)])
    assert got.kind == "sweep"
    assert [(p.run, p.outcome) for p in got.points] == [("m2/a", "regressed")]
    assert got.notes == ["m2/b: no regression verdicts stored"]


def test_a_run_directory_outside_a_results_root_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match="expected <results root>/<flow>/<run dir name>"):
        root_and_rel("run")


# -- a reference that moved ----------------------------------------------------------------------


def _entry(al: float, ci: tuple[float, float] | None, k: int = 3) -> ReferenceEntry:
    return ReferenceEntry(
        model="test-llama",
        method=SpecMethod.MTP,
        thinking=ThinkingMode.OFF,
        k=k,
        draft_sample_method="greedy",
        rejection_sample_method="standard",
        concurrency=1,
        prefix_caching=False,
        al=al,
        ci_low=None if ci is None else ci[0],
        ci_high=None if ci is None else ci[1],
    )


def _table(*entries: ReferenceEntry) -> ReferenceTable:
    return ReferenceTable(kind="example", dataset="d", category="coding", description="t", entries=entries)


@pytest.mark.parametrize(
    ("old", "new", "want"),
    [
        ((2.50, (2.45, 2.55)), (2.52, (2.47, 2.57)), "unchanged"),  # the intervals overlap
        ((2.50, (2.45, 2.55)), (2.70, (2.65, 2.75)), "moved"),
        ((2.50, (2.45, 2.55)), (2.60, None), "moved"),  # only the previous interval: the new AL is outside it
        ((2.50, (2.45, 2.55)), (2.52, None), "unchanged"),
        ((2.50, None), (2.90, (2.85, 2.95)), "not enough history"),
    ],
)
def test_a_reference_entry_moved_when_it_left_its_interval(
    old: tuple[float, tuple[float, float] | None], new: tuple[float, tuple[float, float] | None], want: str
) -> None:
    before, after = _table(_entry(*old)), _table(_entry(*new))
    report = judge_reference(before, after, [e.key for e in after.entries])
    (point,) = report.points
    assert point.outcome == want
    assert point.reference is not None
    assert point.reference.startswith("test-llama mtp")
    assert point.metrics[0].baseline == old[0]
    assert point.metrics[0].current == new[0]


def test_only_the_entries_a_calibration_wrote_and_had_before_are_compared() -> None:
    before = _table(_entry(2.5, (2.4, 2.6), k=3))
    after = _table(_entry(3.5, (3.4, 3.6), k=3), _entry(2.0, (1.9, 2.1), k=2))
    assert judge_reference(before, after, []).points == []
    got = judge_reference(before, after, [e.key for e in after.entries])
    assert [(p.k, p.outcome) for p in got.points] == [(3, "moved")]


# -- the event and the report -----------------------------------------------------------------------


def test_a_regressed_point_emits_one_event_on_its_flow_run_labelled_with_its_series() -> None:
    point = PointVerdict(
        series=dump_row(KEY),
        concurrency=4,
        k=3,
        outcome="regressed",
        metrics=[MetricChange(metric="tpot_ms", current=30.0, baseline=20.0, change=0.5, low=0.4, high=0.6)],
        history=["m2/a"],
        message="tpot_ms +50%",
    )
    resource, payload = alert_event(point, flow_run_id="abc", flow="m2", run_dir="https://u:p@host/r")
    assert REGRESSION_EVENT == "alflow.regression.detected"
    assert resource["prefect.resource.id"] == "prefect.flow-run.abc"
    assert {k: resource[f"alflow.{k}"] for k in ("framework", "image", "model", "k", "concurrency")} == {
        "framework": "sim",
        "image": "alflow-sim",
        "model": "test-llama",
        "k": "3",
        "concurrency": "4",
    }
    assert all(isinstance(v, str) for v in resource.values())
    assert payload["metrics"][0]["low"] == 0.4
    assert "u:p" not in payload["run_dir"]


HOSTILE = "<script>alert(1)</script> | *bold* [x](javascript:y)"


def test_the_report_section_escapes_what_the_verdicts_say() -> None:
    point = PointVerdict(
        series={**dump_row(KEY), "model": HOSTILE},
        concurrency=4,
        k=3,
        outcome="regressed",
        metrics=[MetricChange(metric="tpot_ms", current=30.0, baseline=20.0, change=0.5, low=0.4, high=0.6)],
        history=["m2/a"],
        message=HOSTILE,
        run=HOSTILE,
    )
    section = regression_section(RegressionReport(kind="m2", method="the method", points=[point]))
    assert section.status == "fail"
    assert "+50.0% [+40.0%, +60.0%]" in section.tables[0].rows[0]
    report = Report(title="t", simulated=False, facts=[], sections=[section])
    html = render(report, "html")
    assert "<script>" not in html
    assert "&lt;script&gt;" in html
    md = render(report, "md")
    assert "<script>" not in md
    assert "| *bold*" not in md
    assert "Regression against recent runs" in md
    assert "REGRESSED" in md


def test_the_task_stores_the_verdicts_emits_per_regressed_point_and_never_fails_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from prefect.logging import disable_run_logger

    import alflow_tasks.regression as task_module

    root = tmp_path / "results"
    for i in range(3):
        _m2_run(root, f"h{i}", "n1", 20.0, seed=i, started=f"2026-12-0{i + 1}T00:00:00+00:00").finish()
    slow = _m2_run(root, "slow", "n2", 30.0, seed=7, started="2026-12-05T00:00:00+00:00")
    events: list[tuple[str, dict[str, str]]] = []
    monkeypatch.setattr(
        task_module, "emit_event", lambda *, event, resource, payload: events.append((event, resource))
    )
    with disable_run_logger():
        assert task_module.check_regression(slow, SETTINGS) == slow.dir
    assert [p.outcome for p in regression_report(open_run(slow.dir)).points] == ["regressed"] * 3  # type: ignore[union-attr]
    assert [(e, r["alflow.concurrency"], r["alflow.repeat"]) for e, r in events] == [
        (REGRESSION_EVENT, "4", "0"),
        (REGRESSION_EVENT, "4", "1"),
        (REGRESSION_EVENT, "8", "0"),
    ]

    def broken(*_: object) -> RegressionReport:
        raise OSError("the results root went away")

    monkeypatch.setattr(task_module, "judge_run", broken)
    other = _m2_run(root, "other", "n2", 30.0, seed=8, started="2026-12-06T00:00:00+00:00")
    with disable_run_logger():
        assert task_module.check_regression(other, SETTINGS) is None  # a warning, never an error
    assert "regression.json" not in open_run(other.dir).manifest.files


def test_requests_whose_stamps_are_out_of_order_give_impossible_values() -> None:
    """Hostile round 4: a history whose first token came before its request (and whose end came before its first
    token) was judged "improved -99.5 %"; its values are now NaN, which the judge refuses."""
    from alflow.methods.regression import request_values

    s, ms = 1_000_000_000, 1_000_000
    rows = [
        RequestRecord(
            request_id=0, session_id="s0", start_ns=3 * s, first_token_ns=1 * s, end_ns=2 * s, done_ns=2 * s,
            chunk_ns=[1 * s, 2 * s], input_tokens=16, output_tokens=10, http_status=200,
        ),
        RequestRecord(
            request_id=1, session_id="s1", start_ns=3 * s, first_token_ns=3 * s + 10 * ms, end_ns=3 * s + 50 * ms,
            done_ns=3 * s + 50 * ms, chunk_ns=[3 * s + 10 * ms, 3 * s + 50 * ms], input_tokens=16, output_tokens=10,
            http_status=200,
        ),
    ]  # fmt: skip
    records = records_frame(rows).with_columns(pl.lit(4).alias("concurrency"))
    values = request_values(records)
    forged, sane = values.rows(named=True)
    assert math.isnan(forged["tpot_ms"])
    assert math.isnan(forged["tokens_per_s_per_request"])
    assert sane["tpot_ms"] == pytest.approx(40 / 9)


def test_an_audit_failure_takes_no_baseline_from_impossible_history_al() -> None:
    """Hostile round 4: a history AL of -3 or 1e308 was the baseline of a failed audit's "regressed -140 %"."""
    history = [
        HistoryRun(f"m2/al{i}", (_point(achieved_al=al),), _runs(12, 1, 50)[0])
        for i, al in enumerate((-3.0, 1e308, 2.5, 2.49, 2.51))
    ]
    got = judge_point(KEY, _point(achieved_al=1.2, valid=False), _runs(13, 1, 50)[0], history, SETTINGS)
    (metric,) = got.metrics
    assert metric.baseline == 2.5  # the median of the three possible ones


def test_a_glitch_or_two_in_a_side_is_left_out_not_a_refusal_of_the_series() -> None:
    """Review: one request whose stamps a clock step moved (NaN) refused every later verdict of the series; under
    1 % of a side impossible is left out of the medians, the point judged."""
    history = _history(3)
    glitched = [
        HistoryRun(h.rel, h.points, h.values.with_row_index().with_columns(
            pl.when(pl.col("index") == 0).then(float("nan")).otherwise(pl.col("tpot_ms")).alias("tpot_ms")
        ).drop("index"))
        for h in history
    ]  # fmt: skip
    current = _runs(13, 1, 200, scale=2.0)[0]
    assert judge_point(KEY, _point(), current, glitched, SETTINGS).outcome == "regressed"
    assert judge_point(KEY, _point(), current, history, SETTINGS).outcome == "regressed"


def test_history_of_another_output_length_is_not_comparable() -> None:
    """Hostile round 6 (F19): history requests of 1 output token against a point's 32 read "improved +3100 %"."""
    history = [
        HistoryRun(h.rel, h.points, h.values.with_columns(pl.lit(1.0).alias("output_tokens")))
        for h in _history(3)
    ]
    current = _runs(15, 1, 200)[0].with_columns(pl.lit(32.0).alias("output_tokens"))
    got = judge_point(KEY, _point(), current, history, SETTINGS)
    assert got.outcome == "not compared"
    assert "output lengths differ: a median of 32 tokens against 1 in the history" in got.message
    same = [
        HistoryRun(h.rel, h.points, h.values.with_columns(pl.lit(30.0).alias("output_tokens")))
        for h in history
    ]
    assert (
        judge_point(KEY, _point(), current, same, SETTINGS).outcome == "unchanged"
    )  # within 1.5x: one workload
