"""The tiny server's HTTP contract over a deterministic engine double (real HTTP on a loopback port).

The engine is a seam: :mod:`tests.unit.tiny_double` implements the engine's interface with real
n-gram drafting over a scripted "model", so these tests pin the server's own behaviour (framing,
usage, counters, validation, queueing) fast. The same properties on the real engine are in
``tests/integration/test_tiny_engine_server.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import aiohttp
import orjson
import pytest

from alflow.errors import InvalidInputError
from alflow.metrics.prometheus import SnapshotWindow, parse_exposition
from alflow.metrics.readers import get_dialect
from alflow.tiny.chat import render_chat
from alflow.tiny.server import TinyService, TinyServiceSettings
from alflow.tiny.settings import resolve_spec
from alflow.tiny.thread import TinyThread
from tests.unit.tiny_double import DoubleEngine, DoubleSpec

pytestmark = pytest.mark.unit

CODE = "def add(a, b):\n    return a + b\n\ndef add(a, b):\n    return a + b\n"


def _server(engine: DoubleEngine, k: int = 3, **kw: Any) -> TinyService:
    return TinyService(
        engine,
        TinyServiceSettings(
            served_model_name="tiny-test", n_ctx=kw.pop("n_ctx", 1024), spec=DoubleSpec(k=k), **kw
        ),
    )


@pytest.fixture
def double() -> DoubleEngine:
    return DoubleEngine(eos_after=30)


@pytest.fixture
def served(double: DoubleEngine) -> Iterator[TinyThread]:
    with TinyThread(_server(double)) as thread:
        yield thread


async def _post(url: str, body: dict[str, Any]) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as http, http.post(url, json=body) as resp:
        raw = await resp.read()
        return resp.status, (orjson.loads(raw) if resp.content_type == "application/json" else raw)


async def _stream(url: str, body: dict[str, Any]) -> list[Any]:
    events: list[Any] = []
    async with aiohttp.ClientSession() as http, http.post(url, json={**body, "stream": True}) as resp:
        assert resp.status == 200
        assert resp.content_type == "text/event-stream"
        raw = (await resp.read()).decode()
    for block in raw.split("\n\n"):
        if not block.strip():
            continue
        assert block.startswith("data: ")
        payload = block[len("data: ") :]
        events.append(payload if payload == "[DONE]" else orjson.loads(payload))
    return events


async def _metrics(base: str) -> str:
    async with aiohttp.ClientSession() as http, http.get(base + "/metrics") as resp:
        assert resp.status == 200
        return await resp.text()


def test_streamed_completion_usage_counts_the_engine_tokens(served: TinyThread, double: DoubleEngine) -> None:
    body = {
        "model": "tiny-test",
        "prompt": CODE,
        "max_tokens": 25,
        "temperature": 0,
        "stream_options": {"include_usage": True},
    }
    events = asyncio.run(_stream(served.base_url + "/v1/completions", body))
    assert events[-1] == "[DONE]"
    usage = events[-2]["usage"]
    assert events[-2]["choices"] == []
    steps = double.calls[-1]
    assert usage["completion_tokens"] == sum(len(s.tokens) for s in steps) == 25
    assert usage["prompt_tokens"] == len(CODE.encode()) + 1  # BOS
    text = "".join(e["choices"][0]["text"] for e in events[:-2])
    assert text == "".join(s.text for s in steps)
    assert events[-3]["choices"][0]["finish_reason"] == "length"
    # with drafting, some chunks carry several tokens
    assert len(events) - 2 < usage["completion_tokens"]


def test_counters_equal_the_engine_steps_of_every_request(served: TinyThread, double: DoubleEngine) -> None:
    async def run() -> tuple[str, str]:
        before = await _metrics(served.base_url)
        for prompt, kind in ((CODE, "completions"), ("a b c a b c a b", "chat"), ("xyz", "completions")):
            if kind == "chat":
                body: dict[str, Any] = {
                    "messages": [{"role": "user", "content": prompt}],
                    "max_tokens": 40,
                    "temperature": 0,
                }
            else:
                body = {"prompt": prompt, "max_tokens": 40, "temperature": 0}
            status, _ = await _post(
                served.base_url + f"/v1/{'chat/' if kind == 'chat' else ''}completions", body
            )
            assert status == 200
        return before, await _metrics(served.base_url)

    before_text, after_text = asyncio.run(run())
    window = SnapshotWindow(parse_exposition(before_text), parse_exposition(after_text))
    stats = get_dialect("vllm").spec_stats(window, k=3)
    steps = [s for call in double.calls for s in call]
    drafted = [s for s in steps if s.drafted > 0]
    assert stats.num_drafts == len(drafted) > 0
    assert stats.draft_tokens == sum(s.drafted for s in drafted)
    assert stats.accepted_tokens == sum(s.accepted for s in steps) > 0
    assert list(stats.accepted_per_position) == [
        sum(1 for s in drafted if len(s.accepted_positions) > i and s.accepted_positions[i]) for i in range(3)
    ]
    assert stats.al == pytest.approx(1 + stats.accepted_tokens / stats.num_drafts)
    after = parse_exposition(after_text)
    assert after.counter("vllm:generation_tokens") == sum(len(s.tokens) for s in steps)
    assert (
        after.counter("vllm:request_success", {"finished_reason": "stop"})
        + after.counter("vllm:request_success", {"finished_reason": "length"})
        == 3
    )


def test_chat_uses_the_plain_template_and_stops_at_the_next_user_turn(served: TinyThread) -> None:
    # the double repeats its prompt ("User: hi\nUser: bye..."), so its reply runs into "\nUser:" and stops there
    messages = [{"role": "user", "content": "hi\nUser: bye"}]
    status, out = asyncio.run(
        _post(
            served.base_url + "/v1/chat/completions",
            {"messages": messages, "max_tokens": 200, "temperature": 0},
        )
    )
    assert status == 200
    assert out["usage"]["prompt_tokens"] == len(render_chat([("user", "hi\nUser: bye")]).encode()) + 1
    assert out["choices"][0]["message"]["content"] == "User: hi"
    assert out["choices"][0]["finish_reason"] == "stop"
    assert out["object"] == "chat.completion"


def test_chat_stream_has_role_chunk_usage_and_done(served: TinyThread) -> None:
    body = {
        "messages": [{"role": "user", "content": CODE}],
        "max_tokens": 12,
        "temperature": 0,
        "stream_options": {"include_usage": True},
    }
    events = asyncio.run(_stream(served.base_url + "/v1/chat/completions", body))
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"
    assert all(e["object"] == "chat.completion.chunk" for e in events[:-1])
    assert events[-2]["usage"]["completion_tokens"] == 12
    assert events[-1] == "[DONE]"


def test_token_id_prompts_and_ignore_eos(served: TinyThread, double: DoubleEngine) -> None:
    ids = double.tokenize("abcabcabc", add_bos=True)
    status, out = asyncio.run(
        _post(
            served.base_url + "/v1/completions",
            {"prompt": ids, "max_tokens": 60, "temperature": 0, "ignore_eos": True},
        )
    )
    assert status == 200
    assert out["usage"] == {"prompt_tokens": len(ids), "completion_tokens": 60, "total_tokens": len(ids) + 60}
    assert out["choices"][0]["finish_reason"] == "length"
    # without ignore_eos the double ends at EOS after 30 tokens
    status, out = asyncio.run(
        _post(served.base_url + "/v1/completions", {"prompt": ids, "max_tokens": 60, "temperature": 0})
    )
    assert out["choices"][0]["finish_reason"] == "stop"
    assert out["usage"]["completion_tokens"] == 31


def test_three_concurrent_clients_are_served_one_at_a_time() -> None:
    engine = DoubleEngine(eos_after=1000, step_delay_s=0.01)

    async def run(base: str) -> list[int]:
        body = {
            "prompt": "q r s t u v",
            "max_tokens": 30,
            "temperature": 0.7,
            "seed": 1,
            "stream_options": {"include_usage": True},
        }
        results = await asyncio.gather(*(_stream(base + "/v1/completions", body) for _ in range(3)))
        return [r[-2]["usage"]["completion_tokens"] for r in results]

    with TinyThread(_server(engine)) as thread:
        assert asyncio.run(run(thread.base_url)) == [30, 30, 30]
        text = asyncio.run(_metrics(thread.base_url))
    assert engine.max_active == 1
    assert len(engine.calls) == 3
    snap = parse_exposition(text)
    assert snap.gauge("vllm:num_requests_running") == 0
    assert snap.gauge("vllm:num_requests_waiting") == 0


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"prompt": "x", "max_tokens": 0}, "max_tokens"),
        ({"prompt": "x", "max_tokens": "ten"}, "max_tokens"),
        ({"prompt": "x", "temperature": -1}, "temperature"),
        ({"prompt": "x", "top_p": 0}, "top_p"),
        ({"prompt": "x", "top_k": -2}, "top_k"),
        ({"prompt": "x", "seed": 1.5}, "seed"),
        ({"prompt": "x", "stop": 3}, "stop"),
        ({"prompt": "x", "ignore_eos": "yes"}, "ignore_eos"),
        ({"prompt": "x", "n": 2}, "n"),
        ({"prompt": "x", "stream_options": {"include_usage": True}}, "stream_options"),
        ({"prompt": "x", "min_tokens": 3, "max_tokens": 5}, "min_tokens"),
        ({"prompt": [1, -4]}, "prompt"),
        ({"prompt": [1, "a"]}, "prompt"),
        ({"prompt": 7}, "prompt"),
        ({"prompt": "x", "max_tokens": 5000}, "max_tokens"),
        ({"messages": "hi"}, "messages"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages"),
    ],
)
def test_bad_requests_get_400_naming_the_field(served: TinyThread, body: dict[str, Any], param: str) -> None:
    path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
    status, out = asyncio.run(_post(served.base_url + path, body))
    assert status == 400
    assert out["error"]["param"] == param
    assert param in out["error"]["message"] or param in ("prompt", "messages")
    # and the server keeps serving
    status, _ = asyncio.run(_post(served.base_url + "/v1/completions", {"prompt": "ok", "max_tokens": 2}))
    assert status == 200


def test_unknown_model_is_404(served: TinyThread) -> None:
    status, out = asyncio.run(_post(served.base_url + "/v1/completions", {"model": "gpt-9", "prompt": "x"}))
    assert status == 404
    assert "gpt-9" in out["error"]["message"]


def test_models_version_and_health(served: TinyThread) -> None:
    async def run() -> tuple[Any, Any, int]:
        async with aiohttp.ClientSession() as http:
            async with http.get(served.base_url + "/v1/models") as r:
                models = await r.json()
            async with http.get(served.base_url + "/version") as r:
                version = await r.json()
            async with http.get(served.base_url + "/health") as r:
                health = r.status
        return models, version, health

    models, version, health = asyncio.run(run())
    assert health == 200
    entry = models["data"][0]
    assert entry["id"] == "tiny-test"
    assert entry["max_concurrency"] == 1
    assert version["k"] == 3
    assert version["synthetic_acceptance"] is None
    assert version["simulated"] is False


def test_version_reports_synthetic_acceptance_so_the_gsm8k_guard_refuses() -> None:
    from alflow.evals.run import probe_synthetic

    spec = resolve_spec(
        speculative_config='{"method":"ngram","num_speculative_tokens":3,"rejection_sample_method":"synthetic","synthetic_acceptance_length":2.0}'
    )
    server = TinyService(
        DoubleEngine(),
        TinyServiceSettings(
            served_model_name="tiny-test",
            spec=DoubleSpec(k=3, synthetic_rates=spec.synthetic_rates),
            synthetic=spec.synthetic,
            speculative_config=spec.speculative_config(),
        ),
    )
    with TinyThread(server) as thread:
        found = asyncio.run(probe_synthetic(thread.base_url))
    assert found is not None
    assert found.startswith("/version")


def test_tokenize_and_detokenize(served: TinyThread, double: DoubleEngine) -> None:
    status, out = asyncio.run(_post(served.base_url + "/tokenize", {"prompt": "hi"}))
    assert status == 200
    assert out["tokens"] == double.tokenize("hi")
    status, out = asyncio.run(
        _post(served.base_url + "/detokenize", {"tokens": double.tokenize("hi", add_bos=False)})
    )
    assert out == {"prompt": "hi"}
    status, out = asyncio.run(_post(served.base_url + "/detokenize", {"tokens": "hi"}))
    assert status == 400
    assert out["error"]["param"] == "tokens"


class _FailingEngine(DoubleEngine):
    """Refuses prompts holding token 'Z' up front; breaks after two steps on prompts holding 'B'."""

    def generate(self, prompt: Any, **kw: Any) -> Any:  # type: ignore[override]
        text = self.detokenize(prompt)
        if "Z" in text:
            raise InvalidInputError("prompt holds a forbidden token")
        steps = super().generate(prompt, **kw)
        if "B" not in text:
            return steps

        def broken() -> Any:
            for i, step in enumerate(steps):
                if i == 2:
                    raise RuntimeError("llama.cpp decode failed")
                yield step

        return broken()


def test_engine_refusal_is_400_and_a_failure_mid_stream_is_an_error_event() -> None:
    with TinyThread(_server(_FailingEngine())) as thread:
        status, out = asyncio.run(
            _post(thread.base_url + "/v1/completions", {"prompt": "xZ", "max_tokens": 4})
        )
        assert status == 400
        assert "forbidden token" in out["error"]["message"]
        events = asyncio.run(
            _stream(
                thread.base_url + "/v1/completions", {"prompt": "aBaBaB", "max_tokens": 30, "temperature": 0}
            )
        )
        assert events[-1] == "[DONE]"
        assert "llama.cpp decode failed" in events[-2]["error"]["message"]
        status, out = asyncio.run(
            _post(thread.base_url + "/v1/completions", {"prompt": "aBaB", "max_tokens": 30})
        )
        assert status == 500
        # the queue goes on
        status, _ = asyncio.run(
            _post(thread.base_url + "/v1/completions", {"prompt": "fine", "max_tokens": 3})
        )
        assert status == 200
