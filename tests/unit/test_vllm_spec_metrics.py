"""vLLM's per-request ``metrics.speculative_decoding``: validation, records, the exact AL, the shape test, the sim.

The JSON below is what vLLM 0.32.0's own response models make of ``RequestSpecDecodeMetrics.to_dict()``
(``vllm/v1/metrics/stats.py``; ``PerRequestMetrics`` / ``SpeculativeDecodingMetrics`` in
``vllm/entrypoints/generate/base/protocol.py``), dumped as the servers dump them: the streamed final usage chunk
with ``exclude_none=True`` (``vllm/entrypoints/openai/completion/serving.py``; chat adds ``exclude_unset``), the
non-streamed body with ``model_dump()`` (the API routers), for one request of 5 verify steps at ``detailed`` and
one of 4 at ``summary`` (generated with the CPU build in ``.venv-vllm``); ``NON_STREAMED`` and ``STREAMED_USAGE``
are what the real CPU build sent here.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import polars as pl
import pytest
import typer
from typer.testing import CliRunner

import alflow.sim.cli as sim_cli
from alflow.acceptance.stats import SpecStats, from_counters, from_histogram
from alflow.acceptance.synthetic import distribution
from alflow.errors import InvalidInputError
from alflow.frameworks.vllm.requests import VLLM_COUNTS, speculative_decoding_counts
from alflow.gates import audit_synthetic
from alflow.loadgen.client import SseConsumer
from alflow.loadgen.counts import NO_REQUEST_SPEC, fill_spec_counts
from alflow.loadgen.endpoints import get_endpoint
from alflow.loadgen.frames import RECORD_SCHEMA, read_records, records_frame, with_record_columns
from alflow.loadgen.records import RequestRecord
from alflow.measure import PER_REQUEST_SOURCE, meta_info_totals, pooled_histogram, window_stats
from alflow.metrics.prometheus import Snapshot
from alflow.metrics.readers import count_readers
from alflow.sim.config import SimConfig
from alflow.sim.payloads import body_metrics_json, speculative_decoding, stream_metrics_json
from tests.unit.test_per_request_counts import FakeDialect

pytestmark = pytest.mark.unit

DETAILED_STREAM = (
    b'data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":4,'
    b'"total_tokens":16,"completion_tokens":12},"metrics":{"speculative_decoding":{"mean_acceptance_length":2.6,'
    b'"draft_acceptance_rate":0.5333333333333333,"acceptance_histogram":[1,1,2,1],"num_spec_steps":5,'
    b'"num_accepted_draft_tokens":8,"num_draft_tokens":15,"num_spec_tokens":3,"per_step_accepted":[2,0,3,1,2],'
    b'"per_step_drafted":[3,3,3,3,3]}}}\n\n'
)
SUMMARY_CHAT_STREAM = (
    b'data: {"id":"chatcmpl-1","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":4,"total_tokens":16,'
    b'"completion_tokens":12},"metrics":{"speculative_decoding":{"mean_acceptance_length":2.0,'
    b'"draft_acceptance_rate":0.3333333333333333,"acceptance_histogram":[1,2,1,0],"num_spec_steps":4,'
    b'"num_accepted_draft_tokens":4,"num_draft_tokens":12,"num_spec_tokens":3}}}\n\n'
)
SUMMARY_BODY_METRICS = (
    b'{"time_to_first_token_ms":null,"generation_time_ms":null,"queue_time_ms":null,"mean_itl_ms":null,'
    b'"tokens_per_second":null,"speculative_decoding":{"mean_acceptance_length":2.0,'
    b'"draft_acceptance_rate":0.3333333333333333,"acceptance_histogram":[1,2,1,0],"num_spec_steps":4,'
    b'"num_accepted_draft_tokens":4,"num_draft_tokens":12,"num_spec_tokens":3,"per_step_accepted":null,'
    b'"per_step_drafted":null}}'
)
DETAILED_BODY_METRICS = (
    b'{"time_to_first_token_ms":null,"generation_time_ms":null,"queue_time_ms":null,"mean_itl_ms":null,'
    b'"tokens_per_second":null,"speculative_decoding":{"mean_acceptance_length":2.6,'
    b'"draft_acceptance_rate":0.5333333333333333,"acceptance_histogram":[1,1,2,1],"num_spec_steps":5,'
    b'"num_accepted_draft_tokens":8,"num_draft_tokens":15,"num_spec_tokens":3,"per_step_accepted":[2,0,3,1,2],'
    b'"per_step_drafted":[3,3,3,3,3]}}'
)
CONTENT = b'data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"hi"}]}\n\n'

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


def _body(metrics: bytes) -> dict[str, object]:
    return {"id": "cmpl-1", "choices": [], "usage": {"prompt_tokens": 4}, "metrics": orjson.loads(metrics)}


def _spec(metrics: bytes, **change: object) -> dict[str, object]:
    body = _body(metrics)
    spec = body["metrics"]["speculative_decoding"]  # type: ignore[index]
    spec.update(change)
    return body


def _consume(*reads: bytes, endpoint: str = "completions") -> RequestRecord:
    record = RequestRecord(request_id=0, session_id="s")
    consumer = SseConsumer(record, get_endpoint(endpoint), keep_text=False, counts=[VLLM_COUNTS])
    for i, data in enumerate(reads):
        assert not consumer.feed(data, i + 1)
    consumer.finish()
    return record


# ------------------------------------------------------------------------------------ validation


def test_vllms_own_shapes_parse_summary_and_detailed() -> None:
    assert speculative_decoding_counts(_body(SUMMARY_BODY_METRICS))[:4] == (4, 4, 12, [1, 2, 1, 0])
    assert speculative_decoding_counts(_body(DETAILED_BODY_METRICS))[:4] == (5, 8, 15, [1, 1, 2, 1])


@pytest.mark.parametrize(
    "change",
    [
        {"num_spec_tokens": 4},  # the histogram has K + 1 = 4 buckets
        {"num_spec_tokens": "3"},
        {"per_step_accepted": [2, 0, 3, 1]},  # one step short
        {"per_step_accepted": [2, 0, 3, 1, 1]},  # sums to 7, not 8
        {"per_step_drafted": [3, 3, 3, 3, 2]},  # sums to 14, not 15
        {"per_step_drafted": None},  # half of the detailed pair
        {"per_step_accepted": [2, 0, 3, 1, 2.0]},
        {"per_step_accepted": "2,0,3,1,2"},
        {"acceptance_histogram": [1, 1, 2, False, 1]},
        {"num_accepted_draft_tokens": -8},
    ],
)
def test_detailed_and_k_must_agree_with_the_counts(change: dict[str, object]) -> None:
    assert speculative_decoding_counts(_spec(DETAILED_BODY_METRICS, **change)) == NO_REQUEST_SPEC


def test_num_spec_tokens_is_optional() -> None:
    body = _body(SUMMARY_BODY_METRICS)
    del body["metrics"]["speculative_decoding"]["num_spec_tokens"]  # type: ignore[index]
    assert speculative_decoding_counts(body).steps == 4


def test_a_request_without_verify_steps_reports_zero_steps() -> None:
    body = _spec(SUMMARY_BODY_METRICS, acceptance_histogram=[0, 0, 0, 0], num_spec_steps=0)
    body["metrics"]["speculative_decoding"] |= {"num_accepted_draft_tokens": 0, "num_draft_tokens": 0}  # type: ignore[index]
    assert speculative_decoding_counts(body)[:4] == (0, 0, 0, [0, 0, 0, 0])


def test_a_non_streamed_body_gives_the_requests_counts() -> None:
    got = speculative_decoding_counts(NON_STREAMED)
    assert got[:4] == (28, 35, 84, [0, 21, 7, 0])


def test_detailed_arrays_are_accepted_and_do_not_change_the_counts() -> None:
    body = orjson.loads(orjson.dumps(NON_STREAMED))
    spec = body["metrics"]["speculative_decoding"]
    spec["acceptance_histogram"] = [1, 1, 1, 0]
    spec |= {"num_spec_steps": 3, "num_accepted_draft_tokens": 3, "num_draft_tokens": 9}
    spec |= {"per_step_accepted": [2, 0, 1], "per_step_drafted": [3, 3, 3]}
    assert speculative_decoding_counts(body)[:4] == (3, 3, 9, [1, 1, 1, 0])


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


# ------------------------------------------------------------------------------------ into the record


def test_the_streamed_usage_chunk_fills_the_record_detailed() -> None:
    record = _consume(CONTENT, DETAILED_STREAM[:57], DETAILED_STREAM[57:] + b"data: [DONE]\n\n")
    assert record.error is None
    assert (record.output_tokens, record.spec_verify_ct, record.spec_accepted_drafts) == (12, 5, 8)
    assert (record.spec_draft_tokens, record.spec_accept_hist) == (15, [1, 1, 2, 1])


def test_the_chat_usage_chunk_fills_the_record() -> None:
    content = b'data: {"id":"chatcmpl-1","choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'
    record = _consume(content, SUMMARY_CHAT_STREAM + b"data: [DONE]\n\n", endpoint="chat")
    assert (record.spec_verify_ct, record.spec_accepted_drafts, record.spec_accept_hist) == (
        4,
        4,
        [1, 2, 1, 0],
    )


def test_an_inconsistent_object_is_dropped_without_failing_the_stream() -> None:
    bad = DETAILED_STREAM.replace(b'"num_spec_steps":5', b'"num_spec_steps":6')
    record = _consume(CONTENT, bad, b"data: [DONE]\n\n")
    assert record.error is None
    assert record.ok
    assert record.output_tokens == 12
    assert (record.spec_verify_ct, record.spec_accepted_drafts, record.spec_draft_tokens) == (
        None,
        None,
        None,
    )
    assert record.spec_accept_hist is None


@pytest.mark.parametrize(
    "metrics", [b'"metrics":null', b'"metrics":{"speculative_decoding":null}', b'"metrics":"speculative"']
)
def test_absent_or_odd_metrics_leave_the_counts_null(metrics: bytes) -> None:
    usage = b'data: {"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":1},%b}\n\n' % metrics
    record = _consume(CONTENT, usage, b"data: [DONE]\n\n")
    assert record.ok
    assert record.spec_verify_ct is None


def test_content_chunks_carrying_metrics_are_not_read() -> None:
    # only the event with usage counts: a content chunk's object (never sent by vLLM) is ignored
    content = CONTENT.replace(
        b'"choices"', DETAILED_STREAM[DETAILED_STREAM.index(b'"metrics"') : -3] + b',"choices"'
    )
    record = _consume(content, b'data: {"choices":[],"usage":{"completion_tokens":1}}\n\ndata: [DONE]\n\n')
    assert record.spec_verify_ct is None


def test_a_non_streamed_body_fills_the_record() -> None:
    record = RequestRecord(request_id=0, session_id="s")
    fill_spec_counts(record, orjson.loads(orjson.dumps(_body(DETAILED_BODY_METRICS))), [VLLM_COUNTS])
    assert (record.spec_verify_ct, record.spec_accepted_drafts, record.spec_draft_tokens) == (5, 8, 15)
    assert record.spec_accept_hist == [1, 1, 2, 1]
    other = RequestRecord(request_id=1, session_id="s")
    fill_spec_counts(other, _spec(DETAILED_BODY_METRICS, num_draft_tokens=7), [VLLM_COUNTS])
    assert (other.spec_verify_ct, other.spec_accept_hist) == (None, None)
    sglang = RequestRecord(request_id=2, session_id="s")
    fill_spec_counts(
        sglang,
        {
            "sglext": {
                "spec_tokens_details": {
                    "spec_verify_ct": 7,
                    "spec_num_correct_drafts": 9,
                    "spec_num_proposed_drafts": 21,
                }
            }
        },
        count_readers(None),  # a run whose dialect is not known reads either framework's counts
    )
    assert (sglang.spec_verify_ct, sglang.spec_accepted_drafts, sglang.spec_accept_hist) == (7, 9, None)


def test_the_streamed_usage_chunk_fills_the_record() -> None:
    record = RequestRecord(request_id=0, session_id="s")
    consumer = SseConsumer(record, get_endpoint("chat"), keep_text=False, counts=[VLLM_COUNTS])
    content = b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'
    assert not consumer.feed(content + STREAMED_USAGE[:40], 1)
    assert not consumer.feed(STREAMED_USAGE[40:] + b"data: [DONE]\n\n", 2)
    assert (record.output_tokens, record.spec_verify_ct, record.spec_accepted_drafts) == (16, 7, 9)
    assert (record.spec_draft_tokens, record.spec_accept_hist) == (21, [0, 5, 2, 0])


# ------------------------------------------------------------------------------------ records


def test_frames_without_any_spec_column_load_and_report_nothing(tmp_path: Path) -> None:
    spec_columns = ["spec_verify_ct", "spec_accepted_drafts", "spec_draft_tokens", "spec_accept_hist"]
    old = records_frame([RequestRecord(request_id=0, session_id="a")]).drop(spec_columns)
    path = tmp_path / "old.parquet"
    old.write_parquet(path)
    back = read_records(path)
    assert list(back.columns) == list(RECORD_SCHEMA)
    assert back.schema["spec_accept_hist"] == pl.List(pl.Int64)
    assert back.schema["spec_draft_tokens"] == pl.Int64
    assert with_record_columns(old).equals(back)
    totals = meta_info_totals(back)
    assert (totals.requests, totals.reported, totals.histogram) == (1, 0, None)


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


# ------------------------------------------------------------------------------------ stats from a histogram


def test_from_histogram_is_the_counters_formula_on_the_pooled_histogram() -> None:
    stats = from_histogram([1, 29, 9, 0], draft_tokens=117, note="n")
    assert (stats.num_drafts, stats.accepted_tokens, stats.k, stats.draft_tokens) == (39, 47, 3, 117)
    assert stats.accepted_per_position == (38, 9, 0)
    assert stats.histogram == {1: 1, 2: 29, 3: 9, 4: 0}
    assert stats.al == pytest.approx(1 + 47 / 39, abs=1e-15)
    assert stats.acceptance_rate == pytest.approx(47 / 117)
    assert stats.ci is not None
    assert stats.ci.method == "histogram-iid"
    same = from_counters(39, 47, draft_tokens=117, accepted_per_position=[38, 9, 0], k=3, note="n")
    assert stats == same


def test_from_histogram_refuses_what_is_not_one() -> None:
    with pytest.raises(InvalidInputError, match="3 buckets, not K \\+ 1 = 4"):
        from_histogram([1, 2, 3], k=3)
    with pytest.raises(InvalidInputError, match="at least one bucket"):
        from_histogram([])
    with pytest.raises(InvalidInputError, match="histogram\\[1\\]"):
        from_histogram([1, 2.5, 0])
    assert not from_histogram([0, 0, 0]).observed


# ------------------------------------------------------------------------------------ window_stats


def _snap(t: int) -> Snapshot:
    return Snapshot(url="http://x/metrics", wall_time_s=float(t), mono_ns=t, samples={}, types={})


def _vllm_window(counters: SpecStats, records: pl.DataFrame) -> tuple[SpecStats | None, str | None]:
    """:func:`window_stats` at K = 3 for a vLLM dialect whose responses carry ``metrics.speculative_decoding``."""
    return window_stats(
        FakeDialect("vllm", counters, request_counts="metrics.speculative_decoding"),
        _snap(1),
        _snap(2),
        k=3,
        records=records,
    )


def _records(
    hists: list[list[int] | None], *, warmup_without_counts: int = 0, warmup_with_counts: int = 0
) -> pl.DataFrame:
    recs = []
    for i, h in enumerate(hists):
        rec = RequestRecord(request_id=i, session_id=str(i))
        if h is not None:
            rec.spec_verify_ct, rec.spec_accepted_drafts = sum(h), sum(j * c for j, c in enumerate(h))
            rec.spec_draft_tokens, rec.spec_accept_hist = 3 * sum(h), h
        recs.append(rec)
    recs += [
        RequestRecord(request_id=100 + i, session_id="w", warmup=True) for i in range(warmup_without_counts)
    ]
    recs += [
        RequestRecord(
            request_id=300 + i, session_id="w", warmup=True, spec_verify_ct=50, spec_accepted_drafts=150,
            spec_draft_tokens=150, spec_accept_hist=[0, 0, 0, 50],
        )
        for i in range(warmup_with_counts)
    ]  # fmt: skip
    recs.append(RequestRecord(request_id=200, session_id="f", error="boom"))  # a failed request never counts
    return records_frame(recs)


def _min_variance_hists(requests: int, steps: int) -> list[list[int]]:
    """vLLM's min-variance schedule at AL 2.3, K = 3: 70% of steps accept 1 draft, 30% accept 2."""
    return [[0, steps * 7 // 10, steps * 3 // 10, 0] for _ in range(requests)]


def test_vllm_exact_path_uses_the_pooled_histogram_and_ignores_warm_up_without_counts() -> None:
    records = _records(_min_variance_hists(20, 50), warmup_without_counts=3)
    counters = from_counters(1010, 1310, k=3)  # the window saw a few more steps than the measured requests
    stats, error = _vllm_window(counters, records)
    assert error is None
    assert stats is not None
    assert stats.source == "per-request"
    assert stats.histogram == {1: 0, 2: 700, 3: 300, 4: 0}
    assert (stats.num_drafts, stats.accepted_tokens, stats.draft_tokens) == (1000, 1300, 3000)
    assert stats.al == pytest.approx(2.3)
    assert stats.ci is not None
    assert stats.ci.method == "histogram-iid"
    assert stats.note.startswith(
        "exact, from the metrics.speculative_decoding of 20 requests; counters: AL 2.2970"
    )
    assert "(per-request minus counters: +0.0030)" in stats.note
    # the shape test runs on the pooled histogram: the right scheme fits, a wrong one does not
    assert audit_synthetic(stats, distribution("vllm", 3, al=2.3), subject="p").passed
    wrong = audit_synthetic(stats, distribution("constant-conditional", 3, al=2.3), subject="p")
    assert not wrong.passed
    assert "does not fit scheme constant-conditional" in wrong.message


def test_a_dialect_that_names_no_source_still_gets_the_exact_path() -> None:
    stats, error = window_stats(
        FakeDialect("other", None, request_counts=None), _snap(1), _snap(2), records=_records([[0, 2, 1, 1]])
    )
    assert error is None
    assert stats is not None
    assert (stats.k, stats.al, stats.histogram) == (3, pytest.approx(1 + 7 / 4), {1: 0, 2: 2, 3: 1, 4: 1})
    assert stats.note.startswith(
        f"exact, from the {PER_REQUEST_SOURCE} of 1 requests; counters: unavailable ("
    )


def test_partial_coverage_keeps_the_counters_and_counts_the_missing() -> None:
    counters = from_counters(100, 130, k=3, note="counters")
    stats, error = _vllm_window(counters, _records([[0, 7, 3, 0], None, None]))
    assert error is None
    assert stats is not None
    assert (stats.source, stats.al, stats.histogram) == ("counters", counters.al, counters.histogram)
    assert (
        stats.note
        == "counters; 2 of 3 measured requests lacked metrics.speculative_decoding: AL from the counters"
    )


def test_histograms_that_disagree_with_the_counts_fall_back_to_the_counters() -> None:
    records = _records([[0, 7, 3, 0]]).with_columns(
        pl.when(pl.col("error").is_null()).then(11).otherwise(None).alias("spec_verify_ct")
    )
    counters = from_counters(10, 13, k=3)
    stats, _ = _vllm_window(counters, records)
    assert stats is not None
    assert stats.source == "counters"
    assert "histograms disagree with the requests' step and accepted-draft counts" in stats.note


def test_vllm_per_request_histograms_are_the_exact_source_and_the_histogram() -> None:
    records = _records([[0, 21, 7, 0], [0, 5, 2, 0], [1, 3, 0, 0]], warmup_with_counts=2)
    counters = from_counters(40, 52, k=3, note="counters")  # one step more than the requests saw
    stats, error = _vllm_window(counters, records)
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
    records = _records([[0, 21, 7, 0], None])
    counters = from_counters(40, 52, k=3, note="counters")
    stats, _ = _vllm_window(counters, records)
    assert stats is not None
    assert (stats.al, stats.num_drafts, stats.histogram) == (
        counters.al,
        counters.num_drafts,
        counters.histogram,
    )
    assert "1 of 2 measured requests lacked metrics.speculative_decoding" in stats.note


def test_histograms_of_another_k_are_refused_naming_the_source() -> None:
    records = _records([[0, 21, 7]])  # K = 2 buckets on a K = 3 server
    counters = from_counters(28, 35, k=3)
    stats, _ = _vllm_window(counters, records)
    assert stats is not None
    assert stats.al == counters.al
    assert "histograms have 3 buckets, not K + 1 = 4" in stats.note


def test_pooled_histograms_and_totals() -> None:
    assert pooled_histogram([[1, 2], [0, 1, 5]]) == (1, 3, 5)
    assert pooled_histogram([[1, 2], None]) is None
    assert pooled_histogram([]) is None
    totals = meta_info_totals(_records([[0, 1, 2, 0], [3, 0, 0, 0]], warmup_with_counts=1))
    assert (totals.requests, totals.reported, totals.verify_ct, totals.accepted_drafts) == (2, 2, 6, 5)
    assert (totals.draft_tokens, totals.histogram) == (18, (3, 1, 2, 0))


# ------------------------------------------------------------------------------------ the sim's object


def test_the_sims_object_is_vllms_byte_for_byte() -> None:
    steps = [2, 0, 3, 1, 2]
    assert body_metrics_json([1, 2, 1, 0], 3, None) == SUMMARY_BODY_METRICS
    assert body_metrics_json([1, 1, 2, 1], 3, steps) == DETAILED_BODY_METRICS
    streamed = DETAILED_STREAM[DETAILED_STREAM.index(b'"metrics":') + 10 : -3]
    assert stream_metrics_json([1, 1, 2, 1], 3, steps) == streamed
    summary = SUMMARY_CHAT_STREAM[SUMMARY_CHAT_STREAM.index(b'"metrics":') + 10 : -3]
    assert stream_metrics_json([1, 2, 1, 0], 3, None) == summary
    assert stream_metrics_json([1, 2, 1, 0], 3, []) == summary  # detailed with no step: vLLM omits the arrays


def test_a_request_with_no_step_is_what_vllm_sends() -> None:
    assert speculative_decoding([0, 0, 0], 2, []) == {
        "mean_acceptance_length": 1.0,
        "draft_acceptance_rate": 0.0,
        "acceptance_histogram": [0, 0, 0],
        "num_spec_steps": 0,
        "num_accepted_draft_tokens": 0,
        "num_draft_tokens": 0,
        "num_spec_tokens": 2,
    }


@pytest.mark.parametrize(
    ("dialect", "level", "message"),
    [
        (
            "sglang",
            "summary",
            "--per-request-spec-decode-metrics summary is vLLM's (--dialect vllm), not sglang's",
        ),
        (
            "trtllm",
            "detailed",
            "--per-request-spec-decode-metrics detailed is vLLM's (--dialect vllm), not trtllm's",
        ),
        ("vllm", "full", "--per-request-spec-decode-metrics 'full' is not one of none, summary, detailed"),
    ],
)
def test_the_sim_refuses_the_flag_outside_vllm_in_one_line(dialect: str, level: str, message: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        SimConfig(dialect=dialect, per_request_spec_decode_metrics=level).validate()  # type: ignore[arg-type]
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_the_sim_cli_takes_the_recipes_spelling(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--speculative-config JSON --per-request-spec-decode-metrics summary``, as alflow/frameworks/vllm/recipe.py renders."""
    seen: list[SimConfig] = []
    monkeypatch.setattr(sim_cli, "run_server", seen.append)
    spec = '{"method":"mtp","num_speculative_tokens":3,"rejection_sample_method":"synthetic","synthetic_acceptance_length":2.3}'
    app = typer.Typer()
    app.command(context_settings=sim_cli.FRAMEWORK_FLAGS)(sim_cli.serve_command)
    result = CliRunner().invoke(
        app,
        ["--dialect", "vllm", "--speculative-config", spec, "--per-request-spec-decode-metrics", "summary"],
    )
    assert result.exit_code == 0, result.output
    assert [(c.per_request_spec_decode_metrics, c.k, c.synthetic_al) for c in seen] == [("summary", 3, 2.3)]
    refused = CliRunner().invoke(app, ["--dialect", "sglang", "--per-request-spec-decode-metrics", "summary"])
    assert refused.exit_code == 2
    assert not seen[1:]


def test_detailed_per_step_arrays_give_the_histogram_of_the_full_k_steps() -> None:
    from alflow.frameworks.vllm.requests import full_k_histogram

    spec = {
        "mean_acceptance_length": 1.0 + 5 / 4,
        "draft_acceptance_rate": 5 / 10,
        "acceptance_histogram": [1, 1, 2, 0],
        "num_spec_steps": 4,
        "num_accepted_draft_tokens": 5,
        "num_draft_tokens": 10,
        "num_spec_tokens": 3,
        "per_step_accepted": [2, 1, 2, 0],
        "per_step_drafted": [3, 3, 3, 1],  # the last step carried one draft (an n-gram partial match)
    }
    got = speculative_decoding_counts({"metrics": {"speculative_decoding": spec}})
    assert got.full_k_histogram == [0, 1, 2, 0]  # the three full steps: one accepted 1, two accepted 2
    record = RequestRecord(request_id=0, session_id="s")
    fill_spec_counts(record, {"metrics": {"speculative_decoding": spec}}, [VLLM_COUNTS])
    assert record.spec_full_k_hist == [0, 1, 2, 0]
    summary = {k: v for k, v in spec.items() if not k.startswith("per_step")}
    assert (
        speculative_decoding_counts({"metrics": {"speculative_decoding": summary}}).full_k_histogram is None
    )
    assert full_k_histogram([2], [1], 3) is None  # accepted more than drafted: not a count to trust
