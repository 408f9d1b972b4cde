"""The methods' procedures without Prefect (alflow.methods: M0, M1, M2) and M2's concurrency plan.

The steps are fakes at the seam the procedure owns (:class:`M2Steps`): they record what the procedure asked
for and answer with measurements made here. The run directory is a real :class:`RunWriter`.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from functools import partial
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from alflow.acceptance.knobs import DRAWS_NOTE
from alflow.acceptance.stats import SpecStats, from_counters
from alflow.acceptance.synthetic import AcceptanceDistribution
from alflow.config import (
    BenchmarkParams,
    CalibrateParams,
    GateParams,
    GateTolerances,
    Gsm8kSettings,
    LoadConfig,
    ModelSpec,
    RandomWorkload,
    RegressionSettings,
    SamplingParams,
    ServerConfig,
    ServerPlacement,
    SpeedBenchWorkload,
    ThinkingMode,
    server_config,
)
from alflow.config.runners import RunnerOptions
from alflow.errors import GateFailedError
from alflow.evals.gsm8k import EvalResult
from alflow.gates import Verdict, al_gate, audit_synthetic
from alflow.loadgen.endpoints import Sampling
from alflow.loadgen.frames import records_frame
from alflow.loadgen.records import RequestRecord
from alflow.measure import PARTIAL_ATTR, Measurement
from alflow.methods.common import point_server
from alflow.methods.dry_run import m2_server
from alflow.methods.m0 import (
    PartialPointError,
    check_reference_target,
    measure_calibration_point,
)
from alflow.methods.m1 import run_m1
from alflow.methods.m2 import run_m2
from alflow.methods.plan import FixedConcurrencies, PlannedPoint
from alflow.methods.steps import PointLoad, Steps
from alflow.metrics.client import summarize
from alflow.metrics.prometheus import Snapshot
from alflow.preflight import PreflightError, PreflightResult
from alflow.reference.table import Key, ReferenceTable, ReferenceTableError
from alflow.results.manifest import ServerProvenance
from alflow.results.rows import M2Point
from alflow.results.store import RunWriter
from alflow.results.summaries import StoredSummary, store_summary
from alflow.workloads import request_sampling

pytestmark = pytest.mark.unit

# -- the plan ---------------------------------------------------------------------------------------


def test_a_fixed_plan_walks_each_concurrency_repeats_times_with_disjoint_seeds() -> None:
    plan = FixedConcurrencies((4, 16), prompts_per_concurrency=10, warmup_per_concurrency=2, repeats=2)
    points = list(plan.points())
    assert [(p.concurrency, p.repeat) for p in points] == [(4, 0), (4, 1), (16, 0), (16, 1)]
    assert [(p.prompts, p.warmup) for p in points] == [(40, 8), (40, 8), (160, 32), (160, 32)]
    seeds = [p.seed_offset for p in points] + [p.warmup_seed_offset for p in points]
    assert len(set(seeds)) == len(seeds)  # no two prompt sets drawn from the same seed
    assert [p.label for p in points][:2] == ["concurrency 4 repeat 1/2", "concurrency 4 repeat 2/2"]
    assert points[3].progress_key == "m2-progress-c16-r1"
    once = next(FixedConcurrencies((8,), 3, 0).points())
    assert (once.label, once.progress_key, once.warmup) == ("concurrency 8", "m2-progress-c8", 0)


@pytest.mark.parametrize(
    ("concurrencies", "prompts", "warmup", "repeats"),
    [((), 1, 0, 1), ((0,), 1, 0, 1), ((4,), 0, 0, 1), ((4,), 1, -1, 1), ((4,), 1, 0, 0)],
)
def test_a_fixed_plan_refuses_what_measures_nothing(
    concurrencies: tuple[int, ...], prompts: int, warmup: int, repeats: int
) -> None:
    with pytest.raises(ValueError, match="at least"):
        FixedConcurrencies(concurrencies, prompts, warmup, repeats)


# -- the procedure ----------------------------------------------------------------------------------

K, TARGET = 3, 2.5


@dataclass(frozen=True)
class FakeHandle:
    provenance: ServerProvenance
    all_metrics_urls: Sequence[str] = ("http://127.0.0.1:9/metrics",)
    base_url: str = "http://127.0.0.1:9"


def _snapshot(accepted: float, drafts: float) -> Snapshot:
    return Snapshot(
        url="http://127.0.0.1:9/metrics",
        wall_time_s=accepted,
        mono_ns=int(drafts),
        samples={"vllm:spec_decode_num_accepted_tokens_total": {(): accepted}},
    )


def _measurement(requests: int, *, aborted: str | None = None, stats: bool = True, k: int = K) -> Measurement:
    ms = 1_000_000
    frame = records_frame(
        RequestRecord(
            request_id=i,
            session_id=f"s{i}",
            start_ns=0,
            first_token_ns=20 * ms,
            end_ns=100 * ms,
            done_ns=100 * ms,
            chunk_ns=[20 * ms, 60 * ms, 100 * ms],
            input_tokens=16,
            output_tokens=8,
            http_status=200,
        )
        for i in range(requests)
    )
    # the synthetic target exactly: 1 + accepted / drafts = 2.5 at K = 3
    per_position = {2: [1000, 500], 3: [1000, 500, 0]}[k]  # the min-variance schedule of AL 2.5
    spec = (
        from_counters(1000, 1500, draft_tokens=1000 * k, accepted_per_position=per_position, k=k)
        if stats and aborted is None
        else None
    )
    return Measurement(
        records=frame,
        client=summarize(frame, duration_s=1.0),
        spec_stats=spec,
        dialect="vllm",
        aborted=aborted,
        duration_s=1.0,
        baseline=_snapshot(0, 0),
        final=_snapshot(1500, 3000),
    )


@dataclass
class FakeSteps:
    """Every step recorded; ``loads`` answers run_load in turn (a Measurement, or an exception to raise)."""

    loads: list[Measurement | BaseException]
    knobs: Mapping[str, object] = field(default_factory=lambda: {"scheme": "vllm"})
    preflight_passes: bool = True
    calls: list[str] = field(default_factory=list)
    samplings: list[Sampling] = field(default_factory=list)
    """The sampling each run_load was given."""
    stored: list[Mapping[str, Any]] = field(default_factory=list)
    reports: list[str] = field(default_factory=list)
    """The key of each report rendered."""
    server_stopped: bool = False
    stop_raises: BaseException | None = None  # raised as the server stops (a signal in stop_server)
    judging: Callable[[], object] | None = None  # called in spec_stats (a signal while a point is judged)

    @contextmanager
    def server_lifetime(self, server: ServerConfig, placement: ServerPlacement) -> Iterator[FakeHandle]:
        self.calls.append("start")
        try:
            yield FakeHandle(provenance=ServerProvenance(synthetic=dict(self.knobs)))
        finally:
            self.server_stopped = True
            self.calls.append("stop")
            if self.stop_raises is not None:
                raise self.stop_raises

    def wait_ready(self, handle: FakeHandle, runner: RunnerOptions) -> object:
        self.calls.append("ready")
        return handle

    def preflight(
        self,
        handle: FakeHandle,
        server: ServerConfig,
        k: int,
        dist: AcceptanceDistribution | None,
        subject: str,
        timeout_s: float,
    ) -> PreflightResult:
        self.calls.append("preflight")
        message = "pre-flight passed" if self.preflight_passes else "pre-flight FAILED: AL 1.0, expected 2.5"
        al = TARGET if self.preflight_passes else 1.0
        return PreflightResult(
            passed=self.preflight_passes,
            message=message,
            al=al,
            expected_al=TARGET,
            allowed=0.2,
            steps=100,
            requests=16,
            duration_s=0.5,
        )

    def run_load(self, handle: FakeHandle, point: PointLoad) -> Measurement:
        self.calls.append(f"load c{point.load.concurrency} n{len(point.sessions)}")
        self.samplings.append(point.sampling)
        answer = self.loads.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def spec_stats(self, m: Measurement, k: int, level: float) -> Measurement:
        if self.judging is not None:
            self.judging()
        return m

    def audit(self, stats: SpecStats, dist: AcceptanceDistribution, abs_tol: float, subject: str) -> Verdict:
        self.calls.append(f"audit {subject}")
        return audit_synthetic(stats, dist, abs_tol=abs_tol, subject=subject)

    def store(self, writer: RunWriter, tables: Mapping[str, pl.DataFrame], summary: StoredSummary) -> object:
        self.calls.append("store")
        store_summary(writer, summary)  # the real check: the summary reads back as its flow's model
        self.stored.append({"tables": dict(tables), **summary.stored()})
        return writer.dir

    def render(self, writer: RunWriter, rows: Sequence[Mapping[str, Any]], key: str) -> object:
        self.calls.append("render")
        self.reports.append(key)
        return writer.dir

    def check_regression(self, writer: RunWriter, settings: RegressionSettings) -> object:
        self.calls.append("regression")
        return writer.dir

    def check_reference(
        self, writer: RunWriter, previous: ReferenceTable | None, table: ReferenceTable, keys: Sequence[Key]
    ) -> object:
        self.calls.append(f"reference {len(keys)}")
        return writer.dir

    def check_al_gate(
        self, stats: SpecStats, reference_al: float, tolerances: GateTolerances, subject: str
    ) -> Verdict:
        self.calls.append("al gate")
        return al_gate(stats, reference_al, tolerances, subject=subject)

    def check_accuracy_gate(
        self,
        handle: FakeHandle,
        model: ModelSpec,
        thinking: ThinkingMode,
        settings: Gsm8kSettings,
        synthetic: bool,
    ) -> tuple[Verdict, EvalResult]:
        raise AssertionError("these runs turn GSM8K off")

    def fail(self, flow: str, message: str, payload: dict[str, Any]) -> Exception:
        return GateFailedError(f"{flow} failed: {message}")

    def gate_passed(self, params: GateParams, run_dir: str, reference_al: float) -> None:
        self.calls.append(f"passed {reference_al}")

    def log(self, message: str) -> None:
        self.calls.append(f"log {message}")

    def warn(self, message: str) -> None:
        self.calls.append(f"warn {message}")

    def as_steps(self) -> Steps[FakeHandle]:
        """These fakes as the procedures' steps, one field each."""
        return Steps(**{f.name: getattr(self, f.name) for f in fields(Steps)})


def _params(tmp_path: Path, **fields: Any) -> BenchmarkParams:
    model = ModelSpec(id="test-llama")
    base: dict[str, Any] = {
        "model": model,
        "k": K,
        "target_al": TARGET,
        "server": server_config(framework="sim", model=model.id),
        "placement": ServerPlacement(results_root=str(tmp_path / "results")),
        "workload": RandomWorkload(isl=16, osl=8),
        "concurrencies": (2, 4),
        "prompts_per_concurrency": 2,
        "warmup_per_concurrency": 1,
    }
    base.update(fields)
    return BenchmarkParams(**base)


def _run(tmp_path: Path, steps: FakeSteps, **fields: Any) -> Any:
    params = _params(tmp_path, **fields)
    writer = RunWriter(str(tmp_path / "results"), "m2", run_id="r1", config={})
    server, _ = m2_server(params)  # the synthetic target: the parameters' TARGET
    return run_m2(params, server, writer, steps.as_steps())


@dataclass
class DoublingPlan:
    """An adaptive plan: doubles the concurrency until a point completes ``enough`` requests (it reads the points)."""

    enough: int
    seen: list[list[int]] = field(default_factory=list)

    def next_point(self, measured: Sequence[M2Point]) -> PlannedPoint | None:
        self.seen.append([p.concurrency for p in measured])
        if measured and (measured[-1].completed or 0) >= self.enough:
            return None
        conc = 2 ** (len(measured) + 1)
        return PlannedPoint(
            len(measured), conc, 0, 1, conc, 0, 1000 * len(measured), 1000 * len(measured) + 500
        )


def test_the_plan_decides_each_next_point_from_the_points_measured(tmp_path: Path) -> None:
    steps = FakeSteps(loads=[_measurement(4), _measurement(8), _measurement(16)])
    params = _params(tmp_path)
    plan = DoublingPlan(enough=8)
    writer = RunWriter(str(tmp_path / "results"), "m2", run_id="r1", config={})
    outcome = run_m2(params, m2_server(params)[0], writer, steps.as_steps(), plan)
    assert plan.seen == [[], [2], [2, 4]]  # each decision saw every point before it
    assert [p.concurrency for p in outcome.points] == [2, 4]  # the second point completed 8: the plan stopped
    assert [c for c in steps.calls if c.startswith("load")] == ["load c2 n2", "load c4 n4"]


@dataclass
class V2Steps(FakeSteps):
    """A vLLM server whose log said it runs Model Runner V2."""

    @contextmanager
    def server_lifetime(self, server: ServerConfig, placement: ServerPlacement) -> Iterator[FakeHandle]:
        self.calls.append("start")
        yield FakeHandle(provenance=ServerProvenance(synthetic=dict(self.knobs), model_runner="V2"))
        self.calls.append("stop")


@pytest.mark.parametrize(("seed", "runner_says_v2"), [(7, True), (None, True), (7, False)])
def test_a_constant_seed_on_model_runner_v2_warns_in_the_runs_server_record(
    tmp_path: Path, seed: int | None, runner_says_v2: bool
) -> None:
    steps_type = V2Steps if runner_says_v2 else FakeSteps
    steps = steps_type(loads=[_measurement(4), _measurement(8)])
    model = ModelSpec(id="test-llama", sampling_thinking_off=SamplingParams(temperature=0.0, seed=seed))
    _run(tmp_path, steps, model=model, server=server_config(framework="vllm", model="test-llama"))
    (manifest,) = (tmp_path / "results" / "m2").glob("*-r1/manifest.json")
    record = json.loads(manifest.read_text())["provenance"]["server"]
    warnings = (record.get("provenance") or {}).get("warnings", [])
    warned = [w for w in warnings if "Model Runner V2" in w]
    assert bool(warned) == (seed is not None and runner_says_v2)
    if warned:
        assert warned[0].startswith(DRAWS_NOTE)
        assert "same seed (7)" in warned[0]
        assert any(c.startswith("log " + DRAWS_NOTE) for c in steps.calls)


def test_every_planned_point_is_measured_audited_stored_and_reported(tmp_path: Path) -> None:
    steps = FakeSteps(loads=[_measurement(4), _measurement(8), _measurement(4), _measurement(8)])
    outcome = _run(tmp_path, steps, repeats=2)
    assert [p.concurrency for p in outcome.points] == [2, 2, 4, 4]
    assert all(p.valid for p in outcome.points)
    assert outcome.failures == ()
    assert (outcome.scheme, outcome.target_al) == ("vllm", TARGET)
    loads = [c for c in steps.calls if c.startswith(("load", "ready", "preflight", "audit"))]
    assert loads[:4] == ["preflight", "ready", "load c2 n4", "audit sim K=3 concurrency 2 repeat 1/2"]
    assert steps.calls.count("ready") == 4  # the server's health before each point
    # stored after the server is stopped, judged against its history before the report shows the verdicts
    assert steps.calls[-4:] == ["stop", "store", "regression", "render"]
    (summary,) = steps.stored
    assert summary["partial"] is False
    assert summary["tables"]["spec_stats"].height == 4
    assert summary["tables"]["requests"]["repeat"].to_list()[:4] == [0] * 4
    assert steps.reports == ["m2-test-llama-k3"]
    # random prompts of a fixed output length, the model's own settings otherwise
    assert {(s.max_tokens, s.min_tokens, s.ignore_eos) for s in steps.samplings} == {(8, 8, True)}


def test_an_aborted_point_ends_the_sweep_and_fails_the_run_after_storing_it(tmp_path: Path) -> None:
    steps = FakeSteps(loads=[_measurement(4), _measurement(3, aborted="the server stopped answering")])
    with pytest.raises(GateFailedError, match="aborted mid-point"):
        _run(tmp_path, steps, concurrencies=(2, 4, 8))
    assert [c for c in steps.calls if c.startswith("load")] == ["load c2 n4", "load c4 n8"]  # not c8
    (summary,) = steps.stored
    assert summary["partial"] is True
    assert [p["partial"] for p in summary["points"]] == [False, True]


def test_a_point_stopped_by_a_signal_is_stored_as_partial_and_the_signal_goes_on(tmp_path: Path) -> None:
    stop = KeyboardInterrupt()
    setattr(stop, PARTIAL_ATTR, _measurement(3, aborted="interrupted"))
    steps = FakeSteps(loads=[_measurement(4), stop])
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, steps, concurrencies=(2, 4, 8))
    assert steps.server_stopped
    (summary,) = steps.stored
    assert summary["partial"] is True
    assert summary["tables"]["requests"].height == 4 + 3
    assert "render" in steps.calls
    assert "regression" not in steps.calls  # a stopped run is not judged against its history


def test_a_signal_without_a_measurement_stops_at_once_and_stores_nothing(tmp_path: Path) -> None:
    steps = FakeSteps(loads=[KeyboardInterrupt()])
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, steps)
    assert steps.server_stopped
    assert steps.stored == []


def test_a_signal_as_the_server_stops_keeps_the_points_measured_before_it(tmp_path: Path) -> None:
    # hostile round F20: SIGTERM while stop_server ran after the last point left only manifest.json
    steps = FakeSteps(loads=[_measurement(4), _measurement(8)], stop_raises=KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, steps)
    (summary,) = steps.stored
    assert [(p["concurrency"], p["valid"], p["partial"]) for p in summary["points"]] == [
        (2, True, False),
        (4, True, False),
    ]
    assert summary["tables"]["requests"].height == 4 + 8
    assert summary["partial"] is True  # the run was stopped: not judged against its history
    assert summary["failures"] == [
        "sim K=3: the run was stopped (KeyboardInterrupt) after 2 point(s), each stored whole"
    ]
    assert "regression" not in steps.calls
    assert "render" in steps.calls


def test_a_signal_between_points_keeps_the_points_measured_before_it(tmp_path: Path) -> None:
    steps = FakeSteps(loads=[_measurement(4), KeyboardInterrupt()])  # landed before the second load began
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, steps)
    (summary,) = steps.stored
    assert summary["tables"]["spec_stats"]["concurrency"].to_list() == [2]


class _Stop(BaseException):
    """What a SIGTERM handler that raises raises (Prefect's bridge raises ``TerminationSignal``)."""


def _raise_stop(signum: int, frame: object) -> None:
    raise _Stop(signum)


def test_a_sigterm_while_a_point_is_judged_stops_the_run_once_the_point_is_collected(tmp_path: Path) -> None:
    # F20 too: the signal broke off spec_stats, the measured point was never collected, nothing was stored
    steps = FakeSteps(
        loads=[_measurement(4), _measurement(8)], judging=partial(os.kill, os.getpid(), signal.SIGTERM)
    )
    before = signal.signal(signal.SIGTERM, _raise_stop)
    try:
        with pytest.raises(_Stop):
            _run(tmp_path, steps)
        assert signal.getsignal(signal.SIGTERM) is _raise_stop  # the handler is back in place
    finally:
        signal.signal(signal.SIGTERM, before)
    (summary,) = steps.stored
    assert [(p["concurrency"], p["valid"], p["partial"]) for p in summary["points"]] == [(2, True, False)]
    assert [c for c in steps.calls if c.startswith(("audit", "load", "stop"))] == [
        "load c2 n4",
        "audit sim K=3 concurrency 2",
        "stop",
    ]


def test_an_error_after_a_point_is_raised_after_what_was_measured_is_stored(tmp_path: Path) -> None:
    steps = FakeSteps(loads=[_measurement(4), ConnectionError("the server went away")])
    with pytest.raises(ConnectionError, match="went away"):
        _run(tmp_path, steps)
    (summary,) = steps.stored
    assert summary["failures"] == ["sim K=3: the run failed: the server went away"]
    assert summary["tables"]["spec_stats"].height == 1


@pytest.mark.parametrize("what", ["preflight", "knobs"])
def test_a_run_that_fails_before_any_point_stores_nothing(tmp_path: Path, what: str) -> None:
    steps = FakeSteps(
        loads=[_measurement(4)],
        preflight_passes=what != "preflight",
        knobs={} if what == "knobs" else {"scheme": "vllm"},
    )
    message = "pre-flight FAILED" if what == "preflight" else "records no synthetic knobs"
    with pytest.raises((GateFailedError, PreflightError), match=message):
        _run(tmp_path, steps)
    assert steps.stored == []
    assert steps.server_stopped
    assert not [c for c in steps.calls if c.startswith("load")]


def test_invalid_points_fail_the_run_only_when_asked(tmp_path: Path) -> None:
    no_stats = [_measurement(4, stats=False), _measurement(8, stats=False)]
    outcome = _run(tmp_path / "kept", FakeSteps(loads=list(no_stats)), fail_on_invalid=False)
    assert [p.valid for p in outcome.points] == [False, False]
    assert len(outcome.failures) == 2
    with pytest.raises(GateFailedError, match="m2-benchmark failed"):
        _run(tmp_path / "failed", FakeSteps(loads=list(no_stats)))


# -- M1 -----------------------------------------------------------------------------------------------


def _gate_params(tmp_path: Path) -> GateParams:
    reference = tmp_path / "reference.yaml"
    reference.write_text("entries: []\n", encoding="utf-8")
    model = ModelSpec(id="test-llama")
    return GateParams(
        model=model,
        k=K,
        server=server_config(framework="sim", model=model.id),
        placement=ServerPlacement(results_root=str(tmp_path / "results")),
        reference_path=str(reference),
        workload=SpeedBenchWorkload(category="coding", max_tokens=64),
        load=LoadConfig(concurrency=2, num_prompts=4),
        gsm8k=Gsm8kSettings(enabled=False),
    )


def _gate(tmp_path: Path, steps: FakeSteps, reference: float) -> Any:
    params = _gate_params(tmp_path)
    writer = RunWriter(str(tmp_path / "results"), "m1", run_id="g1", config={})
    return run_m1(params, reference, params.server, writer, steps.as_steps())


def test_m1_passes_at_the_reference_and_announces_it_after_storing(tmp_path: Path) -> None:
    steps = FakeSteps(loads=[_measurement(4)])
    outcome = _gate(tmp_path, steps, reference=2.5)  # the measurement's AL is 2.5
    assert outcome.passed
    assert [v.gate for v in outcome.verdicts] == ["al"]
    assert [c for c in steps.calls if not c.startswith("log")][-3:] == ["store", "render", "passed 2.5"]
    (summary,) = steps.stored
    assert summary["passed"] is True
    assert summary["tables"]["spec_stats"]["reference_al"].to_list() == [2.5]
    (sampling,) = steps.samplings  # the workload's output cap, no fixed length
    assert (sampling.max_tokens, sampling.min_tokens, sampling.ignore_eos) == (64, None, None)


def test_m1_below_the_reference_fails_after_storing_and_announces_nothing(tmp_path: Path) -> None:
    steps = FakeSteps(loads=[_measurement(4)])
    with pytest.raises(GateFailedError, match="m1-gate failed"):
        _gate(tmp_path, steps, reference=3.5)
    (summary,) = steps.stored
    assert summary["passed"] is False
    assert not [c for c in steps.calls if c.startswith("passed")]


def test_m1_with_an_aborted_al_point_keeps_it_as_partial_and_fails(tmp_path: Path) -> None:
    steps = FakeSteps(loads=[_measurement(2, aborted="the server stopped answering")])
    with pytest.raises(GateFailedError, match="no AL verdict"):
        _gate(tmp_path, steps, reference=2.5)
    (summary,) = steps.stored
    assert summary["partial"] is True
    assert summary["tables"]["requests"].height == 2


def test_m1_without_spec_decode_stats_names_the_metrics_endpoints(tmp_path: Path) -> None:
    steps = FakeSteps(loads=[_measurement(4, stats=False)])
    with pytest.raises(GateFailedError, match=r"no spec-decode stats at http://127\.0\.0\.1:9/metrics"):
        _gate(tmp_path, steps, reference=2.5)
    assert len(steps.stored) == 1  # the requests were measured: they are stored


def test_m1_whose_preflight_fails_stores_nothing(tmp_path: Path) -> None:
    steps = FakeSteps(loads=[], preflight_passes=False)
    with pytest.raises(PreflightError, match="pre-flight FAILED"):
        _gate(tmp_path, steps, reference=2.5)
    assert steps.stored == []
    assert steps.server_stopped


# -- M0 -----------------------------------------------------------------------------------------------


def _calibrate_params(tmp_path: Path, ks: tuple[int, ...] = (2, 3)) -> CalibrateParams:
    model = ModelSpec(id="test-llama")
    return CalibrateParams(
        models=(model,),
        ks=ks,
        server=server_config(framework="sim", model=model.id),
        placement=ServerPlacement(results_root=str(tmp_path / "results")),
        workload=SpeedBenchWorkload(category="coding", max_tokens=64),
        load=LoadConfig(concurrency=2, num_prompts=4),
        reference_path=str(tmp_path / "ref.yaml"),
    )


def test_m0_measures_a_point_per_thinking_mode_through_the_steps(tmp_path: Path) -> None:
    params = _calibrate_params(tmp_path)
    steps = FakeSteps(loads=[_measurement(4)])
    server = point_server(params.server, "test-llama", params.method, 3)
    point = measure_calibration_point(
        steps.as_steps(),
        server,
        params.placement,
        params.models[0],
        (ThinkingMode.OFF,),
        params.workload,
        params.load,
    )
    assert list(point.modes) == ["off"]
    assert point.mode(ThinkingMode.OFF).stats.al == pytest.approx(2.5)
    assert steps.calls[:2] == ["start", "preflight"]
    assert steps.calls[2].startswith("load c2 n")  # the embedded coding prompts, 4 of them measured
    aborted = FakeSteps(loads=[_measurement(2, aborted="the server stopped answering")])
    with pytest.raises(PartialPointError, match="aborted mid-way") as caught:
        measure_calibration_point(
            aborted.as_steps(),
            server,
            params.placement,
            params.models[0],
            (ThinkingMode.OFF,),
            params.workload,
            params.load,
        )
    assert caught.value.records.height == 2
    assert caught.value.scrapes["off"]["partial"] is True
    assert aborted.server_stopped


def test_m0_refuses_a_table_of_the_other_kind_before_measuring(tmp_path: Path) -> None:
    params = _calibrate_params(tmp_path)
    (tmp_path / "ref.yaml").write_text(
        "kind: measured\ndataset: speed-bench\ncategory: coding\ndescription: x\nentries: []\n",
        encoding="utf-8",
    )
    with pytest.raises(ReferenceTableError, match="is a measured table; refusing to add simulated values"):
        check_reference_target(params)


def test_the_sampling_of_a_run_is_the_models_settings_in_its_thinking_mode() -> None:
    model = ModelSpec(
        id="m",
        reasoning=True,
        sampling_thinking_on=SamplingParams(temperature=0.6, top_p=0.95, min_p=0.0, max_tokens=2048),
        sampling_thinking_off=SamplingParams(temperature=0.0, repetition_penalty=1.1, seed=3),
    )
    on = request_sampling(model, ThinkingMode.ON)
    assert (on.temperature, on.top_p, on.max_tokens, on.min_tokens, on.ignore_eos) == (
        0.6,
        0.95,
        2048,
        None,
        None,
    )
    assert on.extra_body == {"min_p": 0.0}  # a setting left unset is not sent
    assert on.chat_template_kwargs == {"enable_thinking": True}
    off = request_sampling(model, ThinkingMode.OFF, max_tokens=100)
    assert (off.temperature, off.seed, off.max_tokens) == (0.0, 3, 100)
    assert off.extra_body == {"repetition_penalty": 1.1}
    assert off.chat_template_kwargs == {"enable_thinking": False}
    fixed = request_sampling(model, ThinkingMode.OFF, max_tokens=100, fixed_length=8)  # random prompts (M2)
    assert (fixed.max_tokens, fixed.min_tokens, fixed.ignore_eos) == (8, 8, True)
    assert request_sampling(ModelSpec(id="plain"), ThinkingMode.OFF).chat_template_kwargs is None


def test_the_skeleton_stores_what_was_measured_and_keeps_the_first_error_when_storing_fails_too() -> None:
    from alflow.methods.common import Collected, run_skeleton

    got: Collected[int] = Collected()

    def measure() -> None:
        got.points.append(1)
        raise ConnectionError("the server went away")

    def store() -> None:
        raise OSError("the disk is full")

    with pytest.raises(OSError, match="the disk is full") as caught:
        run_skeleton(got, measure, store)
    assert isinstance(caught.value.__cause__, ConnectionError)  # what stopped the run first is not lost
    nothing: Collected[int] = Collected()
    stored: list[str] = []
    with pytest.raises(ConnectionError):
        run_skeleton(
            nothing, lambda: (_ for _ in ()).throw(ConnectionError("at once")), lambda: stored.append("x")
        )
    assert stored == []  # nothing measured: nothing stored


def test_a_plan_that_never_says_done_is_stopped_at_the_points_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import alflow.methods.m2 as m2

    monkeypatch.setattr(m2, "MAX_POINTS", 2)
    steps = FakeSteps(loads=[_measurement(4), _measurement(4), _measurement(4)])
    params = _params(tmp_path, fail_on_invalid=False)
    writer = RunWriter(str(tmp_path / "results"), "m2", run_id="r1", config={})
    outcome = run_m2(params, m2_server(params)[0], writer, steps.as_steps(), DoublingPlan(enough=10**9))
    assert len(outcome.points) == 2
    assert outcome.failures == ("the concurrency plan asked for more than 2 points: stopped there",)
