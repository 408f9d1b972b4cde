"""``alflow demo`` on the simulated engine, as shipped: its three stages, their verdicts, and an M2 audit that checks.

The demo flow runs with its default parameters (what the command runs, the results root aside, and M0
measured rather than taken from a cache) through the Prefect test harness. Its M2 runs in real time on the
H200 profile, which sets the demo's length (issue 46: under a minute on a fresh clone), so it measures few
prompts per point; this test keeps that small M2 honest: every point is audited over enough steps that the
allowed deviation stays a few hundredths of an AL, and the measured windows stay short.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from alflow.config import DemoParams
from alflow.reference.table import load_reference
from alflow_flows.demo import demo

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("prefect_harness")]


def _m1_summaries(root: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted((root / "m1").glob("*/summary.json"))]


def _verdicts(summary: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["gate"]: v for v in summary["verdicts"]}


def test_the_sim_demo_passes_the_healthy_framework_fails_the_degraded_one_and_audits_every_m2_point(
    tmp_path: Path,
) -> None:
    root = tmp_path / "demo"
    params = DemoParams(results_root=str(root), refresh_cache=True)
    out = demo(params)

    # M0: a simulated reference for K = 1..3, measured now
    table = load_reference(out.reference_path)
    assert table.kind == "simulated"
    als = {e.k: e.al for e in table.entries}
    assert sorted(als) == [1, 2, 3]
    assert 1.0 < als[1] < als[2] < als[3] <= 4.0
    assert out.m0.cached_points == ()

    # M1: the healthy framework passes both gates; the degraded one fails the AL gate by far, not by noise
    assert [(g.name, g.passed) for g in out.m1] == [("healthy-vllm", True), ("degraded-sglang", False)]
    assert "AL gate FAILED" in out.gate("degraded-sglang").message
    summaries = _m1_summaries(root)
    assert sorted(s["passed"] for s in summaries) == [False, True]
    for summary in summaries:
        verdicts = _verdicts(summary)
        assert verdicts["gsm8k-accuracy"]["passed"], verdicts["gsm8k-accuracy"]["message"]
        al = verdicts["al"]
        assert al["passed"] is summary["passed"]
        if not summary["passed"]:
            # the degraded AL's upper confidence bound sits more than one token below the threshold
            assert al["compared"] < al["threshold"] - 1.0, al["message"]

    # M2: one point per concurrency at the reference AL, each valid under an audit that is a real check
    [run] = out.m2
    assert run.outcome is not None
    m2 = run.outcome
    assert m2.target_al == pytest.approx(als[params.benchmark_k])
    assert [p.concurrency for p in m2.points] == [4, 8, 16]
    for point in m2.points:
        assert point.valid, point.audit
        steps, allowed = point.num_drafts, point.allowed_deviation
        achieved, expected = point.achieved_al, point.expected_al
        assert steps is not None
        assert allowed is not None
        assert achieved is not None
        assert expected is not None
        # max(0.02, 3.29 x std / sqrt(steps)): at 500 steps or more a 2 % error of the AL is caught
        assert steps >= 500, point
        assert allowed <= 0.065, point
        assert abs(achieved - expected) <= allowed
        assert point.fit_p_value is not None  # the shape test ran on the point's histogram
        assert point.completed == params.prompts_per_concurrency * point.concurrency
    # real time on the H200 profile: the three measured windows take seconds each (about 4 s here)
    assert sum(p.duration_s for p in m2.points) < 30.0, [p.duration_s for p in m2.points]
