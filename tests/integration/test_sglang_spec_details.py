"""SGLang's per-request ``sglext.spec_tokens_details`` over real HTTP: the sim sends them, alflow's client keeps them.

SGLang (PR #33518) answers ``return_spec_tokens_details: true`` on the OpenAI endpoints with a chunk of its own
(``"choices": []``, response-level ``sglext``) before the usage chunk, or a top-level ``sglext`` in a non-streamed
body; never ``meta_info``. An older SGLang ignores the field (the sim's ``--no-sglang-spec-details``).

Each test starts ``python -m alflow.sim serve`` on an ephemeral port with a step log: the server's own
record of every verify step is the ground truth the per-request counts must add up to.
"""

from __future__ import annotations

from pathlib import Path

import aiohttp
import orjson
import pytest

from alflow.datasets.random_tokens import random_sessions
from alflow.datasets.types import Session, Turn
from alflow.frameworks.sglang.requests import SGLANG_COUNTS, spec_tokens_details_counts
from alflow.loadgen import LoadSpec, Target, run_load
from alflow.loadgen.endpoints import Sampling
from alflow.loadgen.records import RequestRecord
from alflow.measure import measure
from alflow.metrics.readers import count_readers
from alflow.sim.process import SimProcess
from tests.integration.test_measure_sim import sim_args, steps_between

pytestmark = pytest.mark.integration

VOCAB = 20_000  # below the sim tokenizer's vocabulary
MODEL = "sim/llama-3.3-70b"
ASK = Sampling(extra_body={"return_spec_tokens_details": True})


def text_sessions(n: int, osl: int) -> list[Session]:
    return [
        Session(f"s{i}", (Turn(f"question {i}: say something long", max_tokens=osl, ignore_eos=True),))
        for i in range(n)
    ]


def sums(records: list[RequestRecord]) -> tuple[int, int]:
    verify = [r.spec_verify_ct for r in records]
    accepted = [r.spec_accepted_drafts for r in records]
    assert all(v is not None for v in verify), verify
    assert all(a is not None for a in accepted), accepted
    return sum(v for v in verify if v is not None), sum(a for a in accepted if a is not None)


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
async def test_streamed_records_carry_counts_that_add_up_to_the_servers_steps(
    endpoint: str, tmp_path: Path
) -> None:
    log = tmp_path / "steps.jsonl"
    osl = 120
    work = (
        random_sessions(16, isl=32, osl=osl, seed=3, vocab_size=VOCAB)
        if endpoint == "completions"
        else text_sessions(16, osl)
    )
    with SimProcess(sim_args("sglang", log)) as sim:
        res = await run_load(
            work,
            Target(sim.base_url, MODEL, endpoint=endpoint, sampling=ASK, counts=(SGLANG_COUNTS,)),
            LoadSpec(concurrency=6),
        )
    records = res.records
    assert len(records) == 16
    assert all(r.ok for r in records), [r.error for r in records if not r.ok][:3]
    for r in records:
        assert r.output_tokens == osl
        assert r.spec_verify_ct is not None
        assert r.spec_accepted_drafts is not None
        # each verify step emits 1 + accepted tokens (the last one cut at the limit); the first comes from prefill
        assert r.spec_verify_ct >= 1
        assert 1 + r.spec_verify_ct + r.spec_accepted_drafts >= osl
        assert 0 <= r.spec_accepted_drafts <= 3 * r.spec_verify_ct
        assert r.spec_draft_tokens == 3 * r.spec_verify_ct
        hist = r.spec_accept_hist
        assert hist is not None
        assert len(hist) == 4
        assert sum(hist) == r.spec_verify_ct
        assert sum(j * c for j, c in enumerate(hist)) == r.spec_accepted_drafts
    verify, accepted = sums(records)
    pairs, drafts = steps_between(log)
    # every step of the run belongs to one of these requests: the sums are the server's own counts
    assert (verify, accepted) == (pairs, drafts)
    al = 1 + accepted / verify
    assert al == pytest.approx(1 + drafts / pairs, abs=1e-12)
    assert al == pytest.approx(2.5, abs=0.1)


async def test_non_streamed_sglang_body_carries_sglext_at_the_top_level(tmp_path: Path) -> None:
    log = tmp_path / "steps.jsonl"
    body = {"model": MODEL, "prompt": "hello there", "max_tokens": 64, "ignore_eos": True}
    with SimProcess(sim_args("sglang", log)) as sim:
        async with aiohttp.ClientSession() as http:
            async with http.post(
                sim.base_url + "/v1/completions", json={**body, "return_spec_tokens_details": True}
            ) as resp:
                assert resp.status == 200
                data = orjson.loads(await resp.read())
            totals = steps_between(log)  # this request's steps only
            async with http.post(sim.base_url + "/v1/completions", json=body) as resp:
                assert resp.status == 200
                plain = orjson.loads(await resp.read())
    assert "sglext" not in plain  # not asked: not sent
    assert "meta_info" not in data
    assert "meta_info" not in data["choices"][0]
    assert data["usage"]["completion_tokens"] == 64
    details = data["sglext"]["spec_tokens_details"]
    assert details["spec_num_proposed_drafts"] == 3 * details["spec_verify_ct"]
    got = spec_tokens_details_counts(data)
    assert (got.steps, got.accepted_drafts) == totals
    assert got.histogram is not None
    assert sum(got.histogram) == got.steps


async def test_streamed_sglext_chunk_comes_before_usage_and_without_choices(tmp_path: Path) -> None:
    log = tmp_path / "steps.jsonl"
    with SimProcess(sim_args("sglang", log)) as sim:
        async with aiohttp.ClientSession() as http:
            body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 40,
                    "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True},
                    "return_spec_tokens_details": True}  # fmt: skip
            async with http.post(sim.base_url + "/v1/chat/completions", json=body) as resp:
                raw = await resp.read()
    events = [
        orjson.loads(line[5:])
        for line in raw.splitlines()
        if line.startswith(b"data:") and b"[DONE]" not in line
    ]
    with_ext = [i for i, e in enumerate(events) if "sglext" in e]
    with_usage = [i for i, e in enumerate(events) if e.get("usage")]
    assert len(with_ext) == 1
    assert len(with_usage) == 1
    assert with_ext[0] < with_usage[0]
    ext = events[with_ext[0]]
    assert ext["choices"] == []
    assert "usage" not in ext
    assert all("meta_info" not in e for e in events)
    assert spec_tokens_details_counts(ext).steps == steps_between(log)[0]


async def test_measure_asks_for_and_takes_the_exact_al_from_sglext(tmp_path: Path) -> None:
    log = tmp_path / "steps.jsonl"
    with SimProcess(sim_args("sglang", log)) as sim:
        m = await measure(
            random_sessions(12, isl=32, osl=80, seed=4, vocab_size=VOCAB),
            Target(sim.base_url, MODEL, endpoint="completions"),
            LoadSpec(concurrency=4, warmup=4),
            metrics_url=sim.metrics_url,
            dialect="sglang",
            k=3,
            warmup_sessions=random_sessions(4, isl=32, osl=30, seed=5, vocab_size=VOCAB),
        )
    assert m.all_ok
    assert m.stats_error is None
    stats = m.spec_stats
    assert stats is not None
    measured = m.records.filter(~m.records["warmup"])
    assert measured.height == 12
    verify = int(measured["spec_verify_ct"].sum())
    accepted = int(measured["spec_accepted_drafts"].sum())
    assert (stats.num_drafts, stats.accepted_tokens, stats.k) == (verify, accepted, 3)
    assert stats.al == pytest.approx(1 + accepted / verify, abs=1e-12)
    assert stats.source == "per-request"
    assert "sglext.spec_tokens_details of 12 requests" in stats.note
    assert "counters: AL" in stats.note  # the cross-check
    assert stats.histogram is not None  # SGLang's per-position histogram feeds the shape audit
    assert sum(stats.histogram.values()) == verify
    # warm-up ends before the baseline scrape and the measured requests before the final one
    assert m.baseline is not None
    assert m.final is not None
    assert (verify, accepted) == steps_between(log, m.baseline.mono_ns, m.final.mono_ns)


async def test_vllm_dialect_records_have_null_counts(tmp_path: Path) -> None:
    log = tmp_path / "steps.jsonl"
    with SimProcess(sim_args("vllm", log)) as sim:
        res = await run_load(
            random_sessions(6, isl=16, osl=40, seed=6, vocab_size=VOCAB),
            Target(
                sim.base_url,
                MODEL,
                endpoint="completions",
                sampling=Sampling(max_tokens=40),
                counts=count_readers(None),
            ),  # every known reader: the server sends none of their objects
            LoadSpec(concurrency=3),
        )
        async with aiohttp.ClientSession() as http:
            body = {"model": MODEL, "prompt": "hello", "max_tokens": 8}
            async with http.post(sim.base_url + "/v1/completions", json=body) as resp:
                data = orjson.loads(await resp.read())
    assert all(r.ok for r in res.records), [r.error for r in res.records if not r.ok][:3]
    assert [(r.spec_verify_ct, r.spec_accepted_drafts) for r in res.records] == [(None, None)] * 6
    assert "sglext" not in data
    assert spec_tokens_details_counts(data).steps is None


async def test_a_server_that_ignores_the_field_leaves_the_counters_with_a_note(tmp_path: Path) -> None:
    log = tmp_path / "steps.jsonl"
    with SimProcess(sim_args("sglang", log, "--no-sglang-spec-details")) as sim:
        m = await measure(
            random_sessions(8, isl=32, osl=60, seed=7, vocab_size=VOCAB),
            Target(sim.base_url, MODEL, endpoint="completions"),
            LoadSpec(concurrency=4),
            metrics_url=sim.metrics_url,
            dialect="sglang",
            k=3,
        )
    assert m.all_ok
    assert m.records["spec_verify_ct"].null_count() == 8
    stats = m.spec_stats
    assert stats is not None
    assert stats.source != "per-request"
    assert "none of the 8 measured requests carried sglext.spec_tokens_details" in stats.note
    assert "return_spec_tokens_details: true" in stats.note
    assert "AL from the counters" in stats.note
