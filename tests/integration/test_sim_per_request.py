"""vLLM's per-request acceptance from the sim over real HTTP: the exact AL source and the M2 shape test.

The sim in vLLM's dialect, started with ``--per-request-spec-decode-metrics``, sends vLLM 0.32.0's
``metrics.speculative_decoding`` object; the client records each request's histogram, the window's statistics
come from their sums and pooled histogram, and the counters agree exactly.
"""

from __future__ import annotations

import aiohttp
import pytest

from alflow.acceptance.synthetic import distribution
from alflow.datasets.random_tokens import random_sessions
from alflow.datasets.types import Session, Turn
from alflow.frameworks.vllm.requests import VLLM_COUNTS
from alflow.gates import AUDIT_MIN_FIT_P, audit_synthetic
from alflow.loadgen import LoadSpec, Target, fill_spec_counts
from alflow.loadgen.records import RequestRecord
from alflow.measure import Measurement, measure
from alflow.metrics.prometheus import SnapshotWindow
from alflow.metrics.readers import get_dialect
from alflow.sim.process import SimProcess

pytestmark = pytest.mark.integration

VOCAB = 20_000
K = 3
TARGET = 2.3


def _args(*extra: str, level: str = "summary") -> list[str]:
    return ["--dialect", "vllm", "--k", str(K), "--synthetic-al", str(TARGET), "--time-scale", "0",
            "--per-request-spec-decode-metrics", level, *extra]  # fmt: skip


def _sessions(n: int, osl: int, seed: int, *, chat: bool) -> list[Session]:
    if not chat:
        return random_sessions(n, isl=32, osl=osl, seed=seed, vocab_size=VOCAB)
    # the chat endpoint takes text: one message per session, with a fixed output length
    return [
        Session(f"chat-{seed}-{i}", (Turn(f"question {seed} {i}: say something long", osl, osl, True),))
        for i in range(n)
    ]


async def _measure(sim: SimProcess, n: int = 48, endpoint: str = "completions") -> Measurement:
    chat = endpoint == "chat"
    m = await measure(
        _sessions(n, 120, 3, chat=chat),
        Target(sim.base_url, "sim/llama-3.3-70b", endpoint=endpoint),
        LoadSpec(concurrency=8, warmup=8),
        metrics_url=sim.metrics_url,
        dialect="vllm",
        k=K,
        warmup_sessions=_sessions(8, 40, 4, chat=chat),
    )
    assert m.aborted is None
    assert m.records.height == n + 8
    return m


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
async def test_per_request_counts_are_the_exact_source_and_the_counters_agree(endpoint: str) -> None:
    with SimProcess(_args()) as sim:
        m = await _measure(sim, endpoint=endpoint)
    assert m.client.all_ok
    # every request, warm-up included, carried a consistent object (the client keeps none that is not)
    assert m.records["spec_accept_hist"].null_count() == 0
    assert all(len(h) == K + 1 for h in m.records["spec_accept_hist"].to_list())
    measured = m.records.filter(~m.records["warmup"])
    assert measured.height == 48
    stats = m.spec_stats
    assert stats is not None
    assert stats.source == "per-request"
    assert stats.note.startswith("exact, from the metrics.speculative_decoding of 48 requests")
    assert m.baseline is not None
    assert m.final is not None
    counters = get_dialect("vllm").spec_stats(SnapshotWindow(m.baseline, m.final), k=K)
    # the window holds exactly the measured requests: the per-request sums are the counters, to the step
    assert (stats.num_drafts, stats.accepted_tokens) == (counters.num_drafts, counters.accepted_tokens)
    assert stats.draft_tokens == counters.draft_tokens == K * stats.num_drafts
    assert stats.al == counters.al
    assert "per-request minus counters: +0.0000" in stats.note
    # the statistics' histogram is the pooled one (accept length j + 1 -> steps), and the counters' too
    pooled = [sum(col) for col in zip(*measured["spec_accept_hist"].to_list(), strict=True)]
    assert stats.histogram == {j + 1: c for j, c in enumerate(pooled)}
    assert stats.histogram == counters.histogram
    assert sum(pooled) == measured["spec_verify_ct"].sum()
    assert set(stats.histogram or {}) == {1, 2, 3, 4}
    assert {j for j, c in (stats.histogram or {}).items() if c} == {
        2,
        3,
    }  # min-variance at 2.3: 1 or 2 drafts


async def test_the_shape_test_rejects_a_wrong_scheme_and_accepts_the_right_one() -> None:
    """A min-variance target served with SGLang's multinomial draw: the right mean, the wrong shape."""
    expected = distribution("vllm", K, al=TARGET)
    with SimProcess(_args("--synthetic-scheme", "sglang-multinomial")) as wrong:
        bad = await _measure(wrong)
    with SimProcess(_args()) as right:
        good = await _measure(right)
    assert bad.spec_stats is not None
    assert good.spec_stats is not None
    assert (bad.spec_stats.source, good.spec_stats.source) == ("per-request", "per-request")
    rejected = audit_synthetic(bad.spec_stats, expected, subject="wrong scheme")
    assert not rejected.passed
    assert "does not fit scheme vllm" in rejected.message
    assert rejected.details is not None
    assert rejected.details.fit_p_value is not None
    assert rejected.details.fit_p_value < AUDIT_MIN_FIT_P
    accepted = audit_synthetic(good.spec_stats, expected, subject="right scheme")
    assert accepted.passed, accepted.message


async def test_steps_with_fewer_than_k_drafts_pass_on_the_full_k_steps_and_a_wrong_scheme_still_fails() -> (
    None
):
    """5 % of the steps propose 1..K-1 drafts (``--short-draft-share``); vLLM's ``detailed`` per-step arrays say
    which: the shape test takes the full-K steps (and says how many it left out), so a right run passes and a wrong
    scheme is still caught."""
    expected = distribution("vllm", K, al=TARGET)
    short = ("--short-draft-share", "0.05")
    with SimProcess(_args(*short, level="detailed")) as right:
        good = await _measure(right)
    with SimProcess(_args(*short, "--synthetic-scheme", "sglang-multinomial", level="detailed")) as wrong:
        bad = await _measure(wrong)
    stats = good.spec_stats
    assert stats is not None
    assert stats.source == "per-request"
    assert stats.draft_tokens is not None
    assert stats.draft_tokens < K * stats.num_drafts  # the short steps, as the counts say
    full = stats.full_k_histogram
    assert full is not None
    assert 0 < sum((stats.histogram or {}).values()) - sum(full.values()) < 0.1 * stats.num_drafts
    passed = audit_synthetic(stats, expected, subject="short drafts")
    assert passed.passed, passed.message
    assert "steps that carried all K drafts" in passed.message
    assert bad.spec_stats is not None
    failed = audit_synthetic(bad.spec_stats, expected, subject="wrong scheme, short drafts")
    assert not failed.passed
    assert "does not fit scheme vllm" in failed.message


async def test_non_streamed_and_detailed_responses_carry_vllms_object() -> None:
    with SimProcess(_args(level="detailed")) as sim:
        async with aiohttp.ClientSession() as http:
            body = {
                "model": "sim/llama-3.3-70b",
                "prompt": [5, 6, 7, 8],
                "max_tokens": 40,
                "ignore_eos": True,
            }
            async with http.post(sim.base_url + "/v1/completions", json=body) as r:
                assert r.status == 200
                data = await r.json()
    spec = data["metrics"]["speculative_decoding"]
    assert set(spec) == {
        "mean_acceptance_length", "draft_acceptance_rate", "acceptance_histogram", "num_spec_steps",
        "num_accepted_draft_tokens", "num_draft_tokens", "num_spec_tokens", "per_step_accepted", "per_step_drafted",
    }  # fmt: skip
    assert spec["num_spec_tokens"] == K
    assert sum(spec["acceptance_histogram"]) == spec["num_spec_steps"] == len(spec["per_step_accepted"])
    assert spec["num_accepted_draft_tokens"] == sum(spec["per_step_accepted"])
    assert spec["per_step_drafted"] == [K] * spec["num_spec_steps"]
    assert spec["mean_acceptance_length"] == pytest.approx(
        1 + spec["num_accepted_draft_tokens"] / spec["num_spec_steps"]
    )
    record = RequestRecord(request_id=0, session_id="s")
    fill_spec_counts(record, data, [VLLM_COUNTS])  # the non-streamed body through vLLM's reader
    assert (record.spec_verify_ct, record.spec_accepted_drafts) == (
        spec["num_spec_steps"],
        spec["num_accepted_draft_tokens"],
    )
    assert record.spec_accept_hist == spec["acceptance_histogram"]


async def test_summary_bodies_have_vllms_nulls_and_streams_need_include_usage() -> None:
    body = {"model": "sim/llama-3.3-70b", "prompt": [5, 6, 7, 8], "max_tokens": 20, "ignore_eos": True}
    with SimProcess(_args()) as sim:
        async with aiohttp.ClientSession() as http:
            async with http.post(sim.base_url + "/v1/completions", json=body) as r:
                data = await r.json()
            async with http.post(sim.base_url + "/v1/completions", json={**body, "stream": True}) as r:
                streamed = await r.read()
            with_usage = {**body, "stream": True, "stream_options": {"include_usage": True}}
            async with http.post(sim.base_url + "/v1/completions", json=with_usage) as r:
                usage_stream = await r.read()
    metrics = data["metrics"]
    assert [key for key, value in metrics.items() if value is None] == [
        "time_to_first_token_ms", "generation_time_ms", "queue_time_ms", "mean_itl_ms", "tokens_per_second",
    ]  # fmt: skip
    assert (
        metrics["speculative_decoding"]["per_step_accepted"],
        metrics["speculative_decoding"]["per_step_drafted"],
    ) == (None, None)
    assert b"speculative_decoding" not in streamed  # no usage chunk, nothing to ride on (vLLM alike)
    events = [line for line in usage_stream.split(b"\n\n") if b"speculative_decoding" in line]
    assert len(events) == 1
    assert b'"choices":[]' in events[0]
    assert b"per_step_accepted" not in events[0]  # summary, dumped without nulls
