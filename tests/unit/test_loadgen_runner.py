"""The load generator against a real loopback HTTP server: modes, warm-up, multi-turn, aborts."""

from __future__ import annotations

import asyncio
import itertools
import socket
import time

import pytest

from alflow.datasets.random_tokens import detokenize_sessions, random_sessions
from alflow.datasets.types import Session, Turn
from alflow.errors import InvalidInputError
from alflow.loadgen import LoadAbortedError, LoadSpec, Sampling, Target, run_load
from alflow.loadgen.records import RequestRecord
from alflow.loadgen.runner import arrival_offsets_ns
from tests.unit.sse_server import SseServer

pytestmark = [pytest.mark.unit, pytest.mark.timing]


def sessions(n: int, max_tokens: int = 4) -> list[Session]:
    return [Session(f"s{i}", (Turn(f"question {i}", max_tokens=max_tokens),), category="c") for i in range(n)]


@pytest.mark.parametrize("transport", ["fast", "aiohttp"])
async def test_fixed_concurrency_caps_streams_and_counts_prompts(transport: str) -> None:
    async with SseServer(delay_s=0.005) as srv:
        res = await run_load(
            sessions(5),
            Target(srv.base_url, "m"),
            LoadSpec(concurrency=3, num_prompts=12, transport=transport),  # type: ignore[arg-type]
        )
        assert srv.state.peak == 3
    assert len(res.records) == 12
    assert all(r.ok for r in res.records), [r.error for r in res.records]
    assert all(r.output_tokens == 4 and r.input_tokens == 7 for r in res.records)
    assert all(len(r.chunk_ns) == 4 for r in res.records)
    # prompts are reused in order
    assert [r.session_id for r in res.records[:6]] == ["s0", "s1", "s2", "s3", "s4", "s0"]
    assert res.duration_s > 0


async def test_warmup_is_flagged_and_baseline_hook_runs_between_phases() -> None:
    seen: list[int] = []
    async with SseServer() as srv:

        async def hook() -> None:
            seen.append(len(srv.state.bodies))

        res = await run_load(
            sessions(3),
            Target(srv.base_url, "m"),
            LoadSpec(concurrency=2, num_prompts=3, warmup=4),
            on_measure_start=hook,
        )
    assert seen == [4]  # the baseline scrape happens after all warm-up requests, before any measured one
    assert [r.warmup for r in res.records].count(True) == 4
    measured = [r for r in res.records if not r.warmup]
    assert len(measured) == 3
    assert res.measure_start_ns <= min(r.start_ns for r in measured)
    assert res.measure_end_ns == max(r.done_ns or 0 for r in measured)


@pytest.mark.alone  # a start's lateness is the machine's, not the scheduler's: no other test beside it
async def test_constant_request_rate_spaces_starts() -> None:
    async with SseServer() as srv:
        await run_load(
            sessions(6),
            Target(srv.base_url, "m"),
            LoadSpec(concurrency=100, request_rate=50.0, arrival="constant", num_prompts=6),
        )
        starts = srv.state.starts
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert len(gaps) == 5
    # 20 ms apart: one start the machine made late is followed by one on time (the schedule is absolute), so the
    # median gap is the rate's, and no two starts come together but right after a late one
    assert sorted(gaps)[2] > 0.012
    assert all(gap > 0.012 or previous > 0.03 for previous, gap in itertools.pairwise(gaps))
    assert starts[-1] - starts[0] == pytest.approx(0.1, abs=0.05)


def test_poisson_schedule_is_fixed_by_the_seed() -> None:
    import random
    from itertools import islice

    rng = random.Random(7)
    gaps = [rng.expovariate(100.0) for _ in range(6)][
        1:
    ]  # the first draw is skipped: the first starts at once
    expected = [0]
    for gap in gaps:
        expected.append(expected[-1] + int(gap * 1e9))
    spec = LoadSpec(concurrency=10, request_rate=100.0, num_prompts=6, seed=7)
    assert list(islice(arrival_offsets_ns(spec), 6)) == expected
    assert list(islice(arrival_offsets_ns(spec), 6)) == expected  # the same seed, the same schedule
    other = LoadSpec(concurrency=10, request_rate=100.0, num_prompts=6, seed=8)
    assert list(islice(arrival_offsets_ns(other), 6)) != expected
    constant = LoadSpec(concurrency=10, request_rate=50.0, arrival="constant", num_prompts=6, seed=7)
    assert list(islice(arrival_offsets_ns(constant), 4)) == [0, 20_000_000, 40_000_000, 60_000_000]


async def test_sessions_never_start_before_their_scheduled_offset() -> None:
    from itertools import islice

    spec = LoadSpec(concurrency=10, request_rate=100.0, num_prompts=6, seed=7)
    async with SseServer() as srv:
        result = await run_load(sessions(6), Target(srv.base_url, "m"), spec)
    starts = sorted(r.start_ns - result.measure_start_ns for r in result.records)
    offsets = list(islice(arrival_offsets_ns(spec), 6))
    # on the client's clock; waiting for a slot or the event loop may delay a start, nothing may advance it
    assert all(start >= offset for start, offset in zip(starts, offsets, strict=True))


async def test_duration_mode_stops_issuing_after_the_duration() -> None:
    async with SseServer(delay_s=0.01) as srv:
        t0 = time.perf_counter()
        res = await run_load(sessions(2), Target(srv.base_url, "m"), LoadSpec(concurrency=2, duration_s=0.3))
        elapsed = time.perf_counter() - t0
    assert 0.3 <= elapsed < 1.5
    assert len(res.records) >= 4
    assert all(r.ok for r in res.records)


@pytest.mark.parametrize("transport", ["fast", "aiohttp"])
async def test_multi_turn_session_sends_the_live_reply_as_history(transport: str) -> None:
    sess = Session("mt", (Turn("first question", max_tokens=2), Turn("second question", max_tokens=2)))
    async with SseServer() as srv:
        res = await run_load(
            [sess],
            Target(srv.base_url, "m"),
            LoadSpec(concurrency=1, num_prompts=1, transport=transport),  # type: ignore[arg-type]
        )
        bodies = srv.state.bodies
    assert [r.turn for r in res.records] == [0, 1]
    assert len(bodies) == 2
    assert bodies[1]["messages"] == [
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": "[1:first qu] t1"},
        {"role": "user", "content": "second question"},
    ]
    assert res.records[1].text == "[2:second q] t1"


async def test_error_events_and_missing_done_are_failed_requests_not_aborts() -> None:
    async with SseServer() as srv:
        bad = await run_load(
            sessions(2), Target(srv.base_url, "error-event"), LoadSpec(concurrency=2, num_prompts=2)
        )
        nodone = await run_load(sessions(1), Target(srv.base_url, "no-done"), LoadSpec(num_prompts=1))
    assert all(r.error and "boom" in r.error for r in bad.records)
    assert nodone.records[0].error == "stream ended without [DONE]"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_unreachable_server_aborts_with_one_clear_line_and_partial_records() -> None:
    sink: list[RequestRecord] = []
    url = f"http://127.0.0.1:{_free_port()}"
    with pytest.raises(LoadAbortedError, match="cannot reach") as info:
        await run_load(sessions(3), Target(url, "m"), LoadSpec(concurrency=2, num_prompts=50), sink=sink)
    assert "\n" not in str(info.value)
    assert info.value.result.records is sink
    assert 1 <= len(sink) < 50
    assert all(not r.ok for r in sink)


async def test_wrong_endpoint_and_non_streaming_server_abort() -> None:
    async with SseServer() as srv:
        with pytest.raises(LoadAbortedError, match="HTTP 404"):
            await run_load(sessions(1), Target(srv.base_url + "/nope", "m"), LoadSpec(num_prompts=3))
        with pytest.raises(LoadAbortedError, match="does not stream"):
            await run_load(sessions(1), Target(srv.base_url, "json"), LoadSpec(num_prompts=3))


async def test_empty_workload_and_bad_spec_are_input_errors() -> None:
    with pytest.raises(InvalidInputError, match="empty"):
        await run_load([], Target("http://127.0.0.1:1", "m"), LoadSpec())
    with pytest.raises(InvalidInputError, match="concurrency"):
        await run_load(sessions(1), Target("http://127.0.0.1:1", "m"), LoadSpec(concurrency=0))
    with pytest.raises(InvalidInputError, match="unknown endpoint"):
        await run_load(sessions(1), Target("http://127.0.0.1:1", "m", endpoint="embeddings"), LoadSpec())


async def test_random_prompts_as_token_ids_to_completions_and_as_text_to_chat() -> None:
    work = random_sessions(3, isl=20, osl=5, range_ratio=0.5, seed=3)
    async with SseServer() as srv:
        res = await run_load(work, Target(srv.base_url, "m", endpoint="completions"), LoadSpec(num_prompts=3))
        assert isinstance(srv.state.bodies[0]["prompt"], list)
        assert srv.state.bodies[0]["ignore_eos"] is True
        assert srv.state.bodies[0]["min_tokens"] == srv.state.bodies[0]["max_tokens"] == 5
        texts = await detokenize_sessions(work, srv.base_url, "m")
        assert isinstance(texts[0].turns[0].prompt, str)
        assert texts[0].turns[0].prompt.startswith("w")
        await run_load(
            texts,
            Target(srv.base_url, "m", endpoint="chat", sampling=Sampling(max_tokens=99)),
            LoadSpec(num_prompts=1),
        )
        assert srv.state.bodies[-1]["max_tokens"] == 5  # the turn's fixed OSL wins over the run default
    assert all(r.output_tokens == 5 for r in res.records)


async def test_token_prompts_to_chat_abort_instead_of_vanishing() -> None:
    work = random_sessions(2, isl=4, osl=2, seed=0)
    async with SseServer() as srv:
        with pytest.raises(LoadAbortedError, match="chat endpoint needs text prompts"):
            await run_load(work, Target(srv.base_url, "m", endpoint="chat"), LoadSpec(num_prompts=2))
        assert srv.state.bodies == []


async def test_first_requests_all_rejected_abort_the_run() -> None:
    from alflow.loadgen.runner import REJECTIONS_BEFORE_ABORT

    async with SseServer() as srv:
        srv.state.reject = True
        with pytest.raises(LoadAbortedError, match="all rejected") as info:
            await run_load(sessions(1), Target(srv.base_url, "m"), LoadSpec(concurrency=1, num_prompts=50))
    assert len(info.value.result.records) == REJECTIONS_BEFORE_ABORT


async def test_a_cancelled_run_awaits_its_open_streams_so_no_record_reads_as_completed() -> None:
    """A stop from a client process's parent cancels the run mid-phase: every open stream ends as "cancelled"."""
    all_open = asyncio.Event()

    class Hanging:
        """A transport whose server never answers."""

        opened = 0

        async def stream(self, *args: object) -> object:
            Hanging.opened += 1
            if Hanging.opened == 4:
                all_open.set()
            await asyncio.Event().wait()
            raise AssertionError("unreachable")

    sink: list[RequestRecord] = []
    spec = LoadSpec(concurrency=4, num_prompts=8)
    target = Target("http://127.0.0.1:9", "m")
    run = asyncio.create_task(run_load(sessions(8), target, spec, transport=Hanging(), sink=sink))  # type: ignore[arg-type]
    await all_open.wait()
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert len(sink) == 4
    assert [r.error for r in sink] == ["cancelled"] * 4  # before: None, which read as four completed requests
    assert all(r.done_ns is not None for r in sink)
