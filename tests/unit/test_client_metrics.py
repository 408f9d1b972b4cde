"""Client metrics computed from records with polars, checked against hand arithmetic."""

from __future__ import annotations

import statistics

import pytest

from alflow.errors import InvalidInputError
from alflow.loadgen.frames import read_records, records_frame, write_records
from alflow.loadgen.records import RequestRecord
from alflow.metrics.client import SLO, GpuLayout, per_request, summarize
from alflow.util.rows import dump_row

pytestmark = pytest.mark.unit

MS = 1_000_000


def rec(
    i: int, start_ms: float, chunks_ms: list[float], out: int | None, inp: int = 10, **kw: object
) -> RequestRecord:
    r = RequestRecord(request_id=i, session_id=f"s{i}", start_ns=int(start_ms * MS), **kw)  # type: ignore[arg-type]
    r.chunk_ns = [int(c * MS) for c in chunks_ms]
    if r.chunk_ns:
        r.first_token_ns, r.end_ns = r.chunk_ns[0], r.chunk_ns[-1]
    r.done_ns = (r.end_ns or r.start_ns) + MS
    r.input_tokens, r.output_tokens = inp, out
    return r


RECORDS = [
    rec(0, 0, [100, 110, 130, 160], out=7),  # ttft 100, e2el 160, itl 10/20/30, tpot 60/6=10
    rec(1, 10, [60, 80], out=3),  # ttft 50, e2el 70, itl 20, tpot 20/2=10
    rec(2, 20, [220], out=1),  # ttft 200, e2el 200, no itl, tpot null
    rec(3, 0, [], out=None, error="HTTP 500: boom"),
    rec(4, 0, [5, 6], out=2, warmup=True),  # warm-up: excluded
]


def test_summary_matches_hand_arithmetic_and_vllm_key_names() -> None:
    s = dump_row(summarize(records_frame(RECORDS), duration_s=2.0))
    assert s["completed"] == 3
    assert s["failed"] == 1
    assert s["all_ok"] is False
    assert s["errors"] == {"HTTP 500: boom": 1}
    assert s["total_input_tokens"] == 30
    assert s["total_output_tokens"] == 11
    assert s["request_throughput"] == pytest.approx(1.5)
    assert s["output_throughput"] == pytest.approx(5.5)
    assert s["total_token_throughput"] == pytest.approx(20.5)
    ttfts = [100.0, 50.0, 200.0]
    assert s["mean_ttft_ms"] == pytest.approx(statistics.fmean(ttfts))
    assert s["median_ttft_ms"] == pytest.approx(100.0)
    assert s["std_ttft_ms"] == pytest.approx(statistics.pstdev(ttfts))
    assert s["p99_ttft_ms"] == pytest.approx(statistics.quantiles(ttfts, n=100, method="inclusive")[98])
    assert s["mean_tpot_ms"] == pytest.approx(10.0)
    itls = [10.0, 20.0, 30.0, 20.0]
    assert s["mean_itl_ms"] == pytest.approx(20.0)
    assert s["p90_itl_ms"] == pytest.approx(statistics.quantiles(itls, n=10, method="inclusive")[8])
    assert s["mean_e2el_ms"] == pytest.approx(statistics.fmean([160.0, 70.0, 200.0]))
    assert s["median_interactivity_tokens_per_s"] == pytest.approx(100.0)
    assert s["total_chunks"] == 7
    assert s["tokens_per_chunk"] == pytest.approx(11 / 7)
    assert s["tokens_per_chunk_after_first"] == pytest.approx((11 - 3) / (7 - 3))
    for key in (
        "mean_ttft_ms",
        "median_tpot_ms",
        "p99_itl_ms",
        "mean_e2el_ms",
        "output_throughput",
        "completed",
    ):
        assert key in s


def test_goodput_counts_requests_meeting_every_slo() -> None:
    s = dump_row(summarize(records_frame(RECORDS), duration_s=2.0, slo=SLO(ttft_ms=150, tpot_ms=10)))
    assert (
        s["good_requests"] == 2
    )  # request 2's TTFT of 200 ms misses; its null TPOT does not count against it
    assert s["request_goodput"] == pytest.approx(1.0)
    s = dump_row(summarize(records_frame(RECORDS), duration_s=2.0, slo=SLO(e2el_ms=100)))
    assert s["good_requests"] == 1
    assert "request_goodput" not in dump_row(summarize(records_frame(RECORDS), duration_s=2.0))


def test_per_gpu_throughput_and_disaggregated_split() -> None:
    s = dump_row(summarize(records_frame(RECORDS), duration_s=2.0, gpus=GpuLayout(tp=4, pp=2)))
    assert s["num_gpus"] == 8
    assert s["output_throughput_per_gpu"] == pytest.approx(5.5 / 8)
    assert s["total_token_throughput_per_gpu"] == pytest.approx(20.5 / 8)
    d = dump_row(
        summarize(records_frame(RECORDS), duration_s=2.0, gpus=GpuLayout(prefill_gpus=2, decode_gpus=6))
    )
    assert d["output_throughput_per_decode_gpu"] == pytest.approx(5.5 / 6)
    assert d["input_throughput_per_prefill_gpu"] == pytest.approx(15.0 / 2)


def test_custom_percentiles_and_empty_run() -> None:
    s = dump_row(summarize(records_frame(RECORDS), duration_s=1.0, percentiles=[99.9, 25]))
    assert "p99.9_ttft_ms" in s
    assert "p25_e2el_ms" in s
    empty = dump_row(summarize(records_frame([RECORDS[3]]), duration_s=1.0))
    assert empty["completed"] == 0
    assert empty["mean_ttft_ms"] is None
    assert empty["tokens_per_chunk"] is None
    with pytest.raises(InvalidInputError, match="duration_s"):
        summarize(records_frame(RECORDS), duration_s=0)


def test_missing_usage_falls_back_to_chunk_count() -> None:
    frame = per_request(records_frame([rec(0, 0, [10, 20, 30], out=None)]))
    assert frame["output_tokens"].to_list() == [3]


def test_records_round_trip_through_parquet(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = write_records(tmp_path / "r" / "records.parquet", RECORDS)
    back = read_records(path)
    assert back.height == 5
    assert back["chunk_ns"].to_list()[0] == [100 * MS, 110 * MS, 130 * MS, 160 * MS]
    assert back["error"].to_list()[3] == "HTTP 500: boom"
    assert summarize(back, duration_s=2.0).completed == 3


def test_one_chunk_output_gives_a_noted_null_interactivity_in_strict_json() -> None:
    import json

    from alflow.util.jsonutil import dumps

    # three tokens in one chunk: tpot_ms = 0, so 1000 / tpot_ms is infinite
    summary = summarize(records_frame([rec(0, 0, [50], out=3), *RECORDS[:2]]), duration_s=1.0)
    assert summary.interactivity.percentile(99) == float("inf")
    s = dump_row(summary)  # pydantic's JSON mode: null, the note beside it says why
    data = json.loads(dumps(s), parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
    assert data["p99_interactivity_tokens_per_s"] is None
    assert data["p99_interactivity_tokens_per_s_note"].startswith("not finite: tpot_ms = 0")
    assert data["median_ttft_ms"] == pytest.approx(50.0)  # finite values untouched
    assert "median_ttft_ms_note" not in data


def test_typed_summary_fields_agree_with_the_flat_keys() -> None:
    s = summarize(records_frame(RECORDS), duration_s=2.0, percentiles=[50, 99], gpus=GpuLayout(tp=2))
    flat = dump_row(s)
    assert (s.completed, s.failed, s.all_ok, s.num_gpus) == (3, 1, False, 2)
    assert s.errors == (("HTTP 500: boom", 1),)
    assert s.ttft.median == flat["median_ttft_ms"] == pytest.approx(100.0)
    assert s.ttft.percentile(99) == flat["p99_ttft_ms"]
    assert s.ttft.percentile(90) is None  # not asked for
    assert s.itl.mean == flat["mean_itl_ms"]
    assert s.interactivity.median == flat["median_interactivity_tokens_per_s"]
    assert s.output_throughput_per_gpu == flat["output_throughput_per_gpu"] == pytest.approx(5.5 / 2)
    assert "good_requests" not in flat
    assert s.good_requests is None


def test_stored_summary_has_the_keys_of_the_previous_release() -> None:
    """pydantic stores it (:func:`dump_row`) flat, as the hand-written ``to_dict`` did: no nested latency objects."""
    s = dump_row(summarize(records_frame(RECORDS), duration_s=2.0, slo=SLO(ttft_ms=150, tpot_ms=10)))
    figures = [f"{stat}_{name}" for name in ("e2el_ms", "interactivity_tokens_per_s", "itl_ms", "tpot_ms", "ttft_ms")
               for stat in ("mean", "median", "std", "p50", "p90", "p95", "p99")]  # fmt: skip
    assert sorted(s) == sorted([
        "all_ok", "client_timing", "client_verdict", "completed", "duration", "errors", "failed", "good_requests",
        "num_gpus", "num_nodes", "output_throughput", "output_throughput_per_gpu", "request_goodput",
        "request_throughput", "tokens_per_chunk", "tokens_per_chunk_after_first", "total_chunks",
        "total_input_tokens", "total_output_tokens", "total_token_throughput", "total_token_throughput_per_gpu",
        *figures,
    ])  # fmt: skip
    assert s["errors"] == {"HTTP 500: boom": 1}
    assert s["client_verdict"] == s["client_timing"]["verdict"] == "ok"
