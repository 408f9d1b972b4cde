"""Issue #49: what one streamed request may hold is bounded (an endless stream of valid chunks held 2.4 GB).

Every streamed completion alflow reads (``eval gsm8k``'s answers, ``bench``'s records, M1's AL runs, the client
processes) goes through :class:`alflow.loadgen.client.SseConsumer`. A request that gets more than its ``max_tokens``
plus :data:`~alflow.loadgen.client.STREAM_SLACK_CHUNKS` output chunks, more than
:data:`~alflow.loadgen.client.MAX_ANSWER_CHARS` characters of answer, or a line longer than
:data:`~alflow.loadgen.client.MAX_LINE_BYTES` fails with the reason, and its stream is stopped (closed).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import orjson
import pytest

from alflow.datasets.types import Session, Turn
from alflow.loadgen import client
from alflow.loadgen.client import (
    EVENT_SLACK,
    EVENTS_PER_CHUNK,
    STREAM_SLACK_CHUNKS,
    ResponseInfo,
    SseConsumer,
    output_cap,
    stream_request,
)
from alflow.loadgen.endpoints import ChatEndpoint, Sampling
from alflow.loadgen.records import RequestRecord
from alflow.loadgen.runner import run_load
from alflow.loadgen.spec import LoadSpec, Target

pytestmark = pytest.mark.unit


def _chunk(text: str = "x") -> bytes:
    return b"data: " + orjson.dumps({"choices": [{"index": 0, "delta": {"content": text}}]}) + b"\n\n"


DONE = b"data: [DONE]\n\n"


class EndlessTransport:
    """Answers every POST with valid chunks for ever (until the sink says stop); counts the reads it fed."""

    def __init__(self, read: Callable[[], bytes] = _chunk) -> None:
        self.read = read
        self.reads = 0
        self.bodies: list[bytes] = []

    async def stream(
        self,
        url: str,
        body: bytes,
        timeout_s: float | None,
        sink: Callable[[bytes, int], bool],
        clock: object,
    ) -> ResponseInfo:
        self.bodies.append(body)
        while True:
            self.reads += 1
            if sink(self.read(), 0):
                return ResponseInfo(200, "text/event-stream")
            assert self.reads < 1_000_000, "the stream was never stopped"


def _consumer(max_tokens: int | None, keep_text: bool = True) -> SseConsumer:
    return SseConsumer(RequestRecord(request_id=0, session_id="s"), ChatEndpoint(), keep_text, (), max_tokens)


def test_output_cap_reads_max_tokens_or_max_completion_tokens() -> None:
    assert output_cap({"max_tokens": 64}) == 64
    assert output_cap({"max_completion_tokens": 100}) == 100
    assert output_cap({"max_tokens": 64, "max_completion_tokens": 100}) == 100  # a server may honour either
    for none in ({}, {"max_tokens": 0}, {"max_tokens": True}, {"max_tokens": "64"}, {"max_tokens": -1}):
        assert output_cap(none) is None, none


def test_max_tokens_plus_the_slack_is_taken_and_one_more_chunk_stops_the_stream() -> None:
    ok = _consumer(4)
    for _ in range(4 + STREAM_SLACK_CHUNKS):
        assert ok.feed(_chunk(), 0) is False
    assert ok.feed(DONE, 0) is False
    ok.finish()
    assert ok.record.error is None
    assert ok.record.text == "x" * (4 + STREAM_SLACK_CHUNKS)

    over = _consumer(4)
    stops = [over.feed(_chunk(), 0) for _ in range(4 + STREAM_SLACK_CHUNKS + 1)]
    assert stops == [False] * (4 + STREAM_SLACK_CHUNKS) + [True]
    assert over.record.error == (
        f"the server sent more than {4 + STREAM_SLACK_CHUNKS} output chunks (each at least one token) for "
        f"max_tokens=4 (at most max_tokens + {STREAM_SLACK_CHUNKS} are taken); the stream was stopped"
    )


def test_events_in_one_read_past_the_bound_stop_at_the_first_one_over() -> None:
    consumer = _consumer(2)
    assert consumer.feed(_chunk() * 1000, 0) is True
    assert len(consumer.record.chunk_ns) == 2 + STREAM_SLACK_CHUNKS + 1
    assert len(consumer.pieces) == 2 + STREAM_SLACK_CHUNKS


def test_answer_text_past_its_bound_fails_even_without_a_max_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client, "MAX_ANSWER_CHARS", 1000)
    for keep_text in (True, False):  # bench keeps no text: the bound holds all the same
        consumer = _consumer(None, keep_text)
        assert consumer.feed(_chunk("y" * 600), 0) is False
        assert consumer.feed(_chunk("y" * 600), 0) is True
        assert consumer.record.error is not None
        assert "more than 1,000 characters of answer text" in consumer.record.error
        assert sum(map(len, consumer.pieces)) <= 1000


def test_a_line_that_never_ends_is_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client, "MAX_LINE_BYTES", 1000)
    consumer = _consumer(16)
    assert consumer.feed(b"data: {" + b" " * 900, 0) is False
    assert consumer.feed(b" " * 200, 0) is True
    assert "a stream line of more than 1,000 bytes without a line end" in (consumer.record.error or "")


async def test_stream_request_stops_an_endless_stream_after_max_tokens_plus_slack() -> None:
    transport = EndlessTransport()
    rec = RequestRecord(request_id=0, session_id="s")
    await stream_request(transport, "http://x/v1/chat/completions", b"{}", ChatEndpoint(), rec, max_tokens=8)  # type: ignore[arg-type]
    assert transport.reads == 8 + STREAM_SLACK_CHUNKS + 1
    assert rec.error is not None
    assert rec.error.startswith(f"the server sent more than {8 + STREAM_SLACK_CHUNKS} output chunks")
    assert rec.text == "x" * (8 + STREAM_SLACK_CHUNKS)


async def test_the_load_runner_bounds_each_request_by_the_max_tokens_it_sent() -> None:
    """The runner hands the body's cap (a turn's own, or the sampling's) to the reader of each stream."""
    transport = EndlessTransport()
    sessions = [
        Session("a", (Turn("q", max_tokens=5),)),
        Session("b", (Turn("q"),)),
    ]
    target = Target("http://127.0.0.1:9", "m", "chat", Sampling(max_tokens=30))
    result = await run_load(
        sessions, target, LoadSpec(concurrency=1, num_prompts=2, timeout_s=30), transport=transport
    )
    errors = {r.session_id: r.error for r in result.records}
    assert errors["a"] is not None
    assert errors["b"] is not None
    assert "for max_tokens=5 " in errors["a"]
    assert "for max_tokens=30 " in errors["b"]
    assert transport.reads == (5 + STREAM_SLACK_CHUNKS + 1) + (30 + STREAM_SLACK_CHUNKS + 1)


def _drip_line(total: int, read: int = 4096) -> tuple[float, SseConsumer]:
    """CPU seconds :meth:`SseConsumer.feed` takes on one line that never ends, ``total`` bytes in ``read``-byte reads."""
    consumer = _consumer(16)
    piece = b"x" * read
    started = time.process_time()
    stopped = consumer.feed(b"data: {", 0)
    for _ in range(total // read):
        if stopped:
            break
        stopped = consumer.feed(piece, 0)
    return time.process_time() - started, consumer


def test_a_line_dripped_in_small_reads_costs_linear_time_up_to_its_bound() -> None:
    """A 16 MiB line in 4 KiB reads once took 16.5 s in feed (the buffer copied and searched from 0 at each read)."""
    spent, consumer = _drip_line(client.MAX_LINE_BYTES + 2 * 4096)
    assert consumer.record.error is not None
    assert "a stream line of more than 16,777,216 bytes without a line end" in consumer.record.error
    assert spent < 1.0, f"{spent:.2f} s of CPU in feed"
    # linear: twice the line, twice the time (quadratic once: 4x); each figure the least of 5 sums of 4 lines
    four = min(sum(_drip_line(4 * 2**20)[0] for _ in range(4)) for _ in range(5))
    eight = min(sum(_drip_line(8 * 2**20)[0] for _ in range(4)) for _ in range(5))
    assert eight / four < 3, f"4 MiB: {four:.3f} s, 8 MiB: {eight:.3f} s"


def test_a_line_split_over_many_reads_is_parsed_whole() -> None:
    event = _chunk("z" * 10_000)
    consumer = _consumer(16)
    for at in range(0, len(event), 7):  # 7-byte reads: the line end comes in a read of its own
        assert consumer.feed(event[at : at + 7], 0) is False
    assert (
        consumer.feed(_chunk("w")[:9], 0) is False
    )  # a line begun in one read, ended with [DONE] in the next
    assert consumer.feed(_chunk("w")[9:] + DONE, 0) is False
    consumer.finish()
    assert consumer.record.error is None
    assert consumer.record.text == "z" * 10_000 + "w"
    assert len(consumer.record.chunk_ns) == 2


def _event(obj: object) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


EMPTY_DELTA = _event({"choices": [{"index": 0, "delta": {"content": ""}}]})
ROLE_ONLY = _event({"choices": [{"index": 0, "delta": {"role": "assistant"}}]})
USAGE_ONLY = _event({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1}})
FINAL = _event({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})


def _events_bound(max_tokens: int) -> int:
    return (max_tokens + STREAM_SLACK_CHUNKS) * EVENTS_PER_CHUNK + EVENT_SLACK


@pytest.mark.parametrize(
    "quiet",
    [EMPTY_DELTA, ROLE_ONLY, USAGE_ONLY, FINAL, b": keep-alive\n\n", b"event: ping\n\n"],
    ids=["empty-delta", "role-only", "usage-only", "final-delta", "comment", "event-line"],
)
async def test_an_endless_stream_without_output_is_stopped_after_the_events_bound(quiet: bytes) -> None:
    """Such a stream once ran until --timeout (600 s): the chunk and answer bounds held only for events with output."""
    transport = EndlessTransport(lambda: quiet)
    rec = RequestRecord(request_id=0, session_id="s")
    await stream_request(transport, "http://x/v1/chat/completions", b"{}", ChatEndpoint(), rec, max_tokens=8)  # type: ignore[arg-type]
    bound = _events_bound(8)
    assert transport.reads == bound + 1
    assert rec.error == (
        f"the server sent more than {bound} stream events for max_tokens=8, {bound + 1} of them without output "
        f"(at most {EVENTS_PER_CHUNK} per output chunk the request may take, plus {EVENT_SLACK}); the stream was stopped"
    )


def test_events_without_output_count_with_the_output_chunks_against_one_bound() -> None:
    consumer = _consumer(8)
    bound = _events_bound(8)
    assert consumer.feed(_chunk() * 8, 0) is False
    assert consumer.feed(EMPTY_DELTA * (bound - 8), 0) is False
    assert consumer.feed(ROLE_ONLY, 0) is True
    assert (consumer.record.error or "").startswith(
        f"the server sent more than {bound} stream events for max_tokens=8"
    )


def test_a_real_stream_at_its_max_tokens_with_every_kind_of_event_without_output_passes() -> None:
    """A role chunk, an event: line, a comment, empty deltas, the final delta and usage per request: far under the bound."""
    consumer = _consumer(4)
    reads = [
        ROLE_ONLY,
        b": ping\n\n",
        b"event: message\n",
        EMPTY_DELTA,
        *[_chunk()] * (4 + STREAM_SLACK_CHUNKS),
    ]
    reads += [FINAL, USAGE_ONLY, DONE]
    assert [consumer.feed(read, 0) for read in reads] == [False] * len(reads)
    consumer.finish()
    assert consumer.record.error is None
    assert consumer.record.text == "x" * (4 + STREAM_SLACK_CHUNKS)


def test_without_a_max_tokens_the_events_are_bounded_all_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client, "UNCAPPED_CHUNKS", 10)
    consumer = _consumer(None)
    bound = 10 * EVENTS_PER_CHUNK + EVENT_SLACK
    assert consumer.feed(EMPTY_DELTA * bound, 0) is False
    assert consumer.feed(EMPTY_DELTA, 0) is True
    assert (consumer.record.error or "").startswith(
        f"the server sent more than {bound} stream events for no max_tokens"
    )
