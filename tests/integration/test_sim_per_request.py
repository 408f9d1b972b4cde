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
from alflow.gates import audit_synthetic
from alflow.loadgen import LoadSpec, Target
from alflow.measure import Measurement, measure
from alflow.metrics.dialects import get_dialect
from alflow.metrics.prometheus import SnapshotWindow
from alflow.sim.process import SimProcess

pytestmark = pytest.mark.integration

VOCAB = 20_000
K = 3
TARGET = 2.3


def _args(*extra: str, level: str = "summary") -> list[str]:
    return ["--dialect", "vllm", "--k", str(K), "--synthetic-al", str(TARGET), "--time-scale", "0",
            "--per-request-spec-decode-metrics", level, *extra]  # fmt: skip


async def _measure(sim: SimProcess, n: int = 48) -> Measurement:
    return await measure(
        random_sessions(n, isl=32, osl=120, seed=3, vocab_size=VOCAB),
        Target(sim.base_url, "sim/llama-3.3-70b", endpoint="completions"),
        LoadSpec(concurrency=8, warmup=8),
        metrics_url=sim.metrics_url,
        dialect="vllm",
        k=K,
        warmup_sessions=random_sessions(8, isl=32, osl=40, seed=4, vocab_size=VOCAB),
    )


async def test_per_request_counts_are_the_exact_source_and_the_counters_agree() -> None:
    with SimProcess(_args()) as sim:
        m = await _measure(sim)
    assert m.client.all_ok
    measured = m.records.filter(~m.records["warmup"])
    assert measured["spec_accept_hist"].null_count() == 0
    assert all(len(h) == K + 1 for h in measured["spec_accept_hist"].to_list())
    stats = m.spec_stats
    assert stats is not None
    assert stats.note.startswith("exact, from the metrics.speculative_decoding of 48 requests")
    assert m.baseline is not None
    assert m.final is not None
    counters = get_dialect("vllm").spec_stats(SnapshotWindow(m.baseline, m.final), k=K)
    assert (stats.num_drafts, stats.accepted_tokens) == (counters.num_drafts, counters.accepted_tokens)
    assert stats.histogram == counters.histogram
    assert "per-request minus counters: +0.0000" in stats.note
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
    rejected = audit_synthetic(bad.spec_stats, expected, subject="wrong scheme")
    assert not rejected.passed
    assert "does not fit scheme vllm" in rejected.message
    accepted = audit_synthetic(good.spec_stats, expected, subject="right scheme")
    assert accepted.passed, accepted.message


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
