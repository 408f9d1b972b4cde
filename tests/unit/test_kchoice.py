"""K with its uncertainty (alflow.methods.kchoice): vLLM's median-minus-MAD rule, ties to the smaller K, the K schedule."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from alflow.cli import app
from alflow.config import BenchmarkParams, SweepParams
from alflow.errors import InvalidInputError
from alflow.methods.kchoice import (
    MAD_TO_SIGMA,
    PENALTY,
    TIE_TOLERANCE,
    Objective,
    candidate,
    choose,
    choose_k,
    k_schedule,
    spread,
    spread_rows,
)
from alflow.methods.points import best_k
from alflow.methods.sweep_rules import benchmark_for
from alflow.metrics.point_metrics import OUTPUT_PER_GPU
from alflow.results.rows import M2Point
from alflow.results.store import RunWriter, open_run
from alflow.util.rows import dump_row
from tests.unit.report_runs import EVIL

pytestmark = pytest.mark.unit


def _pt(
    k: int,
    conc: int,
    thr: float | None,
    inter: float | None = 50.0,
    *,
    repeat: int = 0,
    valid: bool = True,
) -> M2Point:
    return M2Point(
        concurrency=conc, k=k, framework="sim", target_al=2.0, achieved_al=2.0, valid=valid, partial=False,
        audit="ok", num_drafts=100, expected_al=2.0, allowed_deviation=0.1, completed=8, failed=0,
        output_throughput=thr, nodes=1, num_gpus=1, total_token_throughput=thr, output_throughput_per_gpu=thr,
        total_token_throughput_per_gpu=thr, median_interactivity_tokens_per_s=inter, median_tpot_ms=10.0,
        median_ttft_ms=5.0, p99_ttft_ms=9.0, median_itl_ms=20.0, tokens_per_chunk=2.0, duration_s=1.0,
        repeat=repeat,
    )  # fmt: skip


def _repeats(k: int, conc: int, values: list[float]) -> list[M2Point]:
    return [_pt(k, conc, v, repeat=i) for i, v in enumerate(values)]


def test_constants_are_vllms_defaults() -> None:
    # vllm/benchmarks/sweep/tune_speculative_k.py (PR #49163): --uncertainty-penalty 1.0, x 1.4826, --relative-tolerance 0.01
    assert (PENALTY, MAD_TO_SIGMA, TIE_TOLERANCE) == (1.0, 1.4826, 0.01)


def test_spread_and_score_median_minus_scaled_mad_floored_at_zero() -> None:
    assert spread([1.0, 2.0, 10.0]) == (2.0, 1.0)
    c = candidate(4, 3, [100.0, 104.0, 90.0, 101.0, 99.0])
    assert (c.median, c.mad, c.low, c.high, c.n) == (100.0, 1.0, 90.0, 104.0, 5)
    assert c.score == pytest.approx(100.0 - 1.4826)
    assert c.values == (100.0, 104.0, 90.0, 101.0, 99.0)  # every repeat kept, in order
    assert candidate(4, 1, [1.0, 10.0, 20.0]).score == 0.0  # median 10, MAD 9: floored
    one = candidate(4, 2, [123.0])
    assert (one.mad, one.score) == (0.0, 123.0)  # one repeat: the score is the measurement
    with pytest.raises(ValueError, match="finite"):
        candidate(4, 2, [float("nan")])


def _noisy_measure(rng: random.Random, true: float) -> float:
    """A window's throughput: small jitter, and one window in ten an outlier of 10..30 tok/s either way."""
    x = rng.gauss(true, 1.0)
    if rng.random() < 0.1:
        x += rng.choice((-1, 1)) * rng.uniform(10.0, 30.0)
    return x


def test_the_rule_finds_the_true_best_k_where_the_single_run_argmax_often_does_not() -> None:
    true = {1: 100.0, 2: 120.0, 3: 114.0, 4: 104.0}  # K=2 is best, K=3 only 5 % behind
    rng = random.Random(31)
    rule_right = argmax_wrong = 0
    trials = 300
    for _ in range(trials):
        points = [
            p
            for k, mean in true.items()
            for p in _repeats(k, 8, [_noisy_measure(rng, mean) for _ in range(5)])
        ]
        (choice,) = choose_k(points, Objective.throughput)
        rule_right += choice.chosen.k == 2
        first = {p.k: p.value(OUTPUT_PER_GPU) or 0.0 for p in points if p.repeat == 0}
        argmax_wrong += max(first, key=lambda k: (first[k], -k)) != 2
    assert rule_right >= trials - 5
    assert argmax_wrong >= 30  # one window per K picks a wrong K in about one trial in six


def test_ties_within_one_percent_go_to_the_smaller_k() -> None:
    points = [*_repeats(2, 4, [100.0, 100.0, 100.0]), *_repeats(3, 4, [100.9, 100.9, 100.9])]
    choice = choose_k(points, Objective.throughput)[0]
    assert choice.chosen.k == 2
    assert choice.best.k == 3
    assert choice.ties == (2, 3)
    assert choice.runner_up is not None
    assert choice.runner_up.k == 3
    # just outside 1 %: the better K wins
    points = [*_repeats(2, 4, [100.0] * 3), *_repeats(3, 4, [101.1] * 3)]
    choice = choose_k(points, Objective.throughput)[0]
    assert (choice.chosen.k, choice.ties) == (3, (3,))
    assert choice.runner_up is not None
    assert choice.runner_up.k == 2


def test_the_mad_penalty_flips_a_noisy_winner() -> None:
    steady = _repeats(2, 16, [100.0, 100.5, 99.5, 100.0, 100.2])
    noisy = _repeats(3, 16, [105.0, 112.0, 95.0, 98.0, 110.0])  # median 105 > 100, MAD 7
    choice = choose_k([*steady, *noisy], Objective.throughput)[0]
    by_median = max(choice.candidates, key=lambda c: c.median)
    assert by_median.k == 3  # the medians alone pick the noisy K
    assert choice.chosen.k == 2
    assert choice.candidates[1].score == pytest.approx(105.0 - 1.4826 * 7.0)


def test_one_repeat_reduces_to_the_argmax_with_the_one_percent_tie() -> None:
    points = [
        _pt(1, 4, 100.0, 90.0),
        _pt(3, 4, 150.0, 80.0),
        _pt(5, 4, 149.0, 70.0),
        _pt(7, 4, 999.0, valid=False),
    ]
    (thr,) = choose_k(points, Objective.throughput)
    assert (thr.chosen.k, thr.chosen.score, thr.ties) == (3, 150.0, (3, 5))
    (inter,) = choose_k(points, Objective.interactivity)
    assert inter.chosen.k == 1
    assert [(b.best_k_throughput, b.best_k_interactivity) for b in best_k(points)] == [(3, 1)]


def test_invalid_points_and_missing_figures_take_no_part() -> None:
    points = [_pt(1, 4, None, None), _pt(2, 4, 50.0, None), _pt(3, 4, 500.0, 500.0, valid=False)]
    assert [c.chosen.k for c in choose_k(points, Objective.throughput)] == [2]
    assert choose_k(points, Objective.interactivity) == []
    (b,) = best_k(points)
    assert (b.best_k_throughput, b.best_k_interactivity, b.median_interactivity_tokens_per_s) == (
        2,
        None,
        None,
    )
    assert choose([candidate(4, 1, [0.0])], Objective.throughput) is None  # no positive score: no choice


def test_spread_rows_keep_every_pair_and_count_valid_repeats() -> None:
    points = [
        *_repeats(1, 4, [10.0, 12.0, 11.0]),
        _pt(1, 4, 99.0, repeat=3, valid=False),
        _pt(2, 4, None, None),
    ]
    rows = {(r["concurrency"], r["k"]): r for r in spread_rows(points)}
    assert rows[(4, 1)]["repeats"] == 4
    assert rows[(4, 1)]["n"] == 3
    assert (rows[(4, 1)]["throughput_median"], rows[(4, 1)]["throughput_mad"]) == (11.0, 1.0)
    assert (rows[(4, 1)]["throughput_min"], rows[(4, 1)]["throughput_max"]) == (10.0, 12.0)
    assert rows[(4, 2)]["throughput_median"] is None
    assert (rows[(4, 1)]["draws"], rows[(4, 2)]["draws"]) == (3, 1)  # the sim draws afresh on every repeat


def test_repeats_of_a_framework_with_a_fixed_synthetic_seed_count_as_one_draw(tmp_path: Path) -> None:
    from alflow.methods.kchoice import all_choices
    from alflow.reports import render_run

    atom = [p.model_copy(update={"framework": "atom"}) for p in _repeats(1, 4, [10.0, 12.0, 11.0])]
    (row,) = spread_rows(atom)
    assert (row["n"], row["draws"]) == (3, 1)
    with RunWriter(tmp_path, "sweep", config={"ks": [1]}) as w:
        w.write_table("spec_stats", pl.DataFrame([p.model_dump() for p in atom]))
        w.write_summary(
            {
                "flow": "sweep",
                "repeats": 3,
                "best_k": [dump_row(b) for b in best_k(atom)],
                "k_choice": [dump_row(c) for c in all_choices(atom)],
            }
        )
    text = render_run(w.dir, "md")
    assert "| 4 | 1 | 3/3 | 1 |" in text
    assert "counts as one draw and its spread over repeats is the timing" in text
    assert "0x5EED" in text


def _vllm_accepts(schedule: object) -> bool:
    """vLLM's rules for a 3-item schedule (validate_and_normalize_dynamic_sd_schedule, vllm/v1/spec_decode/dynamic/utils.py)."""
    assert isinstance(schedule, list)
    assert schedule
    prev_end = 0
    for entry in schedule:
        assert isinstance(entry, list)
        assert len(entry) == 3
        assert all(isinstance(v, int) for v in entry)
        lo, hi, k = entry
        assert 0 < lo <= hi
        assert k >= 0
        assert lo > prev_end  # sorted, non-overlapping
        prev_end = hi
    assert schedule[0][0] == 1  # every runtime batch size has a K
    return True


def _sweep_points(
    best: dict[int, int], concs: tuple[int, ...], ks: tuple[int, ...] = (1, 2, 3)
) -> list[M2Point]:
    """Three repeats per (K, concurrency); at each concurrency K=best[conc] is 20 % ahead of the others."""
    return [
        p
        for conc in concs
        for k in ks
        for p in _repeats(k, conc, [v * (1.2 if k == best[conc] else 1.0) for v in (100.0, 101.0, 99.0)])
    ]


def test_k_schedule_ranges_merge_equal_k_and_end_at_the_largest_concurrency() -> None:
    points = _sweep_points({1: 3, 8: 3, 32: 2, 64: 1}, (1, 8, 32, 64))
    schedule = k_schedule(points, Objective.throughput)
    assert schedule.ranges == ((1, 31, 3), (32, 63, 2), (64, 64, 1))
    config = schedule.speculative_config()
    assert config == {
        "num_speculative_tokens": 3,
        "num_speculative_tokens_per_batch_size": [[1, 31, 3], [32, 63, 2], [64, 64, 1]],
    }
    assert _vllm_accepts(json.loads(json.dumps(config))["num_speculative_tokens_per_batch_size"])
    assert schedule.warnings == ()


def test_k_schedule_stretches_the_smallest_concurrency_down_to_one_and_says_so() -> None:
    points = _sweep_points({4: 2, 16: 1}, (4, 16))
    schedule = k_schedule(points, Objective.throughput)
    assert schedule.ranges == ((1, 15, 2), (16, 16, 1))
    assert _vllm_accepts([list(r) for r in schedule.ranges])
    assert any("concurrency 1 was not measured" in w for w in schedule.warnings)


def test_k_schedule_warns_on_one_repeat_and_on_unstable_candidates() -> None:
    one = k_schedule([_pt(1, 1, 100.0), _pt(2, 1, 130.0)], Objective.throughput)
    assert one.ranges == ((1, 1, 2),)
    assert any("repeat" in w and "at least 3" in w for w in one.warnings)
    noisy = k_schedule(
        [*_repeats(1, 1, [100.0, 60.0, 140.0]), *_repeats(2, 1, [10.0] * 3)], Objective.throughput
    )
    assert any("K=1 at concurrency 1: relative MAD 0.400" in w for w in noisy.warnings)


def test_k_schedule_without_a_valid_point_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="no valid M2 point"):
        k_schedule([_pt(1, 4, 100.0, valid=False)], Objective.throughput)


def test_repeats_in_the_benchmark_parameters_of_a_sweep(tmp_path: Path) -> None:
    bench: dict[str, Any] = {
        "model": {"id": "m"},
        "server": {"framework": "sim", "model": "m"},
        "target_al": 1.5,
        "concurrencies": [4],
    }
    gate = {"model": {"id": "m"}, "server": {"framework": "sim", "model": "m"}, "reference_path": "r.yaml"}
    assert BenchmarkParams.model_validate(bench).repeats == 1
    params = SweepParams.model_validate({"ks": [1, 2], "gate": gate, "benchmark": {**bench, "repeats": 3}})
    assert benchmark_for(params, 2).repeats == 3
    for bad in (0, -1, 101):
        with pytest.raises(ValidationError, match="repeats"):
            SweepParams.model_validate({"ks": [1], "gate": gate, "benchmark": {**bench, "repeats": bad}})


def test_a_row_written_before_repeats_reads_as_repeat_zero() -> None:
    row = _pt(1, 4, 10.0, repeat=2).model_dump()
    assert M2Point.model_validate(row).repeat == 2
    del row["repeat"]
    assert M2Point.model_validate(row).repeat == 0


def test_the_sweep_report_shows_the_choice_and_the_spread_and_escapes_user_text(tmp_path: Path) -> None:
    from alflow.methods.kchoice import all_choices
    from alflow.reports import render_run

    points = [p.model_copy(update={"framework": EVIL + "|x"}) for p in _sweep_points({4: 2}, (4,))]
    with RunWriter(tmp_path, "sweep", config={"ks": [1, 2, 3]}) as w:
        w.write_table("spec_stats", pl.DataFrame([p.model_dump() for p in points]))
        w.write_summary(
            {
                "flow": "sweep",
                "repeats": 3,
                "best_k": [dump_row(b) for b in best_k(points)],
                "k_choice": [dump_row(c) for c in all_choices(points)],
            }
        )
    text = render_run(w.dir, "md")
    assert "<script>" not in text
    assert "&lt;script&gt;" in text
    assert "\\|x" in text
    assert "3 repeat\\(s\\) per \\(K, concurrency\\)\\. score = median \\- 1 x 1\\.4826 x MAD" in text
    assert (
        "| 4 | throughput | 2 | 118.2 | 120\\.0 ± 1\\.2 | 2 | K=2 \\(118\\.2\\) | K=1 \\(98\\.5\\) |" in text
    )
    assert "| 4 | interactivity | 1 | 50.0 | 50\\.0 ± 0\\.0 | 1, 2, 3 |" in text
    assert "| 4 | 1 | 3/3 | 3 | 100.0 | 1.0 | 99.0..101.0 | 98.5 |" in text


def _write_sweep(root: Path, points: list[M2Point], flow: str = "sweep") -> str:
    with RunWriter(root, flow, config={"ks": [1, 2, 3]}) as w:
        w.write_table("spec_stats", pl.DataFrame([p.model_dump() for p in points]))
        w.write_summary({"flow": flow, "repeats": 3})
    return w.dir


def test_cli_k_schedule_writes_vllms_schedule_and_refuses_bad_runs(tmp_path: Path) -> None:
    run = _write_sweep(tmp_path, _sweep_points({1: 3, 16: 1}, (1, 16)))
    runner = CliRunner()
    out = tmp_path / "schedule.json"
    result = runner.invoke(app, ["report", "k-schedule", run, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text()) == {
        "num_speculative_tokens": 3,
        "num_speculative_tokens_per_batch_size": [[1, 15, 3], [16, 16, 1]],
    }
    assert "concurrency 1: K=3 score" in result.stderr
    full = runner.invoke(app, ["report", "k-schedule", run, "--objective", "interactivity", "--json"])
    assert full.exit_code == 0, full.output
    data = json.loads(full.stdout)
    assert data["objective"] == "interactivity"
    assert data["num_speculative_tokens_per_batch_size"] == [[1, 16, 1]]  # equal interactivity: smallest K
    assert [d["chosen_k"] for d in data["decisions"]] == [1, 1]
    m2 = _write_sweep(tmp_path, _sweep_points({4: 1}, (4,)), flow="m2")
    for args, why in (
        ([m2], "is not a sweep"),
        ([_write_sweep(tmp_path / "b", [_pt(1, 4, 1.0, valid=False)])], "no valid M2 point"),
        ([str(tmp_path / "nowhere")], ""),
        ([run, "--objective", "latency"], "latency"),
    ):
        bad = runner.invoke(app, ["report", "k-schedule", *args])
        assert bad.exit_code == 2, (args, bad.output)
        assert why in bad.stderr
        if why and args[0] != run:
            assert len(bad.stderr.strip().splitlines()) == 1
    assert open_run(run).manifest.flow == "sweep"


def test_stored_choice_is_the_json_of_the_previous_release() -> None:
    """pydantic stores a choice (:func:`dump_row`) as the hand-written ``to_dict`` did: flat chosen/best/runner-up."""
    only = candidate(8, 2, [5.0])
    choice = choose([only], Objective.throughput)
    assert choice is not None
    assert dump_row(choice) == {
        "concurrency": 8, "objective": "throughput", "chosen_k": 2, "chosen_score": 5.0, "chosen_median": 5.0,
        "chosen_mad": 0.0, "best_score_k": 2, "best_score": 5.0, "ties": [2], "runner_up_k": None,
        "runner_up_score": None, "candidates": [dump_row(only)],
    }  # fmt: skip
    two = choose([candidate(4, 1, [100, 110, 90]), candidate(4, 3, [150, 149.5, 151])], Objective.throughput)
    assert two is not None
    assert (dump_row(two)["runner_up_k"], dump_row(two)["chosen_k"]) == (1, 3)
