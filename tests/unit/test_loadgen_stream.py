"""Timing invariants and failure rules of the streaming client, with a scripted clock and transport."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from alflow.loadgen.client import FatalRequestError, ResponseInfo, stream_request
from alflow.loadgen.endpoints import ChatEndpoint, CompletionsEndpoint
from alflow.loadgen.frames import records_frame
from alflow.loadgen.records import RequestRecord
from alflow.metrics.client import per_request
from alflow.metrics.readers import count_readers

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self, start: int = 1_000_000) -> None:
        self.now = start

    def __call__(self) -> int:
        return self.now


class ScriptedTransport:
    """Answers every POST with the script: (clock value when the read arrives, bytes)."""

    def __init__(
        self,
        script: Sequence[tuple[int, bytes]],
        clock: Clock,
        status: int = 200,
        ctype: str = "text/event-stream",
    ) -> None:
        self.script = script
        self.clock = clock
        self.status = status
        self.ctype = ctype
        self.bodies: list[bytes] = []

    async def stream(
        self, url: str, body: bytes, timeout_s: float | None, sink: Callable[[bytes, int], bool], clock: Clock
    ) -> ResponseInfo:
        self.bodies.append(body)
        if self.status != 200 or self.ctype != "text/event-stream":
            return ResponseInfo(self.status, self.ctype, b"".join(d for _, d in self.script).decode())
        for at, data in self.script:
            self.clock.now = at
            if sink(data, clock()):
                break
        return ResponseInfo(self.status, self.ctype)


def ev(obj: object) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def chat(content: str | None = None, **delta: str) -> bytes:
    d = dict(delta)
    if content is not None:
        d["content"] = content
    return ev({"id": "x", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": d}]})


def usage(prompt: int, completion: int) -> bytes:
    return ev({"id": "x", "choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion}})


DONE = b"data: [DONE]\n\n"
READERS = count_readers(None)
"""Every known framework's reader of per-request counts, as a run whose dialect is not known is handed."""


async def run(script: Sequence[tuple[int, bytes]], endpoint: object = None, **kw: object) -> RequestRecord:
    clock = Clock()
    t = ScriptedTransport(script, clock, **kw)  # type: ignore[arg-type]
    rec = RequestRecord(request_id=0, session_id="s")
    await stream_request(
        t, "http://x/v1/chat/completions", b"{}", endpoint or ChatEndpoint(), rec, clock=clock, counts=READERS
    )  # type: ignore[arg-type]
    return rec


MS = 1_000_000


async def test_latency_minus_ttft_equals_sum_of_itls_and_usage_does_not_extend_latency() -> None:
    script = [
        (1_000_000 + 5 * MS, chat("", role="assistant")),  # role-only chunk: no output, not TTFT
        (1_000_000 + 20 * MS, chat("Hel")),
        (1_000_000 + 31 * MS, chat("lo") + chat(" wor")),  # two events in one read share a timestamp
        (1_000_000 + 47 * MS, chat("ld")),
        (1_000_000 + 90 * MS, usage(12, 5)),  # trailing usage chunk, much later
        (1_000_000 + 95 * MS, DONE),
    ]
    rec = await run(script)
    assert rec.ok, rec.error
    assert rec.start_ns == 1_000_000
    assert rec.chunk_ns == [
        1_000_000 + 20 * MS,
        1_000_000 + 31 * MS,
        1_000_000 + 31 * MS,
        1_000_000 + 47 * MS,
    ]
    assert rec.first_token_ns == 1_000_000 + 20 * MS
    assert rec.end_ns == 1_000_000 + 47 * MS  # not the usage chunk
    assert rec.done_ns == 1_000_000 + 95 * MS
    assert (rec.input_tokens, rec.output_tokens) == (12, 5)
    assert rec.text == "Hello world"
    row = per_request(records_frame([rec])).row(0, named=True)
    assert row["ttft_ms"] == pytest.approx(20.0)
    assert row["e2el_ms"] == pytest.approx(47.0)
    assert row["e2el_ms"] - row["ttft_ms"] == pytest.approx(sum(row["itl_ms"]))
    assert row["itl_ms"] == pytest.approx([11.0, 0.0, 16.0])
    assert row["tpot_ms"] == pytest.approx(27.0 / 4)
    assert row["tokens_per_chunk"] == pytest.approx(5 / 4)


@settings(max_examples=60, deadline=None)
@given(
    gaps=st.lists(st.integers(min_value=0, max_value=50 * MS), min_size=1, max_size=30),
    cuts=st.lists(st.integers(min_value=1, max_value=40), max_size=30),
)
async def test_invariant_holds_for_any_gaps_and_any_split_of_the_bytes(
    gaps: list[int], cuts: list[int]
) -> None:
    # Bytes re-split at arbitrary points (partial lines across reads): parsing is incremental.
    events = [chat(f"t{i}") for i in range(len(gaps))] + [usage(3, len(gaps)), DONE]
    blob = b"".join(events)
    pieces: list[bytes] = []
    pos = 0
    for c in cuts:
        if pos >= len(blob):
            break
        pieces.append(blob[pos : pos + c])
        pos += c
    if pos < len(blob):
        pieces.append(blob[pos:])
    t = 1_000_000
    script = []
    step = max(gaps) // max(1, len(pieces)) + 1
    for p in pieces:
        t += step
        script.append((t, p))
    rec = await run(script)
    assert rec.ok, rec.error
    assert rec.text == "".join(f"t{i}" for i in range(len(gaps)))
    assert rec.output_tokens == len(gaps)
    assert rec.end_ns is not None
    assert rec.first_token_ns is not None
    itls = [b - a for a, b in zip(rec.chunk_ns, rec.chunk_ns[1:], strict=False)]
    assert rec.end_ns - rec.start_ns - (rec.first_token_ns - rec.start_ns) == sum(itls)
    assert all(x >= 0 for x in itls)


async def test_reasoning_chunks_count_for_ttft_but_not_for_the_reply_text() -> None:
    script = [
        (2_000_000, chat(None, reasoning_content="think")),
        (3_000_000, chat(None, reasoning="more")),
        (4_000_000, chat("answer")),
        (5_000_000, usage(1, 3) + DONE),
    ]
    rec = await run(script)
    assert rec.ok
    assert rec.first_token_ns == 2_000_000
    assert rec.chunk_ns == [2_000_000, 3_000_000, 4_000_000]
    assert rec.text == "answer"


async def test_error_event_in_a_200_stream_fails_the_request() -> None:
    script = [
        (2_000_000, chat("a")),
        (3_000_000, ev({"error": {"message": "engine died", "code": 500}})),
        (4_000_000, DONE),
    ]
    rec = await run(script)
    assert not rec.ok
    assert rec.error is not None
    assert "engine died" in rec.error
    assert rec.http_status == 200


async def test_named_error_event_fails_the_request() -> None:
    script = [(2_000_000, b'event: error\ndata: {"message": "overloaded"}\n\n'), (3_000_000, DONE)]
    rec = await run(script)
    assert rec.error is not None
    assert "overloaded" in rec.error


@pytest.mark.parametrize("together", [True, False])
async def test_nothing_after_done_counts(together: bool) -> None:
    """#49 (round 2): a chunk after [DONE] was counted as output (in the same read, or a later one)."""
    after = chat("late") + usage(9, 99)
    tail = [(4_000_000, DONE + after)] if together else [(4_000_000, DONE), (5_000_000, after)]
    rec = await run([(2_000_000, chat("a")), (3_000_000, usage(1, 1)), *tail])
    assert rec.ok
    assert rec.chunk_ns == [2_000_000]
    assert (rec.text, rec.input_tokens, rec.output_tokens) == ("a", 1, 1)


async def test_stream_without_done_fails() -> None:
    rec = await run([(2_000_000, chat("a")), (3_000_000, usage(1, 1))])
    assert rec.error == "stream ended without [DONE]"


async def test_usage_only_stream_fails() -> None:
    rec = await run([(2_000_000, usage(5, 0)), (3_000_000, DONE)])
    assert rec.error is not None
    assert "usage only" in rec.error
    assert rec.first_token_ns is None


async def test_http_500_is_a_failed_request_and_404_is_fatal() -> None:
    rec = await run([(2_000_000, b"boom")], status=500, ctype="text/plain")
    assert rec.error is not None
    assert "HTTP 500" in rec.error
    assert "boom" in rec.error
    with pytest.raises(FatalRequestError, match="HTTP 404"):
        await run([(2_000_000, b"Not Found")], status=404, ctype="text/plain")


async def test_non_streaming_answer_is_fatal() -> None:
    with pytest.raises(FatalRequestError, match="does not stream"):
        await run([(2_000_000, b'{"choices": []}')], ctype="application/json")


async def test_completions_text_and_crlf_framing() -> None:
    def comp(text: str) -> bytes:
        return b"data: " + orjson.dumps({"choices": [{"index": 0, "text": text}]}) + b"\r\n\r\n"

    script = [(2_000_000, comp("a")), (3_000_000, comp("") + comp("b")), (4_000_000, b"data: [DONE]\r\n\r\n")]
    rec = await run(script, endpoint=CompletionsEndpoint())
    assert rec.ok, rec.error
    assert rec.chunk_ns == [2_000_000, 3_000_000]  # the empty-text event is not output
    assert rec.text == "ab"
    assert rec.output_tokens is None  # no usage sent: metrics fall back to the chunk count


async def test_malformed_event_fails_the_request() -> None:
    rec = await run([(2_000_000, b"data: {not json\n\n"), (3_000_000, DONE)])
    assert rec.error is not None
    assert "malformed" in rec.error


def test_chat_body_asks_for_usage_and_always_sends_max_tokens() -> None:
    from alflow.datasets.types import Turn
    from alflow.loadgen.endpoints import Sampling

    body = ChatEndpoint().body(
        "m",
        [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1"}],
        Turn("q2", max_tokens=7, ignore_eos=True),
        Sampling(temperature=0.0, chat_template_kwargs={"enable_thinking": False}),
    )
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 7
    assert body["ignore_eos"] is True
    assert body["temperature"] == 0.0
    assert body["messages"][-1] == {"role": "user", "content": "q2"}
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert "top_p" not in body
    comp = CompletionsEndpoint().body("m", [], Turn((1, 2, 3), max_tokens=4, min_tokens=4), Sampling())
    assert comp["prompt"] == [1, 2, 3]
    assert comp["min_tokens"] == 4
