"""SGLang's per-request ``meta_info`` counts over real HTTP: the sim sends them, alflow's client keeps them.

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
from alflow.loadgen import LoadSpec, Target, meta_info_counts, run_load
from alflow.loadgen.endpoints import Sampling
from alflow.loadgen.records import RequestRecord
from alflow.measure import measure
from alflow.sim.process import SimProcess

VOCAB = 20_000  # below the sim tokenizer's vocabulary
MODEL = "sim/llama-3.3-70b"


def sim_args(dialect: str, step_log: Path) -> list[str]:
    return ["--dialect", dialect, "--k", "3", "--synthetic-al", "2.5", "--time-scale", "0",
            "--step-log", str(step_log)]  # fmt: skip


def step_totals(step_log: Path, start_ns: int = 0, end_ns: int = 2**63) -> tuple[int, int]:
    """(request-step pairs, accepted drafts) of the sim's step log inside [start_ns, end_ns]."""
    pairs = accepted = 0
    for line in step_log.read_bytes().splitlines():
        row = orjson.loads(line)
        if start_ns <= row["time_ns"] <= end_ns:
            pairs += len(row["requests"])
            accepted += sum(row["accepted"])
    return pairs, accepted


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
        res = await run_load(work, Target(sim.base_url, MODEL, endpoint=endpoint), LoadSpec(concurrency=6))
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
    verify, accepted = sums(records)
    pairs, drafts = step_totals(log)
    # every step of the run belongs to one of these requests: the sums are the server's own counts
    assert (verify, accepted) == (pairs, drafts)
    al = 1 + accepted / verify
    assert al == pytest.approx(1 + drafts / pairs, abs=1e-12)
    assert al == pytest.approx(2.5, abs=0.1)


async def test_non_streamed_sglang_body_carries_meta_info(tmp_path: Path) -> None:
    log = tmp_path / "steps.jsonl"
    with SimProcess(sim_args("sglang", log)) as sim:
        async with aiohttp.ClientSession() as http:
            body = {"model": MODEL, "prompt": "hello there", "max_tokens": 64, "ignore_eos": True}
            async with http.post(sim.base_url + "/v1/completions", json=body) as resp:
                assert resp.status == 200
                data = orjson.loads(await resp.read())
    assert data["usage"]["completion_tokens"] == 64
    assert data["meta_info"]["spec_num_proposed_drafts"] == 3 * data["meta_info"]["spec_verify_ct"]
    counts = meta_info_counts(data)
    assert counts == step_totals(log)


async def test_measure_takes_the_exact_al_from_meta_info(tmp_path: Path) -> None:
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
    assert "meta_info of 12 requests" in stats.note
    assert "counters:" in stats.note
    # warm-up ends before the baseline scrape and the measured requests before the final one
    assert m.baseline is not None
    assert m.final is not None
    assert (verify, accepted) == step_totals(log, m.baseline.mono_ns, m.final.mono_ns)


async def test_vllm_dialect_records_have_null_counts(tmp_path: Path) -> None:
    log = tmp_path / "steps.jsonl"
    with SimProcess(sim_args("vllm", log)) as sim:
        res = await run_load(
            random_sessions(6, isl=16, osl=40, seed=6, vocab_size=VOCAB),
            Target(sim.base_url, MODEL, endpoint="completions", sampling=Sampling(max_tokens=40)),
            LoadSpec(concurrency=3),
        )
        async with aiohttp.ClientSession() as http:
            body = {"model": MODEL, "prompt": "hello", "max_tokens": 8}
            async with http.post(sim.base_url + "/v1/completions", json=body) as resp:
                data = orjson.loads(await resp.read())
    assert all(r.ok for r in res.records), [r.error for r in res.records if not r.ok][:3]
    assert [(r.spec_verify_ct, r.spec_accepted_drafts) for r in res.records] == [(None, None)] * 6
    assert "meta_info" not in data
    assert meta_info_counts(data) == (None, None)
