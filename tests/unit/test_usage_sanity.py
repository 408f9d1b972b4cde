"""The server's usage counts are checked against what was streamed: impossible counts fail the request.

Issue #35 item 4: negative, non-integer, zero-beside-text and impossibly large ``completion_tokens`` used to be
taken as they came (-44,474 tok/s, 26M tok/s, 0 tok/s); now such a request gets one clear error, counts as
failed, and its numbers reach no metric.
"""

from __future__ import annotations

import orjson
import pytest
from typer.testing import CliRunner

from alflow.cli import app
from alflow.loadgen.client import MAX_TOKENS_PER_CHUNK, SseConsumer
from alflow.loadgen.endpoints import get_endpoint
from alflow.loadgen.frames import records_frame
from alflow.loadgen.records import RequestRecord
from alflow.metrics.client import summarize
from tests.unit.sse_server import threaded_sse_server

pytestmark = pytest.mark.unit

DONE = b"data: [DONE]\n\n"


def ev(obj: object) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def content(text: str) -> bytes:
    return ev({"id": "x", "choices": [{"index": 0, "delta": {"content": text}}]})


def consume(chunks: int, usage: dict[str, object] | None, request_id: int = 0) -> RequestRecord:
    """A 200 stream of ``chunks`` output events, then ``usage`` (when given) and [DONE], judged."""
    record = RequestRecord(request_id=request_id, session_id=f"s{request_id}", start_ns=0, http_status=200)
    consumer = SseConsumer(record, get_endpoint("chat"), keep_text=True)
    for i in range(chunks):
        assert not consumer.feed(content(f"t{i}"), 1_000_000 * (i + 1))
    tail = (ev({"id": "x", "choices": [], "usage": usage}) if usage is not None else b"") + DONE
    assert not consumer.feed(tail, 1_000_000 * (chunks + 2))
    record.done_ns = 1_000_000 * (chunks + 2)
    consumer.finish()
    return record


def test_consistent_usage_is_taken() -> None:
    rec = consume(8, {"prompt_tokens": 12, "completion_tokens": 20})
    assert rec.ok, rec.error
    assert (rec.input_tokens, rec.output_tokens) == (12, 20)
    assert rec.text == "".join(f"t{i}" for i in range(8))


def test_the_bound_itself_is_possible() -> None:
    rec = consume(8, {"prompt_tokens": 12, "completion_tokens": 8 * MAX_TOKENS_PER_CHUNK})
    assert rec.ok, rec.error
    assert rec.output_tokens == 8 * MAX_TOKENS_PER_CHUNK


def test_a_stream_without_usage_is_still_fine() -> None:
    rec = consume(3, None)
    assert rec.ok, rec.error
    assert (rec.input_tokens, rec.output_tokens) == (None, None)


def test_negative_completion_tokens_fail_the_request() -> None:
    rec = consume(8, {"prompt_tokens": 12, "completion_tokens": -5})
    assert rec.error == "usage: completion_tokens=-5 is not a non-negative integer"
    assert rec.output_tokens is None
    assert rec.input_tokens == 12


def test_negative_prompt_tokens_fail_the_request() -> None:
    rec = consume(2, {"prompt_tokens": -1, "completion_tokens": 2})
    assert rec.error == "usage: prompt_tokens=-1 is not a non-negative integer"
    assert rec.input_tokens is None


def test_zero_completion_tokens_beside_streamed_text_fail_the_request() -> None:
    rec = consume(8, {"prompt_tokens": 12, "completion_tokens": 0})
    assert rec.error == "usage: completion_tokens=0 for 8 streamed output chunks (at least 1 expected)"


def test_impossible_completion_tokens_fail_the_request() -> None:
    rec = consume(8, {"prompt_tokens": 12, "completion_tokens": 100_000})
    assert rec.error == (
        "usage: completion_tokens=100000 for 8 streamed chunks is impossible "
        f"(at most {MAX_TOKENS_PER_CHUNK} tokens per chunk)"
    )
    assert rec.output_tokens is None


@pytest.mark.parametrize(
    ("value", "shown"),
    [(True, "True"), (5.0, "5.0"), ("7", "'7'"), ([1], "[1]"), ({"n": 1}, "{'n': 1}")],
)
def test_counts_that_are_not_integers_fail_the_request(value: object, shown: str) -> None:
    rec = consume(2, {"prompt_tokens": 3, "completion_tokens": value})
    assert rec.error == f"usage: completion_tokens={shown} is not a non-negative integer"
    assert rec.output_tokens is None
    records_frame([rec])  # the record still fits the Int64 columns


def test_counts_beyond_int64_and_long_values_are_named_short_and_never_reach_the_frame() -> None:
    big = 2**64 - 1  # orjson reads integers up to u64; larger ones arrive as floats
    rec = consume(1, {"prompt_tokens": big, "completion_tokens": "x" * 500})
    assert rec.error is not None
    assert rec.error.startswith(f"usage: prompt_tokens={big} is too large; completion_tokens='xxx")
    assert rec.error.endswith("... is not a non-negative integer")
    assert len(rec.error) < 200
    assert (rec.input_tokens, rec.output_tokens) == (None, None)
    assert records_frame([rec])["error"][0] == rec.error


def test_an_earlier_error_is_kept_and_bad_counts_are_still_cleared() -> None:
    record = RequestRecord(request_id=0, session_id="s", http_status=200)
    consumer = SseConsumer(record, get_endpoint("chat"), keep_text=False)
    consumer.feed(content("a") + ev({"choices": [], "usage": {"completion_tokens": -3}}), 5)
    consumer.finish()  # no [DONE]
    assert record.error == "stream ended without [DONE]"
    assert record.output_tokens is None


def test_failed_usage_requests_count_as_failed_and_stay_out_of_throughput() -> None:
    good = consume(4, {"prompt_tokens": 10, "completion_tokens": 8}, request_id=0)
    bad = [
        consume(8, {"prompt_tokens": 10, "completion_tokens": -44_474}, request_id=1),
        consume(8, {"prompt_tokens": 10, "completion_tokens": 100_000}, request_id=2),
        consume(8, {"prompt_tokens": 10, "completion_tokens": 0}, request_id=3),
    ]
    summary = summarize(records_frame([good, *bad]), duration_s=1.0)
    assert (summary.completed, summary.failed) == (1, 3)
    assert not summary.all_ok
    assert summary.total_output_tokens == 8
    assert summary.output_throughput == pytest.approx(8.0)
    assert all(message.startswith("usage: ") for message, _ in summary.errors)


# --------------------------------------------------------------------------------------------
# End to end: ``alflow bench`` against a server whose usage is impossible


def test_bench_against_impossible_usage_fails_the_requests_and_exits_1() -> None:
    with threaded_sse_server() as server:  # 8 chunks, then a usage claiming 100,000 completion tokens
        args = ["bench", "--base-url", server.base_url, "--model", "lying-usage", "--endpoint", "completions",
                "--num-prompts", "2", "--isl", "8", "--osl", "8", "--vocab-size", "500", "--no-metrics",
                "--no-progress", "--json"]  # fmt: skip
        result = CliRunner().invoke(app, args, env={"COLUMNS": "400", "OPENAI_API_KEY": ""})
    assert result.exit_code == 1, result.output
    summary = orjson.loads(result.stdout)
    assert (summary["completed"], summary["failed"]) == (0, 2)
    assert summary["total_output_tokens"] == 0
    assert summary["output_throughput"] == 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "error: 2 of 2 requests failed (first: usage: completion_tokens=100000 for 8 streamed"
    )


def test_a_usage_that_is_not_an_object_is_no_usage_and_crashes_nothing() -> None:
    from alflow.loadgen.client import SseConsumer
    from alflow.loadgen.endpoints import CompletionsEndpoint
    from alflow.loadgen.records import RequestRecord

    rec = RequestRecord(request_id=0, session_id="s", http_status=200)
    consumer = SseConsumer(rec, CompletionsEndpoint(), keep_text=False)
    wire = b'data: {"choices": [{"index": 0, "text": "a"}]}\n\ndata: {"choices": [], "usage": [5]}\n\ndata: [DONE]\n\n'
    assert consumer.feed(wire, 1) is False
    consumer.finish()
    assert rec.output_tokens is None
    assert rec.chunk_ns == [1]
