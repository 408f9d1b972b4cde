"""M0 then M1 on the tiny CPU engine (real n-gram acceptance), through the Prefect test harness.

This is what ``alflow demo --engine tiny`` runs: the demo flow calibrates the tiny model, then gates
the same configuration against its own fresh reference; the AL gate and the GSM8K gate (the tiny
model's documented threshold) must both pass. Needs the ``alflow[tiny]`` extra (skipped without it,
except under ``CI=true`` where it fails).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from alflow.config import DemoParams
from alflow.gates import AlGateDetails
from alflow.reference.table import load_reference
from alflow.results.store import open_run
from alflow_flows.demo import TINY_MODEL_ID, demo
from tests.tiny_support import tiny_engine_module

pytestmark = [pytest.mark.engines, pytest.mark.tiny, pytest.mark.usefixtures("prefect_harness")]


def test_m0_then_m1_on_the_tiny_engine_pass_against_its_own_reference(tmp_path: Path) -> None:
    tiny_engine_module()
    params = DemoParams(
        engine="tiny",
        results_root=str(tmp_path / "demo"),
        ks=(1, 3),
        benchmark_k=3,
        tiny_prompts=3,
        tiny_max_tokens=32,
        tiny_gsm8k_limit=2,  # one round at the demo's concurrency 2: the threshold is 0 (every request must complete)
    )
    out = demo(params)
    table = load_reference(out.reference_path)
    assert table.kind == "measured"
    assert table.dataset == "alflow-tiny"
    entries = {e.k: e for e in table.entries}
    assert set(entries) == {1, 3}
    for k, entry in entries.items():
        assert entry.model == TINY_MODEL_ID
        assert entry.method.value == "ngram"
        assert 1.0 < entry.al <= k + 1, entry
        assert entry.num_drafts > 0
        assert entry.provenance is not None
        assert entry.provenance.framework == "tiny"
        assert entry.provenance.dataset == "alflow-tiny"
    assert out.m0.cached_points == ()
    m1 = out.gate("tiny")
    assert m1.passed, m1.message
    assert m1.outcome is not None
    gates = {v.gate: v for v in m1.outcome.verdicts}
    assert set(gates) == {"al", "gsm8k-accuracy"}, gates
    assert all(v.passed for v in gates.values())
    # M1 reproduces its own reference: same engine, same prompts, same seeds
    details = gates["al"].details
    assert isinstance(details, AlGateDetails)
    assert details.al == pytest.approx(entries[3].al, rel=1e-9)  # the table keeps 12 digits
    run = open_run(m1.outcome.run_dir)
    assert run.status == "complete"
    assert run.manifest.simulated is False
    for name in ("report.md", "report.html"):
        report = (Path(m1.outcome.run_dir) / name).read_text()
        assert "TINY CPU ENGINE" in report, name
        assert "SIMULATED" not in report, name
