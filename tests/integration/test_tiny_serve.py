"""``alflow tiny serve`` on the real engine (Gemma 3 270M, llama.cpp): counters, usage, queueing, bench.

The engine is the real one; a recording wrapper keeps every :class:`StepEvent` it yields, so the
server's vLLM-dialect counters (read over real HTTP, parsed like any vLLM scrape) are compared with
the decode loop's own per-request counts. Needs the ``alflow[tiny]`` extra: without it these tests
skip, except under ``CI=true`` where they fail.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from alflow.config import SpeculativeConfig, server_config
from alflow.frameworks.recipes import build_launch
from alflow.metrics.prometheus import Snapshot, SnapshotWindow, parse_exposition
from alflow.metrics.readers import get_dialect
from alflow.tiny.server import TinyService, TinyServiceSettings
from alflow.tiny.settings import resolve_spec
from alflow.tiny.thread import TinyThread
from alflow.workloads import tiny_prompts_path
from alflow_infra.runners import ProcessRunner, running_server
from tests.tiny_support import tiny_engine_module

pytestmark = [pytest.mark.engines, pytest.mark.tiny]

ALFLOW = str(Path(sys.executable).with_name("alflow"))
K = 3
CODE_PROMPT = (
    "Rename the variable `n` to `count` in this function and show the whole function again:\n"
    "```python\ndef total(items):\n    n = 0\n    for item in items:\n        n = n + item.price\n    return n\n```"
)


class Recording:
    """The real engine, keeping the steps of every request it decodes (and how many run at once)."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.model_name: str = engine.model_name
        self.calls: list[list[Any]] = []
        self.active = 0
        self.max_active = 0
        self._lock = threading.Lock()

    @property
    def eos_token_ids(self) -> frozenset[int]:
        return frozenset(self.engine.eos_token_ids)

    def tokenize(self, text: str, *, add_bos: bool = True) -> list[int]:
        return list(self.engine.tokenize(text, add_bos=add_bos))

    def detokenize(self, tokens: Sequence[int]) -> str:
        return str(self.engine.detokenize(tokens))

    def generate(self, prompt: Sequence[int], **kw: Any) -> Iterator[Any]:
        steps = self.engine.generate(prompt, **kw)
        record: list[Any] = []
        self.calls.append(record)

        def run() -> Iterator[Any]:
            with self._lock:
                self.active += 1
                self.max_active = max(self.max_active, self.active)
            try:
                for step in steps:
                    record.append(step)
                    yield step
            finally:
                with self._lock:
                    self.active -= 1

        return run()


@pytest.fixture(scope="module")
def tiny_engine() -> Any:
    mod = tiny_engine_module()
    return mod.TinyEngine.load(n_ctx=2048, seed=0, n_threads=1)  # 1: robust on a busy shared CPU


@pytest.fixture(scope="module")
def served(tiny_engine: Any) -> Iterator[tuple[TinyThread, Recording]]:
    mod = tiny_engine_module()
    recording = Recording(tiny_engine)
    server = TinyService(
        recording,
        TinyServiceSettings(
            served_model_name="gemma-3-270m",
            n_ctx=2048,
            vocab_size=tiny_engine.vocab_size,
            spec=mod.SpecSettings(k=K),
            speculative_config=resolve_spec(k=K).speculative_config(),
        ),
    )
    with TinyThread(server) as thread:
        yield thread, recording


async def _scrape(base: str) -> Snapshot:
    async with aiohttp.ClientSession() as http, http.get(base + "/metrics") as resp:
        assert resp.status == 200
        return parse_exposition(await resp.text())


async def _stream(base: str, path: str, body: dict[str, Any]) -> tuple[str, dict[str, Any], str | None]:
    """Text, usage and finish reason of one streamed request."""
    payload = {**body, "stream": True, "stream_options": {"include_usage": True}}
    async with aiohttp.ClientSession() as http, http.post(base + path, json=payload) as resp:
        assert resp.status == 200, await resp.text()
        raw = (await resp.read()).decode()
    text, usage, reason = "", {}, None
    blocks = [b[len("data: ") :] for b in raw.split("\n\n") if b.strip()]
    assert blocks[-1] == "[DONE]"
    for block in blocks[:-1]:
        event = orjson.loads(block)
        assert "error" not in event, event
        if event.get("usage"):
            usage = event["usage"]
        for choice in event["choices"]:
            text += choice.get("text") or (choice.get("delta") or {}).get("content") or ""
            reason = choice.get("finish_reason") or reason
    return text, usage, reason


def test_counters_and_usage_equal_the_decode_loops_own_counts(served: tuple[TinyThread, Recording]) -> None:
    thread, recording = served
    base = thread.base_url
    requests = [
        (
            "/v1/completions",
            {"prompt": CODE_PROMPT, "max_tokens": 40, "temperature": 0.8, "top_k": 40, "seed": 7},
        ),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": CODE_PROMPT}], "max_tokens": 40, "temperature": 0.0},
        ),
        (
            "/v1/completions",
            {
                "prompt": "Once upon a time, in a quiet village,",
                "max_tokens": 24,
                "temperature": 0.8,
                "seed": 3,
            },
        ),
    ]

    async def run() -> tuple[Snapshot, list[tuple[str, dict[str, Any], str | None]], Snapshot]:
        before = await _scrape(base)
        results = [await _stream(base, path, body) for path, body in requests]
        return before, results, await _scrape(base)

    first_call = len(recording.calls)
    before, results, after = asyncio.run(run())
    calls = recording.calls[first_call:]
    assert len(calls) == len(requests)
    for (text, usage, reason), steps in zip(results, calls, strict=True):
        # usage is what the loop emitted; the streamed text is the loop's text
        assert usage["completion_tokens"] == sum(len(s.tokens) for s in steps)
        assert text == "".join(s.text for s in steps)
        assert reason == steps[-1].finish_reason
    steps = [s for call in calls for s in call]
    drafted = [s for s in steps if s.drafted > 0]
    stats = get_dialect("vllm").spec_stats(SnapshotWindow(before, after), k=K)
    assert stats.num_drafts == len(drafted) > 0
    assert stats.draft_tokens == sum(s.drafted for s in drafted)
    assert stats.accepted_tokens == sum(s.accepted for s in drafted)
    assert stats.accepted_tokens > 0, "the code prompt gives n-gram drafts that are accepted"
    assert list(stats.accepted_per_position) == [
        sum(1 for s in drafted if i < len(s.accepted_positions) and s.accepted_positions[i]) for i in range(K)
    ]
    gen = (after.counter("vllm:generation_tokens") or 0) - (before.counter("vllm:generation_tokens") or 0)
    assert gen == sum(len(s.tokens) for s in steps)
    prompt_tokens = (after.counter("vllm:prompt_tokens") or 0) - (before.counter("vllm:prompt_tokens") or 0)
    assert prompt_tokens == sum(u["prompt_tokens"] for _, u, _ in results)


def test_three_concurrent_clients_queue_and_all_complete(served: tuple[TinyThread, Recording]) -> None:
    thread, recording = served
    body = {"prompt": CODE_PROMPT, "max_tokens": 16, "temperature": 0.8, "seed": 11}

    async def run() -> list[tuple[str, dict[str, Any], str | None]]:
        return list(
            await asyncio.gather(*(_stream(thread.base_url, "/v1/completions", body) for _ in range(3)))
        )

    first_call = len(recording.calls)
    results = asyncio.run(run())
    assert recording.max_active == 1, "the engine never ran two sequences at once"
    calls = recording.calls[first_call:]
    assert len(calls) == 3
    assert all(usage["completion_tokens"] > 0 for _, usage, _ in results)
    # each reply is one of the queued decodes (the queue order need not be the order of gather)
    replies = sorted((text, u["completion_tokens"]) for text, u, _ in results)
    assert replies == sorted(("".join(s.text for s in c), sum(len(s.tokens) for s in c)) for c in calls)


def test_alflow_bench_reads_the_al_of_tiny_serve_from_its_counters() -> None:
    """The recipe starts ``python -m alflow.tiny serve`` through the process runner; bench measures it."""
    tiny_engine_module()
    config = server_config(
        framework="tiny",
        model="gemma-3-270m",
        host="127.0.0.1",
        speculative=SpeculativeConfig(method="ngram", k=K),
        readiness_timeout_s=120,
        max_model_len=2048,
        extra_args=("--threads", "1"),
    )
    launch = build_launch(config)
    with running_server(ProcessRunner(), launch) as handle:
        before = asyncio.run(_scrape(handle.base_url))
        argv = [
            ALFLOW,
            "bench",
            "--base-url",
            handle.base_url,
            "--endpoint",
            "chat",
            "--dataset",
            "speed-bench",
        ]
        argv += ["--input-file", str(tiny_prompts_path()), "--category", "coding", "--num-prompts", "3"]
        argv += [
            "--max-tokens",
            "32",
            "--temperature",
            "0.8",
            "--top-k",
            "40",
            "--extra-body",
            '{"seed": 5}',
            "--k",
            str(K),
            "--json",
            "--no-progress",
        ]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
        after = asyncio.run(_scrape(handle.base_url))
        snap = subprocess.run(
            [ALFLOW, "metrics", "snapshot", handle.base_url, "--k", str(K), "--json"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert snap.returncode == 0, snap.stderr[-3000:]
    lifetime = json.loads(snap.stdout)
    assert lifetime["dialect"] == "vllm"  # detected from the names, like a vLLM server's
    assert lifetime["since_server_start"]["num_drafts"] == after.counter("vllm:spec_decode_num_drafts")
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert summary["completed"] == 3
    assert summary["failed"] == 0
    stats = summary["spec_decode"]["stats"]
    drafts = after.counter("vllm:spec_decode_num_drafts") - before.counter("vllm:spec_decode_num_drafts")  # type: ignore[operator]
    accepted = after.counter("vllm:spec_decode_num_accepted_tokens") - before.counter(  # type: ignore[operator]
        "vllm:spec_decode_num_accepted_tokens"
    )
    assert drafts > 0
    assert stats["num_drafts"] == drafts
    assert stats["accepted_tokens"] == accepted
    assert stats["al"] == pytest.approx(1 + accepted / drafts, abs=1e-12)
    gen = after.counter("vllm:generation_tokens") - before.counter("vllm:generation_tokens")  # type: ignore[operator]
    assert summary["total_output_tokens"] == gen


def test_synthetic_acceptance_reaches_the_engine_through_vllms_knob_path() -> None:
    """Target AL 2.0 at K=3: vLLM's min-variance rates (1, 0, 0) accept exactly one draft per drafted step."""
    from alflow.config import SyntheticAcceptance
    from alflow.evals.run import probe_synthetic

    tiny_engine_module()
    config = server_config(
        framework="tiny",
        model="gemma-3-270m",
        host="127.0.0.1",
        speculative=SpeculativeConfig(method="ngram", k=K),
        synthetic=SyntheticAcceptance(target_al=2.0),
        readiness_timeout_s=120,
        extra_args=("--threads", "1"),
    )
    launch = build_launch(config)
    assert '"synthetic_acceptance_length":2' in launch.command_line()
    with running_server(ProcessRunner(), launch) as handle:
        before = asyncio.run(_scrape(handle.base_url))
        for seed in (1, 2):
            body = {
                "prompt": CODE_PROMPT,
                "max_tokens": 24,
                "temperature": 0.8,
                "seed": seed,
                "ignore_eos": True,
            }
            _, usage, _ = asyncio.run(_stream(handle.base_url, "/v1/completions", body))
            assert usage["completion_tokens"] == 24
        after = asyncio.run(_scrape(handle.base_url))
        found = asyncio.run(probe_synthetic(handle.base_url))
    stats = get_dialect("vllm").spec_stats(SnapshotWindow(before, after), k=K)
    assert stats.num_drafts > 0
    assert stats.al == 2.0
    assert list(stats.accepted_per_position) == [stats.num_drafts, 0, 0]
    assert found is not None, "the GSM8K evaluator must see the synthetic setting"
    assert found.startswith("/version")
