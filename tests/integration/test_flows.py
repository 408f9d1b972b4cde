"""The M0, M1 and M2 flows against the sim engine under one Prefect test harness."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from alflow.acceptance.stats import from_steps
from alflow.config import (
    BenchmarkParams,
    CalibrateParams,
    GateParams,
    Gsm8kSettings,
    LoadConfig,
    ModelSpec,
    RandomWorkload,
    SamplingParams,
    ServerPlacement,
    SpeedBenchWorkload,
    server_config,
)
from alflow.evals.run import bundled_gsm8k
from alflow.reference.table import load_reference
from alflow.results.store import open_run
from alflow_flows.benchmark import benchmark
from alflow_flows.calibrate import calibrate
from alflow_flows.gate import gate

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("prefect_harness")]

MODEL = ModelSpec(id="test-llama", sampling_thinking_off=SamplingParams(temperature=0.0, max_tokens=256))
PROMPTS = SpeedBenchWorkload(category="coding", max_tokens=256)
FAST = ("--time-scale", "0", "--seed", "5")


def _placement(tmp_path: Path) -> ServerPlacement:
    return ServerPlacement(results_root=str(tmp_path / "results"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_m0_writes_the_reference_table_and_reuses_cached_points(tmp_path: Path) -> None:
    step_log = tmp_path / "steps.jsonl"
    params = CalibrateParams(
        models=(MODEL,),
        ks=(3,),
        server=server_config(
            framework="sim", model=MODEL.id, extra_args=(*FAST, "--step-log", str(step_log))
        ),
        placement=_placement(tmp_path),
        workload=PROMPTS,
        load=LoadConfig(concurrency=4),
        reference_path=str(tmp_path / "ref.yaml"),
        preflight=False,  # the step log below is the point's alone
    )
    out = calibrate(params=params)
    table = load_reference(tmp_path / "ref.yaml")
    assert table.kind == "simulated"
    entry = table.lookup(MODEL.id, "mtp", "off", 3)
    assert entry.provenance is not None
    assert entry.provenance.dataset == "alflow-demo"
    assert entry.provenance.framework == "sim"
    # the table's AL is the sim's own count of accepted drafts over its verify steps
    steps = [json.loads(line) for line in step_log.read_text().splitlines()]
    accepted = [a for s in steps for a in s["accepted"]]
    truth = from_steps(accepted, 3)
    assert truth.al is not None
    assert entry.al == pytest.approx(truth.al, abs=1e-9)
    assert entry.ci_low is not None
    assert entry.ci_high is not None
    assert entry.ci_low <= truth.al <= entry.ci_high
    assert entry.al > 2.8  # coding prompts accept a lot with MTP
    assert out.cached_points == ()
    assert open_run(out.run_dir).status == "complete"
    assert [(e.k, e.al) for e in out.entries] == [(3, entry.al)]

    again = calibrate(params=params)
    assert again.cached_points == (f"{MODEL.id} K=3",)
    assert load_reference(tmp_path / "ref.yaml").lookup(MODEL.id, "mtp", "off", 3).al == entry.al


def _gate_params(tmp_path: Path, reference: Path, dialect: str, quality: str) -> GateParams:
    sim = (*FAST, "--answer-key", str(bundled_gsm8k("test")), "--answer-accuracy", "0.95")
    return GateParams(
        model=MODEL,
        k=3,
        server=server_config(
            framework="sim",
            model=MODEL.id,
            sim_dialect=dialect,  # type: ignore[arg-type]
            extra_args=(*sim, "--acceptance-quality", quality),
        ),
        placement=_placement(tmp_path),
        reference_path=str(reference),
        workload=PROMPTS,
        load=LoadConfig(concurrency=4),
        gsm8k=Gsm8kSettings(limit=60),
    )


def _calibrated_reference(tmp_path: Path) -> Path:
    """A reference table of MODEL at K = 3, measured by M0 on a healthy sim."""
    reference = tmp_path / "ref.yaml"
    calibrate(
        params=CalibrateParams(
            models=(MODEL,),
            ks=(3,),
            server=server_config(framework="sim", model=MODEL.id, extra_args=FAST),
            placement=_placement(tmp_path),
            workload=PROMPTS,
            load=LoadConfig(concurrency=4),
            reference_path=str(reference),
            cache_days=0,
        )
    )
    return reference


def test_m1_passes_a_healthy_framework_and_fails_a_degraded_one(tmp_path: Path) -> None:
    reference = _calibrated_reference(tmp_path)
    ok = gate(params=_gate_params(tmp_path, reference, "vllm", "1.0"))
    assert ok.passed
    assert [v.gate for v in ok.verdicts] == ["al", "gsm8k-accuracy"]
    # the pre-flight burst before the measurement saw speculation run with K = 3
    check = open_run(ok.run_dir).manifest.model_dump(mode="json")["provenance"]["preflight"]
    assert check["passed"] is True
    assert check["steps"] > 0
    assert check["requests"] == 4

    state = gate(params=_gate_params(tmp_path, reference, "sglang", "0.5"), return_state=True)
    assert state.is_failed()
    message = str(state.message)
    assert "AL gate FAILED" in message
    assert "< threshold" in message
    assert "AL 1." in message
    runs = sorted((tmp_path / "results" / "m1").iterdir())
    failed_run = open_run(runs[-1])
    assert failed_run.status == "failed"
    assert not failed_run.json("summary")["passed"]
    # SGLang's AL comes from the requests' sglext.spec_tokens_details (asked for with return_spec_tokens_details),
    # exactly over the measured requests; the counters are the cross-check
    stats = failed_run.table("spec_stats").row(0, named=True)
    assert stats["source"] == "per-request"
    assert "exact, from the sglext.spec_tokens_details of" in stats["note"]
    assert "counters: AL" in stats["note"]
    requests = failed_run.table("requests").filter(~pl.col("warmup") & pl.col("error").is_null())
    assert requests["spec_verify_ct"].null_count() == 0
    exact = 1 + requests["spec_accepted_drafts"].sum() / requests["spec_verify_ct"].sum()
    assert stats["al"] == pytest.approx(exact, abs=1e-12)


def _bench_params(tmp_path: Path, *extra: str, **fields: Any) -> BenchmarkParams:
    return BenchmarkParams(
        **fields,
        model=MODEL,
        k=3,
        server=server_config(framework="sim", model=MODEL.id, extra_args=(*FAST, *extra)),
        placement=_placement(tmp_path),
        target_al=2.73,
        workload=RandomWorkload(isl=128, osl=64),
        concurrencies=(4, 16),
    )


def test_m2_audit_passes_on_target_and_fails_off_target(tmp_path: Path) -> None:
    out = benchmark(params=_bench_params(tmp_path))
    assert [p.valid for p in out.points] == [True, True]
    assert all(p.achieved_al is not None and abs(p.achieved_al - 2.73) < 0.05 for p in out.points)
    stored = open_run(out.run_dir)
    assert stored.complete
    assert stored.table("spec_stats").height == 2
    assert stored.table("requests").height == 10 * 4 + 10 * 16 + 2 * 4 + 2 * 16
    assert "SIMULATED" in (Path(out.run_dir) / "report.md").read_text()

    # the pre-flight off: the audit after each point finds the off-target server
    state = benchmark(
        params=_bench_params(tmp_path, "--synthetic-al", "2.2", preflight=False), return_state=True
    )
    assert state.is_failed()
    assert "synthetic audit FAILED" in str(state.message)
    assert "expected 2.7300" in str(state.message)


def test_m2_task_runs_record_the_task_runs_whose_results_they_took(tmp_path: Path) -> None:
    """The steps hand Prefect their arguments resolved but not walked (``opaque``): a task's result passed on is
    still recorded as the next task's input, which the Prefect UI draws as the run graph's edges.

    The run's labels (model, framework, K, method) are the flow run's tags, and its task runs carry none: Prefect
    asks the server for a tag concurrency slot before each tagged task run.
    """
    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    out = benchmark(params=_bench_params(tmp_path).model_copy(update={"concurrencies": (4,)}))
    flow_run_id = open_run(out.run_dir).manifest.provenance.flow_run_id
    assert flow_run_id is not None
    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
        flow_run = client.read_flow_run(flow_run_id)
    assert {f"model:{MODEL.id}", "framework:sim", "k:3", "m2"} <= set(flow_run.tags), flow_run.tags
    assert runs
    assert all(not r.tags for r in runs), [(r.name, r.tags) for r in runs]
    by_name = {r.name.rsplit("-", 1)[0]: r for r in runs}
    upstream = {
        name: {i.id for inputs in r.task_inputs.values() for i in inputs if hasattr(i, "id")}
        for name, r in by_name.items()
    }
    assert by_name["run_load"].id in upstream["spec_stats"], upstream  # the measurement it took
    assert by_name["spec_stats"].id in upstream["audit_synthetic"], upstream  # the statistics it judged


def test_m2_with_auto_client_processes_judges_each_warm_up_and_measures_the_same_requests(
    tmp_path: Path,
) -> None:
    """The warm-up runs watched (as its own phase) and is stored flagged; a client that kept up measures in one
    process; the choice is in the run's stored configuration."""
    out = benchmark(params=_bench_params(tmp_path, auto_client_processes=True))
    assert [p.valid for p in out.points] == [True, True]
    stored = open_run(out.run_dir)
    requests = stored.table("requests")
    assert requests.height == 10 * 4 + 10 * 16 + 2 * 4 + 2 * 16
    assert requests.filter(pl.col("warmup")).height == 2 * 4 + 2 * 16
    assert stored.manifest.config["auto_client_processes"] is True
    assert all(p.client_verdict is not None for p in out.points)


def test_m2_preflight_catches_a_knob_that_did_not_take_effect_before_the_sweep(tmp_path: Path) -> None:
    """A server that reads the knob and ignores it (real acceptance) fails within the pre-flight, naming causes."""
    started = time.monotonic()
    state = benchmark(params=_bench_params(tmp_path, "--ignore-synthetic"), return_state=True)
    took = time.monotonic() - started
    assert state.is_failed()
    message = str(state.message)
    assert "pre-flight FAILED for sim K=3 target 2.7300" in message
    assert "--ignore-synthetic" in message  # the likely causes
    assert "v0.20.0" in message  # the sim speaks vLLM's dialect: vLLM's release gate is a likely cause
    assert took < 60, took
    stored = open_run(_last_run(tmp_path))
    assert stored.status == "failed"
    assert not (Path(stored.dir) / "spec_stats.parquet").exists()  # no point was measured
    check = stored.manifest.model_dump(mode="json")["provenance"]["preflight"]
    assert check["passed"] is False
    assert check["steps"] > 0

    one = _bench_params(tmp_path).model_copy(update={"concurrencies": (4,)})
    out = benchmark(params=one)  # the knob in effect: the pre-flight passes
    check = open_run(out.run_dir).manifest.model_dump(mode="json")["provenance"]["preflight"]
    assert check["passed"] is True
    assert abs(check["al"] - 2.73) <= check["allowed"] + 0.05


def test_servers_are_stopped_after_a_failed_flow(tmp_path: Path) -> None:
    params = _bench_params(tmp_path, "--synthetic-al", "2.2")
    state = benchmark(params=params, return_state=True)
    assert state.is_failed()
    run_dir = sorted((tmp_path / "results" / "m2").iterdir())[-1]
    server = open_run(run_dir).manifest.model_dump(mode="json")["provenance"]["server"]
    assert not _alive(int(str(server["id"]).split("@")[0]))  # the process runner id is pid@start-time


def _last_run(tmp_path: Path) -> Path:
    return sorted((tmp_path / "results" / "m2").iterdir())[-1]


def test_a_server_that_crashes_mid_point_keeps_the_requests_measured_so_far(tmp_path: Path) -> None:
    state = benchmark(
        # a few ms per step (not time scale 0): the crash comes 50 ms after the 30th answer, and on an idle machine
        # the point's other 18 requests could all finish inside that, so the crash fell between two points
        params=_bench_params(
            tmp_path, "--crash-after-requests", "30", "--time-scale", "0.2", preflight=False
        ),
        return_state=True,
    )
    assert state.is_failed()
    assert "aborted mid-point" in str(state.message)
    stored = open_run(_last_run(tmp_path))
    assert stored.status == "failed"
    assert "aborted mid-point" in str(stored.manifest.error)
    requests = stored.table("requests")
    ok = requests.filter(requests["error"].is_null())
    assert ok.height >= 30 - 1  # what the server answered before it died (warm-up included) is kept
    assert requests.filter(requests["error"].is_not_null()).height >= 1
    points = stored.table("spec_stats")
    assert points["partial"].to_list() == [True]  # the first point, marked partial; no second point
    assert points["valid"].to_list() == [False]
    summary = stored.json("summary")
    assert summary["partial"] is True
    assert "NO, partial" in (Path(stored.dir) / "report.md").read_text()


def test_a_stalled_server_fails_its_point_within_the_stall_timeout(tmp_path: Path) -> None:
    params = _bench_params(tmp_path, "--stall-after-tokens", "8", stall_timeout_s=2.0, preflight=False)
    started = time.monotonic()
    state = benchmark(params=params, return_state=True)
    took = time.monotonic() - started
    assert state.is_failed()
    assert "stalled: the server sent no complete event for 2 s" in str(state.message)
    assert took < 60, took  # not 600 s per request
    stored = open_run(_last_run(tmp_path))
    requests = stored.table("requests")
    assert requests.height >= 4  # the stalled streams are recorded, each with the stall as its error
    assert requests["error"].str.contains("stalled").any()
    assert stored.table("spec_stats")["partial"].to_list() == [True]


def test_m0_keeps_a_point_that_aborts_mid_way_and_leaves_the_reference_table_alone(tmp_path: Path) -> None:
    reference = tmp_path / "ref.yaml"
    params = CalibrateParams(
        models=(MODEL,),
        ks=(3,),
        server=server_config(
            framework="sim", model=MODEL.id, extra_args=(*FAST, "--crash-after-requests", "6")
        ),
        placement=_placement(tmp_path),
        workload=PROMPTS,
        load=LoadConfig(concurrency=2),
        reference_path=str(reference),
        cache_days=0,
        preflight=False,  # the crash is to land mid-point
    )
    state = calibrate(params=params, return_state=True)
    assert state.is_failed()
    assert "aborted mid-way" in str(state.message)
    assert not reference.exists()  # a failed calibration never writes the reference table
    stored = open_run(sorted((tmp_path / "results" / "m0").iterdir())[-1])
    assert stored.status == "failed"
    requests = stored.table("requests")
    assert requests.filter(requests["error"].is_null()).height >= 6 - 1  # answered before the crash
    assert requests["k"].unique().to_list() == [3]
    summary = stored.json("summary")
    assert summary["partial"] is True
    assert summary["reference_updated"] is False
    assert "aborted mid-way" in summary["failures"][0]
    point = next(iter(stored.json("scrapes")["points"].values()))
    assert point["partial"] is True
    assert point["baseline"] is not None  # the scrape taken before the load is kept
    report = (Path(stored.dir) / "report.md").read_text()
    assert "PARTIAL results" in report
    assert "PARTIAL results" in (Path(stored.dir) / "report.html").read_text()


def test_m1_keeps_the_al_point_that_aborts_mid_way(tmp_path: Path) -> None:
    reference = _calibrated_reference(tmp_path)
    params = _gate_params(tmp_path, reference, "vllm", "1.0")
    crashing = params.model_copy(
        update={
            "server": params.server.model_copy(
                update={"extra_args": (*params.server.extra_args, "--crash-after-requests", "6")}
            ),
            "preflight": False,  # the crash is to land mid-point
        }
    )
    state = gate(params=crashing, return_state=True)
    assert state.is_failed()
    assert "aborted mid-way" in str(state.message)
    stored = open_run(sorted((tmp_path / "results" / "m1").iterdir())[-1])
    assert stored.status == "failed"
    requests = stored.table("requests")
    assert requests.filter(requests["error"].is_null()).height >= 6 - 1
    summary = stored.json("summary")
    assert summary["partial"] is True
    assert summary["passed"] is False
    assert [v["gate"] for v in summary["verdicts"]] == ["al"]  # no GSM8K on a dead server
    assert "PARTIAL" in (Path(stored.dir) / "report.md").read_text()


def sweep_templates(tmp_path: Path, ks: tuple[int, ...], **bench: Any) -> tuple[GateParams, dict[str, Any]]:
    """A sim reference calibrated for ``ks``, then a sweep's templates at it: M1 without GSM8K, M2's fields."""
    reference = tmp_path / "ref.yaml"
    calibrate(
        params=CalibrateParams(
            models=(MODEL,),
            ks=ks,
            server=server_config(framework="sim", model=MODEL.id, extra_args=FAST),
            placement=_placement(tmp_path),
            workload=PROMPTS,
            load=LoadConfig(concurrency=4),
            reference_path=str(reference),
            cache_days=0,
        )
    )
    gate_params = _gate_params(tmp_path, reference, "vllm", "1.0").model_copy(
        update={"gsm8k": Gsm8kSettings(enabled=False)}
    )
    fields = {"target_al": None, "reference_path": str(reference), **bench}
    return gate_params, _bench_params(tmp_path).model_dump() | fields


def test_sweep_runs_m1_then_m2_per_k_and_picks_the_best_k(tmp_path: Path) -> None:
    from alflow.config import SweepParams
    from alflow_flows.sweep import sweep

    gate_params, bench = sweep_templates(tmp_path, (1, 3))
    out = sweep(
        params=SweepParams(ks=(1, 3), gate=gate_params, benchmark=BenchmarkParams.model_validate(bench))
    )
    assert {k: (o.gate, o.benchmark) for k, o in out.per_k.items()} == {
        1: ("passed", "passed"),
        3: ("passed", "passed"),
    }
    for o in out.per_k.values():  # each step names its subflow run and its run directory
        assert o.gate_run is not None
        assert o.gate_run.run_dir
        assert o.gate_run.flow_run_id
        assert o.benchmark_run is not None
        assert o.benchmark_run.run_dir
        assert "/m2/" in o.benchmark_run.run_dir
    # the sweep's own run: per-K table, every K's points, the best K, a report with every K's curve
    assert out.run_dir is not None
    assert "/sweep/" in out.run_dir
    stored = open_run(out.run_dir)
    assert stored.complete
    assert stored.table("per_k")["k"].to_list() == [1, 3]
    assert sorted(set(stored.table("spec_stats")["k"].to_list())) == [1, 3]
    summary = stored.json("summary")
    assert summary["mode"] == "in-process"
    assert summary["failures"] == []
    assert [b["concurrency"] for b in summary["best_k"]] == [4, 16]
    html = (Path(out.run_dir) / "report.html").read_text()
    assert "Best K per concurrency" in html
    assert "sim K=1" in html
    assert "sim K=3" in html
    assert "| 1 | this process | passed: Completed |" in (Path(out.run_dir) / "report.md").read_text()
    assert [b.concurrency for b in out.best_k] == [4, 16]
    assert all(b.best_k_throughput in (1, 3) for b in out.best_k)
    assert sorted({p.k for p in out.points}) == [1, 3]
