"""SGLang's per-request speculative counts (``sglext.spec_tokens_details``): parsing, records, and AL from them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import polars as pl
import pytest

from alflow.acceptance.stats import SpecStats, from_counters
from alflow.errors import AlflowError
from alflow.frameworks.sglang.requests import SGLANG_COUNTS, spec_tokens_details_counts
from alflow.frameworks.vllm.requests import VLLM_COUNTS
from alflow.loadgen.counts import RequestSpec, fill_spec_counts
from alflow.loadgen.endpoints import CompletionsEndpoint
from alflow.loadgen.frames import RECORD_SCHEMA, read_records, records_frame, write_records
from alflow.loadgen.records import RequestRecord
from alflow.loadgen.spec import Target
from alflow.measure import meta_info_totals, window_stats, with_request_fields
from alflow.metrics.prometheus import Snapshot
from alflow.metrics.readers import count_readers, dialects, get_dialect
from tests.unit.test_loadgen_stream import DONE, chat, ev, run, usage

pytestmark = pytest.mark.unit


def details(steps: int, accepted: int, k: int = 3, hist: list[int] | None = None) -> dict[str, object]:
    """``SpecTokensDetails`` as SGLang (PR #33518) dumps it, for a request whose every step drafted K."""
    return {
        "spec_accept_rate": accepted / (steps * k) if steps else 0.0,
        "spec_accept_length": 99.0,  # completion / steps, prefill counted: never read (a wrong value here)
        "spec_cap_length": 0.0,
        "spec_block_accept_length": 0.0,
        "spec_num_correct_drafts": accepted,
        "spec_num_proposed_drafts": steps * k,
        "spec_verify_ct": steps,
        "spec_correct_drafts_histogram": hist if hist is not None else [],
        "spec_cap_lens_histogram": [],
    }


def sglext_chunk(spec: object) -> bytes:
    """SGLang's streamed sglext chunk: ``choices`` empty, response-level ``sglext`` (serving_chat.py)."""
    return ev({"id": "x", "object": "chat.completion.chunk", "choices": [], "model": "m", "sglext": spec})


# ------------------------------------------------------------------------------------ parsing


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (details(7, 9, hist=[1, 3, 3, 0]), RequestSpec(7, 9, 21, [1, 3, 3, 0])),
        (details(7, 9), RequestSpec(7, 9, 21, None)),  # no histogram (SGLang sends [])
        (details(0, 0), RequestSpec(0, 0, 0, None)),
        # the histogram must agree with the counts, accepted <= proposed, counts are non-negative integers
        (details(7, 9, hist=[1, 2, 2, 1]), RequestSpec(None, None, None, None)),
        (details(7, 9, hist=[0, 1, 2, 2, 2][:4]), RequestSpec(None, None, None, None)),
        ({**details(7, 9), "spec_num_proposed_drafts": 8}, RequestSpec(None, None, None, None)),
        ({**details(7, 9), "spec_verify_ct": -1}, RequestSpec(None, None, None, None)),
        ({**details(7, 9), "spec_verify_ct": True}, RequestSpec(None, None, None, None)),
        ({**details(7, 9), "spec_num_correct_drafts": 2.5}, RequestSpec(None, None, None, None)),
        ({**details(7, 9), "spec_correct_drafts_histogram": [1, "2"]}, RequestSpec(None, None, None, None)),
        ({"spec_accept_length": 2.5}, RequestSpec(None, None, None, None)),
    ],
)
def test_spec_tokens_details_counts_checks_and_reads_the_object(spec: dict, expected: RequestSpec) -> None:
    assert spec_tokens_details_counts({"sglext": {"spec_tokens_details": spec}}) == expected


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"usage": {"prompt_tokens": 1}},
        {"sglext": None},
        {"sglext": {"cached_tokens_details": {}}},
        {"sglext": {"spec_tokens_details": [details(7, 9)]}},  # n > 1: a list, not used
        {"meta_info": {"spec_verify_ct": 7, "spec_num_correct_drafts": 9}},  # not on the OpenAI endpoints
    ],
)
def test_no_spec_tokens_details_object_gives_nulls(body: dict) -> None:
    assert spec_tokens_details_counts(body) == RequestSpec(None, None, None, None)


def test_spec_accept_length_is_never_read() -> None:
    # AL comes from the counts only: 1 + 9/7, whatever spec_accept_length says
    got = spec_tokens_details_counts(
        {"sglext": {"spec_tokens_details": {**details(7, 9), "spec_accept_length": 1}}}
    )
    assert (got.steps, got.accepted_drafts) == (7, 9)


def test_non_streamed_sglang_body() -> None:
    body = orjson.loads(
        b'{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,'
        b'"text":"hi","logprobs":null,"finish_reason":"length","matched_stop":null}],'
        b'"usage":{"prompt_tokens":4,"total_tokens":24,"completion_tokens":20},'
        b'"sglext":{"spec_tokens_details":{"spec_accept_rate":0.4583333333333333,"spec_accept_length":2.5,'
        b'"spec_cap_length":0.0,"spec_block_accept_length":0.0,"spec_num_correct_drafts":11,'
        b'"spec_num_proposed_drafts":24,"spec_verify_ct":8,"spec_correct_drafts_histogram":[2,2,3,1],'
        b'"spec_cap_lens_histogram":[]}}}'
    )
    record = RequestRecord(request_id=0, session_id="s")
    fill_spec_counts(record, body, [SGLANG_COUNTS])
    assert (record.spec_verify_ct, record.spec_accepted_drafts, record.spec_draft_tokens) == (8, 11, 24)
    assert record.spec_accept_hist == [2, 2, 3, 1]


async def test_streamed_sglext_chunk_fills_the_record() -> None:
    spec = {"spec_tokens_details": details(2, 3, hist=[0, 1, 1, 0])}
    rec = await run([(10, chat("a")), (20, chat("bcde")), (25, sglext_chunk(spec)), (30, usage(5, 6) + DONE)])
    assert rec.ok, rec.error
    assert (rec.output_tokens, rec.spec_verify_ct, rec.spec_accepted_drafts) == (6, 2, 3)
    assert (rec.spec_draft_tokens, rec.spec_accept_hist) == (6, [0, 1, 1, 0])
    assert len(rec.chunk_ns) == 2  # the sglext chunk carries no output


async def test_streamed_sglext_chunk_on_the_completions_endpoint() -> None:
    text = ev({"id": "x", "choices": [{"index": 0, "text": "abc"}]})
    spec = {"spec_tokens_details": details(4, 5)}
    rec = await run(
        [(10, text), (15, sglext_chunk(spec)), (20, usage(5, 3) + DONE)], endpoint=CompletionsEndpoint()
    )
    assert rec.ok, rec.error
    assert (rec.spec_verify_ct, rec.spec_accepted_drafts) == (4, 5)


async def test_streamed_without_sglext_leaves_nulls() -> None:
    rec = await run([(10, chat("a")), (20, chat("b")), (30, usage(5, 2) + DONE)])
    assert rec.ok, rec.error
    assert (rec.spec_verify_ct, rec.spec_accepted_drafts) == (None, None)


async def test_meta_info_on_the_usage_chunk_is_not_read() -> None:
    # SGLang's OpenAI endpoints never stream meta_info: alflow no longer looks for it
    usage_with_meta = ev(
        {
            "id": "x",
            "choices": [],
            "usage": {"prompt_tokens": 5, "completion_tokens": 1},
            "meta_info": {"spec_verify_ct": 1, "spec_num_correct_drafts": 0},
        }
    )
    rec = await run([(10, chat("a")), (30, usage_with_meta + DONE)])
    assert rec.ok, rec.error
    assert rec.spec_verify_ct is None


async def test_sglext_on_a_content_chunk_is_not_read() -> None:
    # SGLang sends sglext only in its own chunk (choices []): content chunks cost nothing extra
    content = ev(
        {
            "id": "x",
            "choices": [{"index": 0, "delta": {"content": "a"}}],
            "sglext": {"spec_tokens_details": details(1, 0)},
        }
    )
    rec = await run([(10, content), (30, usage(5, 1) + DONE)])
    assert rec.ok, rec.error
    assert rec.spec_verify_ct is None


# ------------------------------------------------------------------------------------ records


def test_records_frame_has_the_nullable_count_columns(tmp_path: Path) -> None:
    recs = [
        RequestRecord(request_id=0, session_id="a", spec_verify_ct=3, spec_accepted_drafts=4),
        RequestRecord(request_id=1, session_id="b"),
    ]
    frame = records_frame(recs)
    assert frame.schema["spec_verify_ct"] == pl.Int64
    assert frame.schema["spec_accepted_drafts"] == pl.Int64
    assert frame["spec_verify_ct"].to_list() == [3, None]
    assert frame["spec_accepted_drafts"].to_list() == [4, None]
    back = read_records(write_records(tmp_path / "r.parquet", recs))
    assert back.equals(frame)


def test_records_stored_before_the_columns_still_load(tmp_path: Path) -> None:
    frame = records_frame([RequestRecord(request_id=0, session_id="a")])
    old = frame.drop("spec_verify_ct", "spec_accepted_drafts")
    path = tmp_path / "old.parquet"
    old.write_parquet(path)
    back = read_records(path)
    assert list(back.columns) == list(RECORD_SCHEMA)
    assert back["spec_verify_ct"].to_list() == [None]
    assert back.schema["spec_accepted_drafts"] == pl.Int64


# ------------------------------------------------------------------------------------ window_stats


def _snap(mono_ns: int) -> Snapshot:
    return Snapshot(url="http://sim/metrics", wall_time_s=float(mono_ns), mono_ns=mono_ns, samples={})


@dataclass
class FakeDialect:
    """A dialect whose counters say what the test wants (the window is not read)."""

    name: str
    stats: SpecStats | None
    error: str = "metric sglang:spec_verify_calls is not exposed"
    metrics_path: str = "/metrics"
    request_counts: str | None = "sglext.spec_tokens_details"
    request_fields: Mapping[str, object] = field(default_factory=dict)

    def matches(self, snapshot: Snapshot) -> bool:
        return True

    def spec_stats(self, window: object, *, k: int | None = None, level: float = 0.95) -> SpecStats:
        if self.stats is None:
            raise AlflowError(self.error)
        return self.stats

    async def server_info(self, base_url: str, **_kw: object) -> dict:
        return {}


COUNTERS = from_counters(100, 160, k=3, note="approximate")  # AL 2.6


def frame(counts: list[tuple[int | None, int | None]], *, warmup: int = 0, failed: int = 0) -> pl.DataFrame:
    recs = [
        RequestRecord(request_id=i, session_id=str(i), spec_verify_ct=v, spec_accepted_drafts=a)
        for i, (v, a) in enumerate(counts)
    ]
    n = len(recs)
    # warm-up and failed requests never count, whatever they carry
    recs += [
        RequestRecord(
            request_id=n + i, session_id="w", warmup=True, spec_verify_ct=1000, spec_accepted_drafts=3000
        )
        for i in range(warmup)
    ]
    recs += [
        RequestRecord(request_id=n + warmup + i, session_id="f", error="boom", spec_verify_ct=None)
        for i in range(failed)
    ]
    return records_frame(recs)


def test_sglang_with_meta_info_on_every_request_is_exact_and_primary() -> None:
    records = frame([(10, 15), (20, 30), (0, 0)], warmup=2, failed=1)
    stats, error = window_stats(FakeDialect("sglang", COUNTERS), _snap(1), _snap(2), k=3, records=records)
    assert error is None
    assert stats is not None
    assert (stats.num_drafts, stats.accepted_tokens, stats.k) == (30, 45, 3)
    assert stats.al == pytest.approx(1 + 45 / 30)
    assert stats.ci is not None
    assert "sglext.spec_tokens_details of 3 requests" in stats.note
    assert "counters: AL 2.6000" in stats.note
    assert "approximate" not in stats.note


def test_meta_info_takes_k_from_the_counters_when_not_given() -> None:
    stats, _ = window_stats(FakeDialect("sglang", COUNTERS), _snap(1), _snap(2), records=frame([(10, 15)]))
    assert stats is not None
    assert stats.k == 3
    assert stats.ci is not None


def test_meta_info_still_gives_al_when_the_counters_fail() -> None:
    stats, error = window_stats(FakeDialect("sglang", None), _snap(1), _snap(2), k=3, records=frame([(4, 6)]))
    assert error is None
    assert stats is not None
    assert stats.al == pytest.approx(2.5)
    assert "counters: unavailable (metric sglang:spec_verify_calls is not exposed)" in stats.note


def test_partial_meta_info_keeps_the_counters_and_says_how_many_lacked_it() -> None:
    records = frame([(10, 15), (None, None), (5, None), (20, 30)], warmup=1)
    stats, error = window_stats(FakeDialect("sglang", COUNTERS), _snap(1), _snap(2), k=3, records=records)
    assert error is None
    assert stats is not None
    assert (stats.num_drafts, stats.accepted_tokens) == (100, 160)
    assert "approximate" in stats.note
    assert "2 of 4 measured requests lacked sglext.spec_tokens_details" in stats.note


def test_partial_meta_info_with_failing_counters_is_an_error_naming_both() -> None:
    stats, error = window_stats(
        FakeDialect("sglang", None), _snap(1), _snap(2), k=3, records=frame([(10, 15), (None, None)])
    )
    assert stats is None
    assert error is not None
    assert "not exposed" in error
    assert "1 of 2 measured requests lacked sglext.spec_tokens_details" in error


@pytest.mark.parametrize("records", [None, "none-reported", "old-frame"])
def test_without_meta_info_the_counters_are_unchanged(records: str | None) -> None:
    frames = {
        None: None,
        "none-reported": frame([(None, None), (None, None)]),
        "old-frame": frame([(None, None)]).drop("spec_verify_ct", "spec_accepted_drafts"),
    }
    stats, error = window_stats(
        FakeDialect("sglang", COUNTERS), _snap(1), _snap(2), k=3, records=frames[records]
    )
    assert (stats, error) == (COUNTERS, None)


def test_any_dialect_uses_per_request_counts_when_the_records_carry_them() -> None:
    # the path is dialect-agnostic: a dialect that names no response field still gets the exact AL
    stats, error = window_stats(
        FakeDialect("trtllm", COUNTERS, request_counts=None), _snap(1), _snap(2), k=3, records=frame([(4, 6)])
    )
    assert error is None
    assert stats is not None
    assert (stats.al, stats.source) == (2.5, "per-request")
    assert stats.note.startswith("exact, from the per-request counts of 1 requests; counters: AL 2.6000")


def test_any_dialect_without_per_request_counts_keeps_the_counters() -> None:
    stats, error = window_stats(
        FakeDialect("trtllm", COUNTERS, request_counts=None),
        _snap(1),
        _snap(2),
        k=3,
        records=frame([(None, None)]),
    )
    assert (stats, error) == (COUNTERS, None)


def test_inconsistent_meta_info_falls_back_to_the_counters() -> None:
    # more accepted drafts than verify steps x K: not a count SGLang could send
    stats, error = window_stats(
        FakeDialect("sglang", COUNTERS), _snap(1), _snap(2), k=3, records=frame([(2, 7)])
    )
    assert error is None
    assert stats is not None
    assert stats.al == COUNTERS.al
    assert "sglext.spec_tokens_details counts rejected" in stats.note


def test_the_real_sglang_dialect_is_the_cross_check() -> None:
    from tests.unit.test_dialects import window

    w = window("sglang")
    counters = get_dialect("sglang").spec_stats(w, k=3)
    assert counters.al is not None
    stats, error = window_stats("sglang", w.before, w.after, k=3, records=frame([(40, 50)]))
    assert error is None
    assert stats is not None
    assert stats.al == pytest.approx(2.25)
    assert f"counters: AL {counters.al:.4f}" in stats.note


def test_meta_info_totals_counts_only_successful_measured_requests() -> None:
    totals = meta_info_totals(frame([(10, 15), (None, 2)], warmup=3, failed=2))
    assert (totals.requests, totals.reported, totals.verify_ct, totals.accepted_drafts) == (2, 1, 10, 15)
    assert not totals.complete
    assert not meta_info_totals(frame([])).complete


def test_each_dialect_that_names_its_per_request_counts_reads_them_and_only_it() -> None:
    for name, dialect in dialects().items():
        reader = getattr(dialect, "count_reader", None)
        assert (dialect.request_counts is None) == (reader is None), name
        if reader is not None:
            assert dialect.request_counts is not None
            assert dialect.request_counts.startswith(reader.key), name


def test_a_point_reads_its_dialects_counts_and_every_known_one_without_a_dialect() -> None:
    target = Target("http://x", "m")
    assert target.counts == ()  # the client reads none unless handed a reader
    assert with_request_fields(target, get_dialect("sglang")).counts == (SGLANG_COUNTS,)
    assert with_request_fields(target, get_dialect("trtllm")).counts == ()
    assert set(with_request_fields(target, None).counts) >= {SGLANG_COUNTS, VLLM_COUNTS}
    assert len(count_readers(None)) == len({r.key for r in count_readers(None)})


def test_a_reader_whose_object_does_not_hold_gives_way_to_the_next() -> None:
    record = RequestRecord(request_id=0, session_id="s")
    body = {"metrics": {"unrelated": 1}, "sglext": {"spec_tokens_details": details(4, 6)}}
    fill_spec_counts(record, body, [VLLM_COUNTS, SGLANG_COUNTS])
    assert (record.spec_verify_ct, record.spec_accepted_drafts) == (4, 6)


def test_a_plugin_dialect_written_before_readers_existed_has_its_counts_unread_and_breaks_nothing() -> None:
    class OlderDialect:  # a third-party plugin's reader without count_reader
        name = "older"
        request_counts = None

    assert count_readers(OlderDialect()) == ()  # type: ignore[arg-type]
