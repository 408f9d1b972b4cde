"""The peer benchmark's client-CPU accounting: a /proc trace of a process tree, read on the shared clock.

``benchmarks/peer_vllm_bench.py`` compares alflow's client CPU per token with ``vllm bench serve``'s over
each client's measured phase; these checks run its ``_timed`` on a child whose CPU use is known.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import random
import statistics
import sys
from pathlib import Path
from types import ModuleType

import polars as pl
import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "peer_vllm_bench", ROOT / "benchmarks" / "peer_vllm_bench.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_cpu_trace_interpolates_between_samples_and_clamps_outside(bench: ModuleType) -> None:
    trace = bench.CpuTrace((1.0, 2.0, 3.0), (0.5, 1.5, 1.5))
    assert trace.at(0.0) == 0.5
    assert trace.at(1.5) == pytest.approx(1.0)
    assert trace.at(9.0) == 1.5
    assert trace.between(1.0, 3.0) == pytest.approx(1.0)


def _run(bench: ModuleType, client: str, repeat: int, tpots: tuple[float, ...]) -> object:
    return bench.ClientRun(
        client, 4, repeat, len(tpots), len(tpots), 100, 64 * len(tpots), 9.0, 4000.0,
        sorted(tpots)[len(tpots) // 2], sum(tpots) / len(tpots), 400.0, 3.5, 3.5, 100, 1.0, 0.1, 0.5, 60.0,
        tpots,
    )  # fmt: skip


def test_the_median_ratio_pairs_the_same_prompt_of_the_same_repeat(bench: ModuleType) -> None:
    nan = math.nan
    runs = [
        _run(bench, "alflow bench", 0, (100.0, nan, 300.0)),
        _run(bench, "alflow bench", 1, (400.0, 500.0)),
        _run(bench, "vllm bench serve", 0, (100.0, 200.0, 300.0)),
        _run(bench, "vllm bench serve", 1, (400.0, nan)),
    ]
    assert bench._paired_tpots(runs, 4) == [(100.0, 100.0), (300.0, 300.0), (400.0, 400.0)]
    ratio, low, high = bench._pooled_median_ratio(runs, 4, resamples=500)
    assert (ratio, low, high) == (
        1.0,
        1.0,
        1.0,
    )  # a prompt without both measurements is left out of both sides
    assert all(math.isnan(x) for x in bench._pooled_median_ratio(runs, 1))  # no runs at concurrency 1


def test_the_paired_interval_resolves_a_shift_that_the_spread_of_requests_hides(bench: ModuleType) -> None:
    rng = random.Random(3)
    base = [rng.uniform(100.0, 800.0) for _ in range(64)]  # per-request TPOTs as spread as at concurrency 4
    shifted = tuple(t * 1.02 * rng.uniform(0.995, 1.005) for t in base)  # alflow 2% slower on every request
    runs = [_run(bench, "alflow bench", 0, shifted), _run(bench, "vllm bench serve", 0, tuple(base))]
    ratio, low, high = bench._pooled_median_ratio(runs, 4, resamples=1000)
    assert 1.01 < low <= ratio <= high < 1.03
    # the same values unpaired (each side resampled on its own) cannot tell 2% from nothing
    unpaired = [statistics.median(rng.choices(shifted, k=64)) / statistics.median(rng.choices(base, k=64))
                for _ in range(1000)]  # fmt: skip
    unpaired.sort()
    assert unpaired[25] < 1.0 < unpaired[974]


def test_each_clients_per_request_tpots_are_read_in_the_prompt_files_order(bench: ModuleType) -> None:
    requests = pl.DataFrame(
        {
            "session_id": ["custom-2", "custom-1", "custom-3"],
            "ok": [True, True, False],
            "tpot_ms": [20.0, 10.0, 30.0],
        }
    )
    tpots = bench._alflow_tpots(requests, 4)
    assert tpots[:2] == (10.0, 20.0)
    assert math.isnan(tpots[2])  # failed
    assert math.isnan(tpots[3])  # not sent (no session 4)
    result = {
        "latencies": [1.0, 2.0, 3.0],
        "ttfts": [0.5, 0.5, 0.5],
        "output_lens": [11, 1, 16],
        "errors": ["", "", "boom"],
    }
    tpots = bench._vllm_tpots(result)  # its lists are in the file's order (--disable-shuffle)
    assert tpots[0] == pytest.approx(50.0)
    assert math.isnan(tpots[1])  # one token: undefined
    assert math.isnan(tpots[2])  # failed: left out


HISTOGRAM = """# HELP vllm:request_time_per_output_token_seconds Histogram of time_per_output_token_seconds per request.
# TYPE vllm:request_time_per_output_token_seconds histogram
vllm:request_time_per_output_token_seconds_bucket{{engine="0",le="0.05",model_name="m"}} {n}
vllm:request_time_per_output_token_seconds_bucket{{engine="0",le="+Inf",model_name="m"}} {n}
vllm:request_time_per_output_token_seconds_count{{engine="0",model_name="m"}} {n}
vllm:request_time_per_output_token_seconds_sum{{engine="0",model_name="m"}} {total}
"""


def test_the_servers_own_mean_tpot_is_the_histograms_increase_over_the_window(bench: ModuleType) -> None:
    from alflow.metrics.prometheus import parse_exposition

    before = parse_exposition(HISTOGRAM.format(n=3, total=0.09))
    after = parse_exposition(HISTOGRAM.format(n=7, total=0.25))
    family = "vllm:request_time_per_output_token_seconds"
    mean, count = bench._server_mean_ms(before, after, family)
    assert count == 4
    assert mean == pytest.approx(1000.0 * 0.16 / 4)
    assert bench._server_mean_ms(before, before, family) == (None, 0)  # nothing finished in the window
    assert bench._server_mean_ms(before, after, "vllm:no_such_histogram") == (None, 0)
    runs = [_run(bench, "alflow bench", 0, (40.0, 44.0))]
    assert bench._fidelity(runs) == []  # no server figure: no ratio
    with_server = [dataclasses.replace(runs[0], server_mean_tpot_ms=40.0)]
    assert bench._fidelity(with_server) == [pytest.approx(42.0 / 40.0)]


def test_tpots_against_the_servers_own_cancel_the_servers_speed_between_windows(bench: ModuleType) -> None:
    # the server ran 10% slower in vLLM's window; both clients measured it alike
    fast = dataclasses.replace(
        _run(bench, "alflow bench", 0, (100.0, 200.0, 300.0)), server_mean_tpot_ms=200.0
    )
    slow = dataclasses.replace(
        _run(bench, "vllm bench serve", 0, (110.0, 220.0, 330.0)), server_mean_tpot_ms=220.0
    )
    raw, _, _ = bench._pooled_median_ratio([fast, slow], 4, resamples=200)
    assert raw == pytest.approx(200.0 / 220.0)
    adjusted = bench._pooled_median_ratio([fast, slow], 4, resamples=200, per_server=True)
    assert adjusted == pytest.approx((1.0, 1.0, 1.0))
    bare = _run(bench, "vllm bench serve", 0, (110.0, 220.0, 330.0))  # a server without the histogram
    assert all(math.isnan(x) for x in bench._pooled_median_ratio([fast, bare], 4, per_server=True))


def test_saved_runs_print_again_and_a_file_of_something_else_is_named(
    bench: ModuleType, tmp_path: Path
) -> None:
    runs = [
        _run(bench, "alflow bench", 0, (100.0, math.nan)),
        _run(bench, "vllm bench serve", 0, (110.0, 5.0)),
    ]
    saved = tmp_path / "runs.json"
    saved.write_text(bench._as_json(runs))
    loaded = bench._load_runs(saved)
    assert loaded[1] == runs[1]
    assert math.isnan(loaded[0].tpots_ms[1])
    assert "| 4 | alflow bench |" in bench._table(loaded, [4])
    other = tmp_path / "other.json"
    other.write_text('{"not": "runs"}')
    with pytest.raises(ValueError, match=r"--report .*other.json: not a file of saved runs"):
        bench._load_runs(other)
    other.write_text("[]")
    with pytest.raises(ValueError, match="holds no runs"):
        bench._load_runs(other)
