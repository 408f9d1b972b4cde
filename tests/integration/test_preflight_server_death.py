"""A server that dies during the pre-flight burst: the verdict names the likely causes, not a bare scrape error.

A real vLLM on CPU with its synthetic-acceptance plugin left out dies on the first synthetic request; the
final scrape of the burst then finds nobody listening. The sim's ``--crash-after-requests`` plays that
over real HTTP: the burst's requests are kept, the window is reported without an end, and the verdict
is the pre-flight's own message with the recipe's hints.
"""

from __future__ import annotations

import asyncio

import pytest

from alflow.acceptance.synthetic import distribution
from alflow.datasets.random_tokens import random_sessions
from alflow.loadgen import LoadSpec, Target
from alflow.measure import measure
from alflow.preflight import Expectation, run_preflight
from alflow.sim.process import SimProcess

pytestmark = pytest.mark.integration

K = 3
HINTS = ("the synthetic plugin is not loaded",)
ARGS = ["--dialect", "vllm", "--k", str(K), "--synthetic-al", "2.0"]


def test_a_server_dying_mid_burst_fails_the_preflight_naming_the_causes() -> None:
    with SimProcess([*ARGS, "--time-scale", "0.2", "--crash-after-requests", "2"]) as sim:
        expect = Expectation(K, distribution("vllm", K, al=2.0), HINTS)
        result = asyncio.run(
            run_preflight(
                sim.base_url,
                "sim/llama-3.3-70b",
                (sim.metrics_url,),
                "vllm",
                expect,
                subject="vllm K=3",
                timeout_s=10,
            )
        )
    assert not result.passed
    assert result.message.startswith("pre-flight FAILED for vllm K=3: no speculative steps observed (")
    assert "the final metrics scrape failed" in result.message
    assert "requests failed, the first with:" in result.message
    assert result.message.endswith("Likely causes: the synthetic plugin is not loaded")
    assert result.requests == 16  # every request of the burst is recorded, the failed ones with their error


def test_measure_keeps_the_requests_when_the_final_scrape_fails() -> None:
    with SimProcess([*ARGS, "--time-scale", "0.2", "--crash-after-requests", "6"]) as sim:
        m = asyncio.run(
            measure(
                random_sessions(7, isl=16, osl=64, seed=1, vocab_size=1000),
                Target(sim.base_url, "sim/llama-3.3-70b", "completions"),
                LoadSpec(concurrency=1, warmup=0),
                metrics_url=sim.metrics_url,
                dialect="vllm",
                k=K,
            )
        )
    assert m.aborted is None
    assert m.records.height == 7
    assert m.records["error"].null_count() == 6  # six answered before the process exited, the seventh failed
    assert m.baseline is not None
    assert m.final is None
    assert m.spec_stats is None
    assert m.stats_error is not None
    assert m.stats_error.startswith(
        "the final metrics scrape failed, so the window has no end: cannot scrape"
    )
