"""Issue #49: a server that streams valid chunks for ever no longer fills the client's memory.

``alflow eval gsm8k`` against such a server held the answer text until ``--timeout`` (2.4 GB, then MemoryError). A real
aiohttp server here streams ``data: {...}`` chunks as fast as it can, never ``[DONE]``; each request must fail with
the reason (more output chunks than its ``max_tokens`` allows) within seconds, its stream closed, and the memory the
client holds stays small, on both transports and through the evaluator.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import tracemalloc
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import orjson
import pytest
from aiohttp import web

from alflow.datasets.types import Session, Turn
from alflow.errors import AlflowError
from alflow.evals.gsm8k import PromptConfig
from alflow.evals.run import Gsm8kRequest, evaluate_gsm8k
from alflow.loadgen.client import EVENT_SLACK, EVENTS_PER_CHUNK, STREAM_SLACK_CHUNKS
from alflow.loadgen.endpoints import Sampling
from alflow.loadgen.runner import run_load
from alflow.loadgen.spec import LoadSpec, Target

pytestmark = pytest.mark.integration

MEMORY_BOUND = 200 * 2**20
"""The most the test process may allocate at its peak while the endless streams run (tracemalloc)."""
TIMEOUT_S = 300.0
"""Each request's own timeout: far beyond the test's few seconds, so that the bound, not the clock, ends them."""


@dataclass
class Endless:
    """What the endless server saw: requests started and streams that ended (the client closed them)."""

    started: int = 0
    closed: int = 0
    chunks: int = 0
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    """Set at each close."""
    block: bytes = b""
    """What the server writes again and again (:data:`BLOCK` unless a test sets another)."""

    def close(self) -> None:
        self.closed += 1
        self.changed.set()


ENDLESS: web.AppKey[Endless] = web.AppKey("endless", Endless)
CHUNK = b"data: " + orjson.dumps({"choices": [{"index": 0, "delta": {"content": "The answer is 42. " * 4}}]})
BLOCK = (CHUNK + b"\n\n") * 64
EMPTY_DELTAS = (
    b"data: " + orjson.dumps({"choices": [{"index": 0, "delta": {"content": ""}}]}) + b"\n\n"
) * 64
"""64 events that carry no output (an empty delta each)."""


async def _endless(request: web.Request) -> web.StreamResponse:
    state = request.app[ENDLESS]
    await request.read()
    state.started += 1
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    try:
        while True:  # valid chunks for ever, never [DONE]
            await resp.write(state.block or BLOCK)
            state.chunks += 64
            await asyncio.sleep(0)
    except ConnectionError:  # the client closed the stream
        state.close()
        return resp
    except asyncio.CancelledError:
        state.close()
        raise


@pytest.fixture
async def endless() -> AsyncIterator[tuple[str, Endless]]:
    app = web.Application()
    state = Endless()
    app[ENDLESS] = state
    app.router.add_post("/v1/chat/completions", _endless)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}", state
    finally:
        await runner.cleanup()


async def _closed(state: Endless, count: int, within_s: float = 10.0) -> bool:
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(within_s):
            while state.closed < count:
                await state.changed.wait()
                state.changed.clear()
    return state.closed >= count


@pytest.mark.parametrize("transport", ["fast", "aiohttp"])
async def test_an_endless_stream_fails_its_request_with_the_reason_and_is_closed(
    transport: str, endless: tuple[str, Endless]
) -> None:
    base_url, state = endless
    sessions = [Session(f"s{i}", (Turn("What is 6 x 7?"),)) for i in range(4)]
    target = Target(base_url, "m", "chat", Sampling(max_tokens=256))
    spec = LoadSpec(concurrency=4, num_prompts=4, timeout_s=TIMEOUT_S, transport=transport)  # type: ignore[arg-type]
    tracemalloc.start()
    started = time.monotonic()
    try:
        result = await run_load(sessions, target, spec)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert time.monotonic() - started < 30
    assert peak < MEMORY_BOUND, f"{peak:,} bytes at the peak"
    assert len(result.records) == 4
    for rec in result.records:
        assert rec.error is not None
        assert rec.error.startswith(f"the server sent more than {256 + STREAM_SLACK_CHUNKS} output chunks"), (
            rec.error
        )
        assert "max_tokens=256" in rec.error
        assert len(rec.chunk_ns) == 256 + STREAM_SLACK_CHUNKS + 1
    assert await _closed(state, 4), f"{state.closed} of {state.started} streams closed by the client"


async def test_eval_gsm8k_against_an_endless_stream_ends_in_one_line_with_the_reason(
    endless: tuple[str, Endless],
) -> None:
    """The reported case: the evaluator's answers were held until --timeout (2.4 GB)."""
    base_url, state = endless
    request = Gsm8kRequest(
        base_url=base_url,
        model="m",
        prompt=PromptConfig(num_shots=0, max_tokens=64),
        limit=3,
        concurrency=3,
        timeout_s=TIMEOUT_S,
        check_server=False,
    )
    tracemalloc.start()
    started = time.monotonic()
    try:
        with pytest.raises(AlflowError) as err:
            await evaluate_gsm8k(request)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert time.monotonic() - started < 30
    assert peak < MEMORY_BOUND, f"{peak:,} bytes at the peak"
    message = str(err.value)
    assert "\n" not in message
    assert "no scores" in message
    assert f"the server sent more than {64 + STREAM_SLACK_CHUNKS} output chunks" in message, message
    assert "max_tokens=64" in message
    assert await _closed(state, 3), f"{state.closed} of {state.started} streams closed by the client"


@pytest.mark.parametrize("transport", ["fast", "aiohttp"])
async def test_an_endless_stream_of_empty_deltas_fails_its_request_with_the_reason_and_is_closed(
    transport: str, endless: tuple[str, Endless]
) -> None:
    """Events with no output escaped the chunk and answer bounds: such a stream ran until --timeout (600 s)."""
    base_url, state = endless
    state.block = EMPTY_DELTAS
    sessions = [Session(f"s{i}", (Turn("What is 6 x 7?"),)) for i in range(2)]
    target = Target(base_url, "m", "chat", Sampling(max_tokens=256))
    spec = LoadSpec(concurrency=2, num_prompts=2, timeout_s=TIMEOUT_S, transport=transport)  # type: ignore[arg-type]
    started = time.monotonic()
    result = await run_load(sessions, target, spec)
    assert time.monotonic() - started < 10
    bound = (256 + STREAM_SLACK_CHUNKS) * EVENTS_PER_CHUNK + EVENT_SLACK
    assert len(result.records) == 2
    for rec in result.records:
        assert rec.error is not None
        assert rec.error.startswith(
            f"the server sent more than {bound:,} stream events for max_tokens=256"
        ), rec.error
        assert "\n" not in rec.error
        assert not rec.chunk_ns
    assert await _closed(state, 2), f"{state.closed} of {state.started} streams closed by the client"
