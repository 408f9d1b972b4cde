"""Regression verdicts end to end: M2 on the sim, nightly image tags of one series, one of them slower.

Two runs of ``alflow-sim:nightly-1`` make the history; a control run of the same timing must come out
``unchanged``; ``alflow-sim:nightly-2`` (the same repository, so the same series) runs the simulated engine
50% slower (``--time-scale``) and must come out ``regressed`` at every point, with one
``alflow.regression.detected`` event per point and the verdicts in its report.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from alflow.config import (
    BenchmarkParams,
    ModelSpec,
    RandomWorkload,
    RegressionSettings,
    ServerPlacement,
    server_config,
)
from alflow.results.catalog import Catalog
from alflow.results.series import SeriesKey
from alflow.results.store import open_run
from alflow_flows.benchmark import benchmark

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timing,
    pytest.mark.alone,
    pytest.mark.usefixtures("prefect_harness"),
]

MODEL = ModelSpec(id="test-llama")
CONCURRENCIES = (2, 4)
BASE_SCALE = "0.25"
SLOW_SCALE = "0.375"  # every engine step 50% longer: TPOT up ~50%, tokens/s per request down ~33%


def _params(root: Path, tag: str, scale: str) -> BenchmarkParams:
    return BenchmarkParams(
        model=MODEL,
        k=3,
        target_al=2.5,
        server=server_config(
            framework="sim",
            model=MODEL.id,
            image=f"alflow-sim:{tag}",
            extra_args=("--seed", "3"),  # the speed by the environment: the arguments are part of the series
            extra_env={"ALFLOW_SIM_TIME_SCALE": scale},
        ),
        placement=ServerPlacement(results_root=str(root)),
        workload=RandomWorkload(isl=32, osl=48),
        concurrencies=CONCURRENCIES,
        prompts_per_concurrency=8,
        warmup_per_concurrency=1,
        preflight=False,
        client_processes=2,  # the load in its own processes: the flow's threads do not lag its event loop
        # machine noise on a shared CI host stays well under 10%; the slow tag is 50% slower
        regression=RegressionSettings(history_runs=7, min_history=2, threshold=0.10, resamples=500),
    )


def _verdicts(run_dir: str) -> dict[int, dict[str, Any]]:
    data = json.loads((Path(run_dir) / "regression.json").read_text())
    return {p["concurrency"]: p for p in data["points"]}


CLIENT_BOUND = "the load generator was the bottleneck"
"""Why the flow leaves a point out of every comparison (its client lagged): the tool's own refusal, not a verdict."""


def _compared(root: Path, tag: str, scale: str, events: list[Any]) -> tuple[Any, dict[int, dict[str, Any]]]:
    """One M2 run whose every point was measured with a client that kept up (at most three tries).

    On a shared 2-core CI host the client's event loop can lag past 10 ms at one point; the flow then says so and
    compares nothing there (as it must). Such a run is measured again, and the events of a run that is measured
    again are dropped, so each kept run's events are its own.
    """
    for _ in range(3):
        events.clear()
        out = benchmark(params=_params(root, tag, scale))
        verdicts = _verdicts(out.run_dir)
        left_out = [v for v in verdicts.values() if v["outcome"] == "not compared"]
        if not left_out:
            return out, verdicts
        assert all(CLIENT_BOUND in v["message"] for v in left_out), (
            left_out
        )  # only a lagging client may excuse it
    pytest.fail("three runs in a row had a client-bound point")


def test_a_slower_nightly_tag_regresses_and_a_control_run_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import alflow_tasks.regression

    events: list[tuple[str, dict[str, str], dict[str, Any]]] = []
    monkeypatch.setattr(
        alflow_tasks.regression,
        "emit_event",
        lambda *, event, resource, payload: events.append((event, resource, payload)),
    )
    root = tmp_path / "results"
    _, first_verdicts = _compared(root, "nightly-1", BASE_SCALE, events)
    assert {v["outcome"] for v in first_verdicts.values()} == {"not enough history"}
    history = list(events)
    _compared(root, "nightly-1", BASE_SCALE, events)
    history += events
    _, verdicts = _compared(root, "nightly-1", BASE_SCALE, events)  # the control
    assert sorted(verdicts) == list(CONCURRENCIES)
    for conc, v in verdicts.items():
        assert v["outcome"] == "unchanged", (conc, v["message"])
        assert len(v["history"]) >= 2  # two, or more where a run was measured again
    assert not history
    assert not events
    slow, verdicts = _compared(root, "nightly-2", SLOW_SCALE, events)
    for conc, v in verdicts.items():
        assert v["outcome"] == "regressed", (conc, v["message"])
        assert v["series"]["image"] == "alflow-sim"  # the new tag continues the series
        assert len(v["history"]) >= 3  # the two baseline runs and the control
        tpot = next(m for m in v["metrics"] if m["metric"] == "tpot_ms")
        assert tpot["low"] > 0.10
        assert 0.2 < tpot["change"] < 0.8  # about +50%
        rate = next(m for m in v["metrics"] if m["metric"] == "tokens_per_s_per_request")
        assert rate["high"] < 0
    assert [e[0] for e in events] == ["alflow.regression.detected"] * len(CONCURRENCIES)
    resource = events[0][1]
    assert resource["prefect.resource.id"].startswith("prefect.flow-run.")
    assert (resource["alflow.image"], resource["alflow.k"], resource["alflow.model"]) == (
        "alflow-sim",
        "3",
        MODEL.id,
    )
    assert {e[1]["alflow.concurrency"] for e in events} == {str(c) for c in CONCURRENCIES}

    report = (Path(slow.run_dir) / "report.md").read_text()
    assert "Regression against recent runs" in report
    assert "REGRESSED" in report
    assert "regression.json" in open_run(slow.run_dir).manifest.files
    catalog = Catalog(str(root))
    entry = catalog.get("m2/" + Path(slow.run_dir).name)
    assert entry is not None
    assert entry.verdict == "regressed"
    [key] = [k for k, _ in entry.series() if k.concurrency == CONCURRENCIES[0]]
    assert key == SeriesKey(
        "sim", "alflow-sim", MODEL.id, 3, CONCURRENCIES[0], "off", "2.5000", key.scheme, key.workload
    )
    assert key.scheme  # the scheme the audit tested, part of the line
    assert key.workload.startswith(
        "random isl 32 osl 48 "
    )  # the prompts' shape, the method, the setup's digest
    assert entry.verdict_of(key) == "regressed"
