"""The engine's step loop and counting, driven directly with in-memory transports (no sockets)."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from alflow.sim.config import SimConfig
from alflow.sim.server import SimService, _Parsed
from alflow.sim.stats import EngineStats, Histogram
from tests.simconfig import fast_sim

pytestmark = pytest.mark.unit


class FakeTransport:
    """Collects what the engine writes; can pretend the client went away."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.closing = False

    def write(self, data: bytes) -> None:
        self.data += data

    def is_closing(self) -> bool:
        return self.closing


def parsed(max_tokens: int, *, stream: bool = True, ignore_eos: bool = True) -> _Parsed:
    return _Parsed(10, "Write code", "Write code", max_tokens, 0, ignore_eos, 0.0, None, stream, True)


def chunks(data: bytes) -> list[bytes]:
    """Undo HTTP chunked framing."""
    out, i = [], 0
    while i < len(data):
        j = data.index(b"\r\n", i)
        size = int(data[i:j], 16)
        out.append(bytes(data[j + 2 : j + 2 + size]))
        i = j + 2 + size + 2
    return out


async def run(cfg: SimConfig, reqs: list[_Parsed]) -> tuple[SimService, list[FakeTransport], list[object]]:
    server = SimService(cfg.validate())
    server.engine.start()
    transports, built = [], []
    for p in reqs:
        req = server._build(p, chat=True)
        t = FakeTransport()
        req.transport = t
        server.engine.submit(req)
        transports.append(t)
        built.append(req)
    await asyncio.wait_for(asyncio.gather(*(r.done for r in built)), 10)
    await server.engine.stop()
    return server, transports, built


async def test_counts_and_chunks_at_fixed_al() -> None:
    cfg = fast_sim(k=3, synthetic_al=4.0)
    server, transports, _ = await run(cfg, [parsed(30), parsed(31)])
    st = server.engine.stats
    # 30 tokens = 1 prefill + 7 full steps of 4 + a last step cut to 1; 31 = the same with the last cut to 2
    assert st.generation_tokens == 61
    assert st.num_drafts == 8 + 8
    assert st.accepted_tokens == 3 * st.num_drafts
    assert st.verify_tokens == 4 * st.num_drafts
    assert st.accepted_per_position() == [16, 16, 16]
    for t, n in zip(transports, (30, 31), strict=True):
        events = chunks(bytes(t.data))
        assert events[-1].endswith(b"data: [DONE]\n\n")
        usage = orjson.loads(events[-1].split(b"data: ")[2])["usage"]
        assert usage["completion_tokens"] == n
        assert len(events) == 1 + 8  # one chunk per step: prefill, then each verify step


async def test_client_gone_aborts_request() -> None:
    cfg = fast_sim(k=1, synthetic_al=2.0)
    server = SimService(cfg.validate())
    server.engine.start()
    req = server._build(parsed(10_000), chat=False)
    t = FakeTransport()
    req.transport = t
    server.engine.submit(req)
    await asyncio.sleep(0.01)
    t.closing = True
    assert req.done is not None
    await asyncio.wait_for(req.done, 5)
    assert req.error == "aborted"
    assert server.engine.stats.requests_finished["abort"] == 1
    await server.engine.stop()


async def test_natural_eos_and_non_streaming_parts() -> None:
    cfg = fast_sim(k=3, mean_output_tokens=20)
    reqs = [
        _Parsed(10, f"prompt {i}", f"prompt {i}", 4000, 0, False, 0.0, None, False, False) for i in range(20)
    ]
    server, _, built = await run(cfg, reqs)
    lengths = [r.emitted for r in built]  # type: ignore[attr-defined]
    assert all(r.finish_reason == "stop" for r in built)  # type: ignore[attr-defined]
    assert 10 < sum(lengths) / len(lengths) < 40
    assert server.engine.stats.requests_finished["stop"] == 20


async def test_max_num_seqs_bounds_batch() -> None:
    cfg = fast_sim(k=3, synthetic_al=2.5, max_num_seqs=3)
    server = SimService(cfg.validate())
    steps: list[int] = []
    server.engine.start()
    reqs = []
    for _ in range(7):
        r = server._build(parsed(40), chat=True)
        r.transport = FakeTransport()
        server.engine.submit(r)
        reqs.append(r)
    while not all(r.finished for r in reqs):
        steps.append(len(server.engine.running))
        await asyncio.sleep(0)
    assert max(steps) <= 3
    await server.engine.stop()


def test_histogram_and_stats_helpers() -> None:
    h = Histogram((0.1, 1.0))
    for v in (0.05, 0.1, 0.5, 2.0):
        h.observe(v)
    assert h.cumulative() == [("0.1", 2), ("1.0", 3), ("+Inf", 4)]
    assert h.sum == pytest.approx(2.65)
    st = EngineStats(k=3)
    st.accept_hist[:] = [5, 4, 3, 2]
    assert st.accepted_per_position() == [9, 5, 2]


class _Boom:
    granularity = "per-request"

    def draw_step(self, batch_size: int) -> list[int]:
        raise RuntimeError("sampler exploded")


async def test_engine_failure_fails_requests_and_health() -> None:
    from aiohttp.test_utils import TestClient, TestServer

    cfg = fast_sim(dialect="sglang", k=3, synthetic_al=2.0)
    server = SimService(cfg.validate())
    server.engine.sampler = _Boom()  # SGLang: one engine-level draw per step
    async with TestClient(TestServer(server.make_app())) as client:
        body = {"prompt": "x", "max_tokens": 20, "ignore_eos": True, "stream": True}
        resp = await client.post("/v1/completions", json=body)
        text = await resp.text()
        assert '"the engine has failed: sampler exploded"' in text
        assert (await client.get("/health")).status == 503
        again = await client.post("/v1/completions", json=body)
        assert again.status == 500
        assert "engine has failed" in (await again.json())["error"]["message"]
