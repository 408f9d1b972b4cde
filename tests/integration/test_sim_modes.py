"""Natural acceptance, GSM8K answer mode and fault injection, over real HTTP (sim in a thread)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from alflow.frameworks.vllm import names as vllm_names
from alflow.sim.config import SimConfig
from alflow.sim.process import start_in_thread
from tests.simconfig import fast_sim

pytestmark = [pytest.mark.integration, pytest.mark.timing]

CODING = [
    "Write a Python function `def merge(a, b):` that merges two sorted lists; return the result.",
    "Fix the bug in this JavaScript code: const f = (x) => { return x.map(y => y * 2) }",
    "Implement a binary search algorithm in Rust over an array of integers.",
    "import numpy as np\n# explain what this code does\nprint(np.arange(10).sum())",
]
WRITING = [
    "Write a short story about a lighthouse keeper who finds a letter.",
    "Write a poem about autumn rain in the city.",
    "Write a creative essay about the smell of old books.",
    "Write a blog post about a summer road trip, with a twist ending in the story.",
]


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as s:
        yield s


async def vllm_counters(session: aiohttp.ClientSession, url: str) -> tuple[float, float]:
    async with session.get(url) as resp:
        text = await resp.text()
    values = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
    return values[vllm_names.VLLM_NUM_DRAFTS + "_total"], values[
        vllm_names.VLLM_NUM_ACCEPTED_TOKENS + "_total"
    ]


async def natural_al(session: aiohttp.ClientSession, quality: float, prompts: list[str]) -> float:
    cfg = fast_sim(dialect="vllm", k=3, method="mtp", acceptance_quality=quality)
    with start_in_thread(cfg.validate()) as sim:
        d0, a0 = await vllm_counters(session, sim.metrics_url)

        async def one(prompt: str) -> None:
            body = {
                "messages": [{"role": "user", "content": prompt}],
                "max_tokens": 1500,
                "ignore_eos": True,
                "temperature": 0,
            }
            async with session.post(sim.base_url + "/v1/chat/completions", json=body) as resp:
                assert resp.status == 200

        await asyncio.gather(*(one(p) for p in prompts))
        d1, a1 = await vllm_counters(session, sim.metrics_url)
    return 1 + (a1 - a0) / (d1 - d0)


async def test_natural_coding_accepts_more_than_writing_and_quality_lowers_al(
    session: aiohttp.ClientSession,
) -> None:
    coding = await natural_al(session, 1.0, CODING)
    writing = await natural_al(session, 1.0, WRITING)
    degraded = await natural_al(session, 0.5, CODING)
    # calibrated to SPEED-Bench MTP figures at K=3: coding about 3.3, writing/roleplay about 2.1
    assert 2.9 < coding < 3.6
    assert 1.8 < writing < 2.4
    assert coding > writing + 0.6
    assert degraded < coding - 1.0


async def test_natural_acceptance_is_deterministic(session: aiohttp.ClientSession) -> None:
    assert await natural_al(session, 1.0, CODING[:2]) == await natural_al(session, 1.0, CODING[:2])


def _key(tmp_path: Path) -> Path:
    rows = [
        {
            "question": "Tom has 3 apples and buys 4 more. How many apples does he have?",
            "answer": "He has 3 + 4 = <<3+4=7>>7 apples.\n#### 7",
        },
        {
            "question": "A book costs $12 and a pen costs $3. What do both cost together?",
            "answer": "Together they cost 12 + 3 = <<12+3=15>>15 dollars.\n#### 15",
        },
    ]
    path = tmp_path / "key.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in rows) + b"\n")
    return path


async def answer(session: aiohttp.ClientSession, cfg: SimConfig) -> tuple[str, str]:
    """Reply to a 1-shot prompt whose last question is the book question."""
    prompt = (
        "Question: Tom has 3 apples and buys 4 more. How many apples does he have?\nAnswer: 3 + 4 = 7\n#### 7\n\n"
        "Question: A book costs $12 and a pen costs $3. What do both cost together?\nAnswer:"
    )
    with start_in_thread(cfg.validate()) as sim:
        body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": 256, "temperature": 0}
        async with session.post(sim.base_url + "/v1/chat/completions", json=body) as resp:
            out = await resp.json()
    return str(out["choices"][0]["message"]["content"]), str(out["choices"][0]["finish_reason"])


async def test_answer_mode_correct_wrong_and_garbled(tmp_path: Path, session: aiohttp.ClientSession) -> None:
    key = _key(tmp_path)
    right, reason = await answer(session, fast_sim(answer_key=key, answer_accuracy=1.0))
    assert right.rstrip().endswith("#### 15")
    assert reason == "stop"
    wrong, reason = await answer(session, fast_sim(answer_key=key, answer_accuracy=0.0))
    assert reason == "stop"
    match = re.search(r"#### (\S+)\s*$", wrong)
    assert match is not None
    assert match.group(1) != "15"
    garbled, _ = await answer(session, fast_sim(answer_key=key, answer_accuracy=1.0, synthetic_al=3.0))
    assert "#### 15" not in garbled


async def test_error_rate_gives_500_with_error_body(session: aiohttp.ClientSession) -> None:
    cfg = fast_sim(error_rate=1.0)
    with start_in_thread(cfg.validate()) as sim:
        body = {"prompt": "x", "max_tokens": 3}
        async with session.post(sim.base_url + "/v1/completions", json=body) as resp:
            assert resp.status == 500
            err = await resp.json()
        assert err["error"]["code"] == 500
        async with session.get(sim.base_url + "/health") as resp:
            assert resp.status == 200


async def test_stream_error_event_inside_200(session: aiohttp.ClientSession) -> None:
    cfg = fast_sim(stream_error_rate=1.0)
    with start_in_thread(cfg.validate()) as sim:
        body = {"prompt": "x", "max_tokens": 50, "ignore_eos": True, "stream": True}
        async with session.post(sim.base_url + "/v1/completions", json=body) as resp:
            assert resp.status == 200
            text = (await resp.read()).decode()
    events = [orjson.loads(b[6:]) for b in text.split("\n\n") if b.startswith("data: {")]
    assert "error" in events[-1]
    assert events[-1]["error"]["code"] == 500
    assert text.rstrip().endswith("data: [DONE]")


async def test_stall_after_tokens_stops_the_stream(session: aiohttp.ClientSession) -> None:
    cfg = fast_sim(stall_after_tokens=5, synthetic_al=1.0)
    with start_in_thread(cfg.validate()) as sim:
        body = {"prompt": "x", "max_tokens": 50, "ignore_eos": True, "stream": True}
        received = bytearray()

        async def read_all(resp: aiohttp.ClientResponse) -> None:
            async for chunk in resp.content.iter_any():
                received.extend(chunk)

        async with session.post(sim.base_url + "/v1/completions", json=body) as resp:
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(read_all(resp), 0.5)
        assert received.count(b'"text":') == 5
        assert b"[DONE]" not in received
        async with session.get(sim.base_url + "/health") as resp:
            assert resp.status == 200


async def test_crash_after_requests_in_thread_stops_server(session: aiohttp.ClientSession) -> None:
    cfg = fast_sim(crash_after_requests=2)
    with start_in_thread(cfg.validate()) as sim:
        for _ in range(2):
            async with session.post(
                sim.base_url + "/v1/completions", json={"prompt": "x", "max_tokens": 2}
            ) as r:
                assert r.status == 200
        assert sim.crashed.wait(5)


async def test_requests_beyond_max_num_seqs_queue(session: aiohttp.ClientSession) -> None:
    cfg = fast_sim(max_num_seqs=1, stall_after_tokens=3, synthetic_al=1.0)
    with start_in_thread(cfg.validate()) as sim:
        body = {"prompt": "x", "max_tokens": 50, "ignore_eos": True, "stream": True}

        async def gauges() -> dict[str, float]:
            async with session.get(sim.metrics_url) as resp:
                text = await resp.text()
            return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}

        first = await session.post(sim.base_url + "/v1/completions", json=body)
        await first.content.readuntil(b"\n\n")
        second = asyncio.ensure_future(session.post(sim.base_url + "/v1/completions", json=body))
        await asyncio.sleep(0.3)
        g = await gauges()
        assert g[vllm_names.VLLM_NUM_RUNNING] == 1
        assert g[vllm_names.VLLM_NUM_WAITING] == 1
        steps = g[vllm_names.VLLM_NUM_DRAFTS + "_total"]
        await asyncio.sleep(0.2)
        assert (await gauges())[vllm_names.VLLM_NUM_DRAFTS + "_total"] == steps  # no busy loop while stalled
        first.close()  # the client goes away: its slot frees, the queued request runs
        resp = await asyncio.wait_for(second, 5)
        chunk = await asyncio.wait_for(resp.content.readuntil(b"\n\n"), 5)
        assert chunk.startswith(b"data: {")
        resp.close()


@pytest.mark.parametrize(("mode", "fixed"), [("fixed", True), ("real-draft-token", False)])
async def test_sglang_token_mode_output(session: aiohttp.ClientSession, mode: str, fixed: bool) -> None:
    cfg = fast_sim(dialect="sglang", synthetic_al=2.0, sglang_token_mode=mode)
    with start_in_thread(cfg.validate()) as sim:
        body = {"prompt": "Tell me a story", "max_tokens": 12, "ignore_eos": True}
        async with session.post(sim.base_url + "/v1/completions", json=body) as resp:
            out = await resp.json()
    text = out["choices"][0]["text"]
    assert out["usage"]["completion_tokens"] == 12
    assert (text == "d" * 12) is fixed  # token id 100 is "d" in the sim's vocabulary


async def test_greedy_requests_are_reproducible(session: aiohttp.ClientSession, tmp_path: Path) -> None:
    log = tmp_path / "steps.jsonl"
    cfg = fast_sim(step_log=log, max_num_seqs=1)
    with start_in_thread(cfg.validate()) as sim:
        texts = []
        for temperature in (0.0, 0.0, 1.0):
            body = {"prompt": "def add(a, b):", "max_tokens": 64, "temperature": temperature}
            async with session.post(sim.base_url + "/v1/completions", json=body) as resp:
                out = await resp.json()
            texts.append((out["choices"][0]["text"], out["id"]))
    rows = [orjson.loads(line) for line in log.read_bytes().splitlines()]
    accepted = [[a for r in rows if r["requests"] == [rid] for a in r["accepted"]] for _, rid in texts]
    assert texts[0][0] == texts[1][0]
    assert accepted[0] == accepted[1]
    assert (texts[2][0], accepted[2]) != (texts[0][0], accepted[0])


async def test_answer_mode_with_thinking_puts_steps_in_reasoning(
    tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    cfg = fast_sim(answer_key=_key(tmp_path), answer_accuracy=1.0)
    with start_in_thread(cfg.validate()) as sim:
        body = {
            "messages": [
                {
                    "role": "user",
                    "content": "A book costs $12 and a pen costs $3. What do both cost together?",
                }
            ],
            "max_tokens": 256,
            "chat_template_kwargs": {"enable_thinking": True},
        }
        async with session.post(sim.base_url + "/v1/chat/completions", json=body) as resp:
            message = (await resp.json())["choices"][0]["message"]
    assert message["reasoning"].startswith("Let's solve this step by step.")
    assert message["content"] == "The answer is 15.\n#### 15"


@pytest.mark.parametrize("dialect", ["vllm", "trtllm"])
async def test_per_request_draws_do_not_depend_on_the_batch(
    session: aiohttp.ClientSession, tmp_path: Path, dialect: str
) -> None:
    log = tmp_path / "steps.jsonl"
    # a few ms per step (not time_scale=0): on a loaded machine four requests that finish in a blink
    # may each run alone, and then the batch this test is about never forms
    cfg = fast_sim(dialect=dialect, k=3, synthetic_al=2.49, step_log=log, time_scale=0.1)
    seeded = {"prompt": "same request", "max_tokens": 200, "ignore_eos": True, "seed": 7}
    other = {"prompt": "other", "max_tokens": 300, "ignore_eos": True}

    async def post(body: dict) -> str:
        async with session.post(sim.base_url + "/v1/completions", json=body) as resp:
            return str((await resp.json())["id"])

    with start_in_thread(cfg.validate()) as sim:
        alone = await post(seeded)
        crowd = await asyncio.gather(post(other), post(seeded), post(other), post(other))
    rows = [orjson.loads(line) for line in log.read_bytes().splitlines()]

    def accepted(rid: str) -> list[int]:
        return [r["accepted"][r["requests"].index(rid)] for r in rows if rid in r["requests"]]

    assert any(len(r["requests"]) > 1 for r in rows if crowd[1] in r["requests"])
    assert accepted(alone) == accepted(crowd[1])
    assert accepted(crowd[0]) != accepted(crowd[2])
