"""The sim's HTTP contract over real HTTP on an ephemeral port: OpenAI streaming format, usage,
tokenizer endpoints, labelling, bad input, and the metrics of each dialect."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from alflow.frameworks.sglang import names as sglang_names
from alflow.frameworks.trtllm import names as trtllm_names
from alflow.frameworks.vllm import names as vllm_names
from alflow.sim.process import SimThread, start_in_thread
from tests.simconfig import fast_sim

pytestmark = pytest.mark.integration

DIALECTS = ("vllm", "sglang", "trtllm")


@pytest.fixture(params=DIALECTS)
def sim(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SimThread]:
    cfg = fast_sim(
        dialect=request.param,
        k=3,
        synthetic_al=2.49,
        step_log=tmp_path / "steps.jsonl",
        max_model_len=4096,
    )
    with start_in_thread(cfg.validate()) as handle:
        yield handle


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as s:
        yield s


async def stream_events(resp: aiohttp.ClientResponse) -> list[dict]:
    """Parse an SSE body into JSON events; the last line must be [DONE]."""
    text = (await resp.read()).decode()
    events = [block for block in text.split("\n\n") if block.strip()]
    assert events[-1] == "data: [DONE]"
    out = []
    for block in events[:-1]:
        assert block.startswith("data: ")
        out.append(orjson.loads(block[6:]))
    return out


def step_log(path: Path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


async def test_chat_stream_is_openai_format_and_usage_matches(
    sim: SimThread, session: aiohttp.ClientSession
) -> None:
    body = {
        "model": "sim/llama-3.3-70b",
        "messages": [{"role": "user", "content": "Tell me about GPUs."}],
        "max_tokens": 200,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    async with session.post(sim.base_url + "/v1/chat/completions", json=body) as resp:
        assert resp.status == 200
        assert resp.headers["x-alflow-simulated"] == "1"
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        events = await stream_events(resp)
    rid = events[0]["id"]
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"
    content_events = [e for e in events if e["choices"] and e["choices"][0]["delta"].get("content")]
    for e in events:
        assert e["object"] == "chat.completion.chunk"
        assert e["model"] == "sim/llama-3.3-70b"
        assert e["id"] == rid
    assert content_events[-1]["choices"][0]["finish_reason"] == "length"
    usage = events[-1]["usage"]
    assert events[-1]["choices"] == []
    assert usage["completion_tokens"] == 200
    assert usage["total_tokens"] == usage["prompt_tokens"] + 200
    # one chunk per step: the first token from prefill, then a + 1 tokens per verify step (cut at 200)
    steps = [s for s in step_log(Path(sim.config.step_log or "")) if rid in s["requests"]]
    accepted = [s["accepted"][s["requests"].index(rid)] for s in steps]
    assert len(content_events) == 1 + len(steps)
    emitted = 1 + sum(a + 1 for a in accepted[:-1])
    assert emitted < 200 <= emitted + accepted[-1] + 1


async def test_usage_sums_match_generation_metrics(sim: SimThread, session: aiohttp.ClientSession) -> None:
    async def run(max_tokens: int) -> int:
        body = {
            "prompt": "Once upon a time",
            "max_tokens": max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        async with session.post(sim.base_url + "/v1/completions", json=body) as resp:
            events = await stream_events(resp)
        text = "".join(e["choices"][0]["text"] for e in events if e["choices"])
        assert all(e["object"] == "text_completion" for e in events)
        usage = events[-1]["usage"]
        assert usage["completion_tokens"] <= max_tokens
        assert text
        return int(usage["completion_tokens"])

    async def metric(name: str) -> float:
        async with session.get(sim.metrics_url) as resp:
            text = await resp.text()
        return sum(
            s.value
            for f in text_string_to_metric_families(text)
            for s in f.samples
            if s.name == name + "_total"
        )

    gen_name = {
        "vllm": vllm_names.VLLM_GENERATION_TOKENS,
        "sglang": sglang_names.SGLANG_GENERATION_TOKENS,
        "trtllm": trtllm_names.TRTLLM_GENERATION_TOKENS,
    }[sim.config.dialect]
    before = await metric(gen_name)
    totals = await asyncio.gather(*(run(m) for m in (5, 50, 300, 1000)))
    after = await metric(gen_name)
    if sim.config.dialect == "sglang":
        # SGLang counts tokens of verify steps (a + 1 as drawn): not the prefill token, not the cut
        assert after - before >= sum(totals) - 4
    else:
        assert after - before == sum(totals)


async def test_non_streaming_and_token_id_prompt(sim: SimThread, session: aiohttp.ClientSession) -> None:
    async with session.post(sim.base_url + "/tokenize", json={"prompt": "Hello world, hello code."}) as resp:
        tok = await resp.json()
    assert tok["count"] == len(tok["tokens"])
    async with session.post(sim.base_url + "/detokenize", json={"tokens": tok["tokens"][1:]}) as resp:
        assert (await resp.json())["prompt"] == "Hello world, hello code."
    body = {"prompt": tok["tokens"], "max_tokens": 7, "ignore_eos": True}
    async with session.post(sim.base_url + "/v1/completions", json=body) as resp:
        assert resp.status == 200
        out = await resp.json()
    assert out["usage"] == {
        "prompt_tokens": tok["count"],
        "completion_tokens": 7,
        "total_tokens": tok["count"] + 7,
    }
    assert out["choices"][0]["finish_reason"] == "length"
    assert out["model"].startswith("sim/")
    body = {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}], "max_tokens": 3}
    async with session.post(sim.base_url + "/v1/chat/completions", json=body) as resp:
        chat = await resp.json()
    assert chat["object"] == "chat.completion"
    assert chat["choices"][0]["message"]["role"] == "assistant"
    assert 1 <= chat["usage"]["completion_tokens"] <= 3


async def test_models_health_and_labels(sim: SimThread, session: aiohttp.ClientSession) -> None:
    async with session.get(sim.base_url + "/v1/models") as resp:
        models = await resp.json()
        assert resp.headers["x-alflow-simulated"] == "1"
    assert [m["id"] for m in models["data"]] == ["sim/llama-3.3-70b"]
    for path in ("/health", sim.metrics_url.removeprefix(sim.base_url), "/no-such-path"):
        async with session.get(sim.base_url + path) as resp:
            assert resp.headers["x-alflow-simulated"] == "1"
            assert resp.status == (404 if path == "/no-such-path" else 200)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b'{"messages": [', None),
        (b"[1, 2]", None),
        (b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": "ten"}', "max_tokens"),
        (b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}', "max_tokens"),
        (b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": -5}', "max_tokens"),
        (b'{"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}', "temperature"),
        (b'{"messages": [{"role": "user", "content": "x"}], "stream": "yes"}', "stream"),
        (b'{"messages": "hello"}', "messages"),
        (b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": 5000}', "max_tokens"),
        (
            b'{"messages": [{"role": "user", "content": "x"}], "stream_options": {"include_usage": true}}',
            "stream_options",
        ),
        (b'{"messages": [{"role": "user", "content": "x"}], "n": 2}', "n"),
        (b'{"messages": [{"role": "user", "content": "x"}], "model": "other"}', "model"),
    ],
)
async def test_bad_input_is_400_and_server_keeps_serving(
    sim: SimThread, session: aiohttp.ClientSession, body: bytes, param: str | None
) -> None:
    url = sim.base_url + "/v1/chat/completions"
    async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as resp:
        err = await resp.json()
        assert resp.status == (404 if param == "model" else 400)
    assert set(err["error"]) == {"message", "type", "param", "code"}
    assert err["error"]["param"] == param
    assert err["error"]["message"]
    good = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 4}
    async with session.post(url, json=good) as resp:
        assert resp.status == 200


async def test_prompt_over_context_limit_is_400(sim: SimThread, session: aiohttp.ClientSession) -> None:
    prompt = "lorem ipsum dolor " * 3000
    async with session.post(
        sim.base_url + "/v1/completions", json={"prompt": prompt, "max_tokens": 4}
    ) as resp:
        assert resp.status == 400
        err = await resp.json()
    assert "maximum context length" in err["error"]["message"]
    async with session.post(
        sim.base_url + "/v1/completions", json={"prompt": [10**9], "max_tokens": 4}
    ) as resp:
        assert resp.status == 400


async def test_trtllm_json_iteration_stats_drain(tmp_path: Path, session: aiohttp.ClientSession) -> None:
    cfg = fast_sim(dialect="trtllm", k=3, synthetic_al=3.0)
    with start_in_thread(cfg.validate()) as sim:
        body = {"prompt": "x", "max_tokens": 31, "ignore_eos": True}
        async with session.post(sim.base_url + "/v1/completions", json=body) as resp:
            assert resp.status == 200
        async with session.get(sim.base_url + "/metrics") as resp:
            stats = await resp.json()
        assert len(stats) == 10  # 1 prefill token + 10 verify steps of 3 tokens
        assert all(s["specDecodingStats"]["acceptanceLength"] == 3.0 for s in stats)
        async with session.get(sim.base_url + "/metrics") as resp:
            assert await resp.json() == []
        async with session.get(sim.metrics_url) as resp:
            text = await resp.text()
        assert "trtllm_spec_decode_drafted_tokens_total" in text
        assert 'token_position="2"' in text


async def test_thinking_streams_reasoning_then_content(
    sim: SimThread, session: aiohttp.ClientSession
) -> None:
    keys = {
        "vllm": ["reasoning"],
        "sglang": ["reasoning_content"],
        "trtllm": ["reasoning", "reasoning_content"],
    }
    expected = keys[sim.config.dialect]
    body = {
        "messages": [{"role": "user", "content": "Think about GPUs."}],
        "max_tokens": 3000,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
        "chat_template_kwargs": {"enable_thinking": True},
    }
    async with session.post(sim.base_url + "/v1/chat/completions", json=body) as resp:
        events = await stream_events(resp)
    deltas = [e["choices"][0]["delta"] for e in events if e["choices"]][1:]  # after the role chunk
    kinds = ["reasoning" if expected[0] in d else "content" for d in deltas]
    assert kinds[0] == "reasoning"
    assert "content" in kinds
    assert kinds == sorted(kinds, key=lambda k: k == "content")  # all reasoning first, then content
    for d in deltas:
        if expected[0] in d:
            assert sorted(d) == sorted(expected)
            assert len({d[k] for k in expected}) == 1
    assert events[-1]["usage"]["completion_tokens"] == 3000
    body.update(stream=False, stream_options=None, max_tokens=2000)
    async with session.post(sim.base_url + "/v1/chat/completions", json=body) as resp:
        message = (await resp.json())["choices"][0]["message"]
    assert message[expected[0]]
    assert message["content"]
    body["chat_template_kwargs"] = {"enable_thinking": False}
    async with session.post(sim.base_url + "/v1/chat/completions", json=body) as resp:
        message = (await resp.json())["choices"][0]["message"]
    assert message[expected[0]] is None
