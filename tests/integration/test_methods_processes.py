"""M0's procedure (alflow.methods.m0) writing the reference table and its provenance; these tests start processes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from alflow.config import ModelSpec, ServerConfig, ThinkingMode
from alflow.methods.m0 import (
    MeasuredPoint,
    PartialPointError,
    check_reference_target,
    measure_calibration_point,
    run_m0,
)
from alflow.reference.table import load_reference
from alflow.results.store import RunWriter
from tests.unit.test_methods import FakeSteps, _calibrate_params, _measurement

pytestmark = pytest.mark.integration


def _measurer(steps: FakeSteps, cached_ks: tuple[int, ...] = ()) -> Any:
    def measure(server: ServerConfig, model: ModelSpec, modes: tuple[ThinkingMode, ...]) -> MeasuredPoint:
        assert server.speculative is not None
        params = _calibrate_params(Path("/unused"))
        point = measure_calibration_point(
            steps.as_steps(),
            server,
            params.placement,
            model,
            modes,
            params.workload,
            params.load,
            check_first=False,
        )
        return MeasuredPoint(point, cached=server.speculative.k in cached_ks)

    return measure


def test_m0_writes_one_entry_per_k_into_the_reference_table(tmp_path: Path) -> None:
    params = _calibrate_params(tmp_path)
    target = check_reference_target(params)
    writer = RunWriter(str(tmp_path / "results"), "m0", run_id="c1", config={}, simulated=True)
    steps = FakeSteps(loads=[_measurement(4, k=2), _measurement(4, k=3)])
    with writer:
        outcome = run_m0(
            params, target, writer, steps.as_steps(), _measurer(steps, cached_ks=(2,)), flow_run_id="f1"
        )
    assert [(e.k, e.al) for e in outcome.entries] == [(2, 2.5), (3, 2.5)]
    assert outcome.cached_points == ("test-llama K=2",)
    table = load_reference(tmp_path / "ref.yaml")
    assert table.kind == "simulated"
    assert sorted(e.k for e in table.entries) == [2, 3]
    assert {e.provenance.flow_run_id for e in table.entries if e.provenance is not None} == {"f1"}
    assert "reference 2" in steps.calls  # its entries checked against the table before the merge


def test_m0_that_fails_part_way_stores_its_points_in_the_run_and_leaves_the_table(tmp_path: Path) -> None:
    params = _calibrate_params(tmp_path)
    target = check_reference_target(params)
    writer = RunWriter(str(tmp_path / "results"), "m0", run_id="c2", config={}, simulated=True)
    steps = FakeSteps(loads=[_measurement(4, k=2), _measurement(2, aborted="the server stopped answering")])
    with pytest.raises(PartialPointError), writer:
        run_m0(params, target, writer, steps.as_steps(), _measurer(steps), flow_run_id="f2")
    assert not (tmp_path / "ref.yaml").exists()  # a failed calibration never changes the table
    (summary,) = steps.stored
    assert summary["reference_updated"] is False
    assert summary["tables"]["requests"].height == 2
    assert len(summary["entries"]) == 1  # K = 2 was measured: kept in the run
