"""vLLM's per-request acceptance (``metrics.speculative_decoding``): parsing, records, the exact AL source.

The JSON shapes are vLLM 0.32.0's (``RequestSpecDecodeMetrics.to_dict``; the streamed usage chunk of
``vllm/entrypoints/openai/completion/serving.py``), as seen from the real CPU build here.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import polars as pl
import pytest

from alflow.acceptance.stats import from_counters
from alflow.loadgen.client import NO_REQUEST_SPEC, SseConsumer, speculative_decoding_counts
from alflow.loadgen.endpoints import get_endpoint
from alflow.loadgen.records import RECORD_SCHEMA, RequestRecord, read_records, records_frame
from alflow.measure import meta_info_totals, pooled_histogram, window_stats
from alflow.metrics.prometheus import Snapshot
from tests.unit.test_per_request_counts import FakeDialect

pytestmark = pytest.mark.unit

# a non-streamed vLLM 0.32.0 response's metrics (summary level), as the CPU build sent it here
NON_STREAMED = {
    "usage": {"prompt_tokens": 6, "completion_tokens": 64},
    "metrics": {
        "time_to_first_token_ms": None,
        "speculative_decoding": {
            "mean_acceptance_length": 2.25,
            "draft_acceptance_rate": 0.4166666666666667,
            "acceptance_histogram": [0, 21, 7, 0],
            "num_spec_steps": 28,
            "num_accepted_draft_tokens": 35,
            "num_draft_tokens": 84,
            "num_spec_tokens": 3,
            "per_step_accepted": None,
            "per_step_drafted": None,
        },
    },
}
STREAMED_USAGE = (
    b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"smol","choices":[],'
    b'"usage":{"prompt_tokens":31,"total_tokens":47,"completion_tokens":16},"system_fingerprint":"vllm-0.32.0",'
    b'"metrics":{"speculative_decoding":{"mean_acceptance_length":2.2857142857142856,"draft_acceptance_rate":'
    b'0.42857142857142855,"acceptance_histogram":[0,5,2,0],"num_spec_steps":7,"num_accepted_draft_tokens":9,'
    b'"num_draft_tokens":21,"num_spec_tokens":3}}}\n\n'
)


def test_a_non_streamed_body_gives_the_requests_counts() -> None:
    got = speculative_decoding_counts(NON_STREAMED)
    assert got == (28, 35, 84, [0, 21, 7, 0])


def test_detailed_arrays_are_accepted_and_do_not_change_the_counts() -> None:
    body = orjson.loads(orjson.dumps(NON_STREAMED))
    spec = body["metrics"]["speculative_decoding"]
    spec["acceptance_histogram"] = [1, 1, 1, 0]
    spec |= {"num_spec_steps": 3, "num_accepted_draft_tokens": 3, "num_draft_tokens": 9}
    spec |= {"per_step_accepted": [2, 0, 1], "per_step_drafted": [3, 3, 3]}
    assert speculative_decoding_counts(body) == (3, 3, 9, [1, 1, 1, 0])


@pytest.mark.parametrize(
    "change",
    [
        {"num_spec_steps": 27},  # the histogram sums to 28
        {"num_accepted_draft_tokens": 34},  # sum(j * hist[j]) is 35
        {"num_draft_tokens": 30},  # fewer proposed than accepted
        {"acceptance_histogram": [0, 21, -7, 14]},
        {"acceptance_histogram": [0, 21, 7.0, 0]},
        {"acceptance_histogram": [0, True, 7, 0]},
        {"acceptance_histogram": []},
        {"acceptance_histogram": None},
        {"num_spec_steps": None},
        {"num_draft_tokens": "84"},
    ],
)
def test_a_server_whose_counts_contradict_themselves_is_not_believed(change: dict[str, object]) -> None:
    body = orjson.loads(orjson.dumps(NON_STREAMED))
    body["metrics"]["speculative_decoding"].update(change)
    assert speculative_decoding_counts(body) == NO_REQUEST_SPEC


def test_no_metrics_means_no_counts() -> None:
    assert speculative_decoding_counts({"usage": {}}) == NO_REQUEST_SPEC
    assert speculative_decoding_counts({"metrics": None}) == NO_REQUEST_SPEC
    assert speculative_decoding_counts({"metrics": {"speculative_decoding": None}}) == NO_REQUEST_SPEC


def test_the_streamed_usage_chunk_fills_the_record() -> None:
    record = RequestRecord(request_id=0, session_id="s")
    consumer = SseConsumer(record, get_endpoint("chat"), keep_text=False)
    content = b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'
    assert not consumer.feed(content + STREAMED_USAGE[:40], 1)
    assert not consumer.feed(STREAMED_USAGE[40:] + b"data: [DONE]\n\n", 2)
    assert (record.output_tokens, record.spec_verify_ct, record.spec_accepted_drafts) == (16, 7, 9)
    assert (record.spec_draft_tokens, record.spec_accept_hist) == (21, [0, 5, 2, 0])


def test_records_round_trip_and_older_frames_load(tmp_path: Path) -> None:
    rec = RequestRecord(request_id=0, session_id="a", spec_verify_ct=7, spec_accepted_drafts=9)
    rec.spec_draft_tokens, rec.spec_accept_hist = 21, [0, 5, 2, 0]
    frame = records_frame([rec, RequestRecord(request_id=1, session_id="b")])
    assert frame.schema["spec_accept_hist"] == pl.List(pl.Int64)
    path = tmp_path / "r.parquet"
    frame.write_parquet(path)
    assert read_records(path).equals(frame)
    old = frame.drop("spec_draft_tokens", "spec_accept_hist").with_columns(pl.lit(4).alias("concurrency"))
    old.write_parquet(path)
    back = read_records(path)
    assert list(back.columns) == [*RECORD_SCHEMA, "concurrency"]
    assert back["spec_accept_hist"].to_list() == [None, None]


def _frame(hists: list[list[int] | None], *, warmup: int = 0) -> pl.DataFrame:
    recs = []
    for i, h in enumerate(hists):
        rec = RequestRecord(request_id=i, session_id=str(i))
        if h is not None:
            rec.spec_verify_ct = sum(h)
            rec.spec_accepted_drafts = sum(j * c for j, c in enumerate(h))
            rec.spec_draft_tokens = 3 * sum(h)
            rec.spec_accept_hist = h
        recs.append(rec)
    recs += [
        RequestRecord(
            request_id=100 + i, session_id="w", warmup=True, spec_verify_ct=50, spec_accepted_drafts=150,
            spec_draft_tokens=150, spec_accept_hist=[0, 0, 0, 50],
        )
        for i in range(warmup)
    ]  # fmt: skip
    return records_frame(recs)


def _snap(t: int) -> Snapshot:
    return Snapshot(url="http://x/metrics", wall_time_s=float(t), mono_ns=t, samples={}, types={})


def test_vllm_per_request_histograms_are_the_exact_source_and_the_histogram() -> None:
    records = _frame([[0, 21, 7, 0], [0, 5, 2, 0], [1, 3, 0, 0]], warmup=2)
    counters = from_counters(40, 52, k=3, note="counters")  # one step more than the requests saw
    stats, error = window_stats(
        FakeDialect("vllm", counters, request_counts="metrics.speculative_decoding"),
        _snap(1),
        _snap(2),
        k=3,
        records=records,
    )
    assert error is None
    assert stats is not None
    assert (stats.num_drafts, stats.accepted_tokens, stats.draft_tokens) == (39, 47, 117)
    assert stats.histogram == {1: 1, 2: 29, 3: 9, 4: 0}  # accept LENGTH (drafts + 1) -> steps, pooled
    assert stats.accepted_per_position == (38, 9, 0)
    assert stats.al == pytest.approx(1 + 47 / 39, abs=1e-12)
    assert stats.ci is not None
    assert stats.ci.method == "histogram-iid"
    note = stats.note
    assert note.startswith("exact, from the metrics.speculative_decoding of 3 requests")
    assert f"counters: AL {counters.al:.4f}" in note
    assert f"per-request minus counters: {1 + 47 / 39 - 2.3:+.4f}" in note


def test_requests_without_a_histogram_keep_the_counters_histogram_out() -> None:
    records = _frame([[0, 21, 7, 0], None])
    counters = from_counters(40, 52, k=3, note="counters")
    stats, _ = window_stats(
        FakeDialect("vllm", counters, request_counts="metrics.speculative_decoding"),
        _snap(1),
        _snap(2),
        k=3,
        records=records,
    )
    assert stats is not None
    assert (stats.al, stats.num_drafts, stats.histogram) == (
        counters.al,
        counters.num_drafts,
        counters.histogram,
    )
    assert "1 of 2 measured requests lacked metrics.speculative_decoding" in stats.note


def test_histograms_of_another_k_are_refused_naming_the_source() -> None:
    records = _frame([[0, 21, 7]])  # K = 2 buckets on a K = 3 server
    counters = from_counters(28, 35, k=3)
    stats, _ = window_stats(
        FakeDialect("vllm", counters, request_counts="metrics.speculative_decoding"),
        _snap(1),
        _snap(2),
        k=3,
        records=records,
    )
    assert stats is not None
    assert stats.al == counters.al
    assert "histograms have 3 buckets, not K + 1 = 4" in stats.note


def test_pooled_histograms_and_totals() -> None:
    assert pooled_histogram([[1, 2], [0, 1, 5]]) == (1, 3, 5)
    assert pooled_histogram([[1, 2], None]) is None
    assert pooled_histogram([]) is None
    totals = meta_info_totals(_frame([[0, 1, 2, 0], [3, 0, 0, 0]], warmup=1))
    assert (totals.requests, totals.reported, totals.verify_ct, totals.accepted_drafts) == (2, 2, 6, 5)
    assert (totals.draft_tokens, totals.histogram) == (18, (3, 1, 2, 0))
