"""The flows' typed outcomes (alflow.methods.outcomes) and the JSON the command line prints from them."""

from __future__ import annotations

import json

import pytest

from alflow.gates import AlGateDetails, Verdict
from alflow.methods.outcomes import (
    DemoBenchmark,
    DemoGate,
    DemoOutcome,
    KOutcome,
    M0Outcome,
    M1Outcome,
    M2Outcome,
    SweepOutcome,
)
from alflow.methods.points import BestK
from alflow.util.rows import dump_row
from tests.unit.test_points import _m2

pytestmark = pytest.mark.unit


def test_m2_outcome_prints_its_points_as_stored_rows() -> None:
    points = (_m2(3, 4, 100.0, 90.0), _m2(3, 16, 300.0, 40.0, valid=False))
    out = M2Outcome("results/m2/x", 2.0, "vllm", 1, 1, points, ("sim K=3 concurrency 16: audit FAILED",))
    data = json.loads(json.dumps(dump_row(out)))
    assert [p["concurrency"] for p in data["points"]] == [4, 16]
    assert data["points"][1]["valid"] is False
    assert data["points"] == [p.model_dump() for p in points]
    assert (data["target_al"], data["scheme"], data["failures"]) == (2.0, "vllm", list(out.failures))


def test_m1_outcome_flattens_each_verdicts_details() -> None:
    verdict = Verdict(
        gate="al",
        passed=True,
        message="AL gate passed",
        details=AlGateDetails(threshold=2.4, reference_al=2.5, rule="rule", al=2.6, compared=2.6),
    )
    data = dump_row(M1Outcome("results/m1/x", True, (verdict,)))
    assert data["verdicts"] == [
        {
            "gate": "al",
            "passed": True,
            "message": "AL gate passed",
            "threshold": 2.4,
            "reference_al": 2.5,
            "rule": "rule",
            "al": 2.6,
            "ci": None,
            "compared": 2.6,
        }
    ]


def test_sweep_outcome_names_failed_ks_and_keeps_messages_only_where_there_are_some() -> None:
    best = BestK(4, 3, 150.0, 1, 90.0)
    out = SweepOutcome(
        per_k={
            1: KOutcome("passed", benchmark="passed"),
            3: KOutcome("failed", "AL gate FAILED", "passed"),
            5: KOutcome("failed", "AL gate FAILED"),
        },
        best_k=(best,),
    )
    assert [k for k, o in out.per_k.items() if o.failed] == [3, 5]
    data = dump_row(out)
    assert data["per_k"] == {
        "1": {"gate": "passed", "benchmark": "passed"},
        "3": {"gate": "failed", "gate_message": "AL gate FAILED", "benchmark": "passed"},
        "5": {"gate": "failed", "gate_message": "AL gate FAILED"},
    }
    assert data["best_k"] == {"4": dump_row(best)}
    assert "points" not in data
    assert "run_dir" not in data


def test_demo_outcome_flattens_gates_and_names_the_reference_target() -> None:
    m1 = M1Outcome("results/m1/g", True, ())
    gates = (DemoGate("good", True, "ok", m1), DemoGate("bad", False, "AL gate FAILED"))
    runs = (
        DemoBenchmark(None, failed="server lost"),
        DemoBenchmark(2.5, M2Outcome("results/m2/x", 2.5, "vllm", 1, 1, ())),
    )
    demo = DemoOutcome(
        "sim", "results", "ref.parquet", M0Outcome("results/m0/x", "ref.parquet", ()), gates, runs
    )
    data = json.loads(json.dumps(dump_row(demo)))
    assert data["m1"] == [
        {"name": "good", "passed": True, "message": "ok", "run_dir": "results/m1/g", "verdicts": []},
        {"name": "bad", "passed": False, "message": "AL gate FAILED"},
    ]
    assert data["m2"][0] == {"target": "reference", "failed": "server lost"}
    assert data["m2"][1]["target"] == 2.5
    assert data["m2"][1]["outcome"]["run_dir"] == "results/m2/x"
    assert "failed" not in data["m2"][1]
    assert data["m0"] == {
        "run_dir": "results/m0/x",
        "reference_path": "ref.parquet",
        "entries": [],
        "cached_points": [],
    }
    assert (data["label"], data["engine"]) == (None, "sim")
