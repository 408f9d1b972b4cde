"""M1, the evaluation gate, as a plain procedure.

Real acceptance of the framework under test on SPEED-Bench against the reference AL, then GSM8K. What was
measured is stored even when the run fails part-way; the gates' failures fail the run after storing; a
passed gate is announced (:meth:`alflow.methods.steps.Steps.gate_passed`). The side effects are the caller's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from alflow.config import GateParams, LoadConfig, ServerConfig
from alflow.datasets.types import Session
from alflow.errors import GateFailedError
from alflow.evals.gsm8k import Gsm8kSummary
from alflow.gates import Verdict
from alflow.measure import Measurement
from alflow.methods.common import Collected, run_skeleton
from alflow.methods.outcomes import M1Outcome
from alflow.methods.steps import H, PointLoad, Steps
from alflow.methods.topology import gpu_layout
from alflow.metrics.client import ClientSummary
from alflow.preflight import PREFLIGHT_TIMEOUT_S, PreflightError
from alflow.results.store import RunWriter
from alflow.results.summaries import M1RunSummary
from alflow.util.redact import redact_url
from alflow.util.rows import dump_row
from alflow.workloads import dataset_description, request_sampling, speed_bench_sessions

FLOW = "m1-gate"


@dataclass
class _Gated(Collected[Verdict]):
    """The run's verdicts (its points) and tables (:class:`Collected`), the client's and GSM8K's numbers."""

    client: ClientSummary | None = None
    gsm8k: Gsm8kSummary | None = None
    partial: str | None = None


def subject_of(params: GateParams, server: ServerConfig) -> str:
    """How the run names what it gates: framework, model, method, K and thinking mode."""
    return f"{server.framework} {params.model.id} {params.method.value} K={params.k} thinking={params.thinking.value}"


def run_m1(
    params: GateParams, reference: float, server: ServerConfig, writer: RunWriter, steps: Steps[H]
) -> M1Outcome:
    """Gate ``server`` (the point's config) against the ``reference`` AL, then on GSM8K; store and report.

    ``writer`` is the run, entered and closed here; a pass is announced after it is closed. Raises the gates'
    failure (or what stopped the run) after storing.
    """
    with writer:
        verdicts = _run(params, reference, server, writer, steps)
    steps.log(f"M1 passed for {subject_of(params, server)}")
    steps.gate_passed(params, writer.dir, reference)
    return M1Outcome(run_dir=writer.dir, passed=True, verdicts=verdicts)


def _run(
    params: GateParams, reference: float, server: ServerConfig, writer: RunWriter, steps: Steps[H]
) -> tuple[Verdict, ...]:
    """The gated run inside the open run directory: its verdicts when every gate passed, else the failure raised."""
    subject = subject_of(params, server)
    dataset = dataset_description(params.workload)
    writer.update_provenance(dataset=dataset, reference_path=params.reference_path, reference_al=reference)
    sessions = speed_bench_sessions(params.workload)
    got = _Gated()

    def measure() -> None:
        with steps.server_lifetime(server, params.placement) as handle:
            _gate(params, reference, server, writer, steps, handle, sessions, subject, got)

    def store() -> None:
        got.failures = [] if got.partial is None else [got.partial]
        if got.stopped is not None:
            got.failures.append(f"the run failed: {got.stopped}")
            if not isinstance(got.stopped, GateFailedError):  # the server or the client failed mid-way
                got.partial = got.partial or f"the run failed after the AL point was measured: {got.stopped}"
        _store(params, server, writer, steps, subject, got)

    run_skeleton(got, measure, store)
    if not _passed(got):
        message = "; ".join(v.message for v in got.points if not v.passed)
        raise steps.fail(FLOW, message, {"subject": subject, "reference_al": reference})
    return tuple(got.points)


def _passed(got: _Gated) -> bool:
    """Every gate passed, on a whole run."""
    return got.stopped is None and got.partial is None and all(v.passed for v in got.points)


def _gate(
    params: GateParams,
    reference: float,
    server: ServerConfig,
    writer: RunWriter,
    steps: Steps[H],
    handle: H,
    sessions: list[Session],
    subject: str,
    got: _Gated,
) -> None:
    """The pre-flight, the AL point and its gate, then GSM8K."""
    writer.update_provenance(server=dump_row(handle))
    if params.preflight:
        check = steps.preflight(handle, server, params.k, None, subject, PREFLIGHT_TIMEOUT_S)
        writer.update_provenance(preflight=dump_row(check))
        if not check.passed:
            raise PreflightError(check.message)
    m = _al_point(params, reference, steps, handle, sessions, server, got)
    if m.cut_short is not None:
        got.partial = (
            f"the AL point aborted mid-way ({m.cut_short}); its {m.records.height} requests "
            "are kept and the point is marked partial"
        )
        got.points.append(
            Verdict(gate="al", passed=False, message=f"{subject}: no AL verdict: {got.partial}")
        )
        return
    if m.spec_stats is None:
        why = m.stats_error or "no baseline or final scrape"
        where = " + ".join(redact_url(u) for u in handle.all_metrics_urls)
        raise steps.fail(FLOW, f"no spec-decode stats at {where} for {subject}: {why}", {})
    got.points.append(steps.check_al_gate(m.spec_stats, reference, params.tolerances, subject))
    if params.gsm8k.enabled:
        verdict, result = steps.check_accuracy_gate(
            handle, params.model, params.thinking, params.gsm8k, server.synthetic is not None
        )
        got.points.append(verdict)
        got.gsm8k = result.summary()
        got.add("gsm8k", pl.DataFrame([dump_row(r) for r in result.results]))


def _al_point(
    params: GateParams,
    reference: float,
    steps: Steps[H],
    handle: H,
    sessions: list[Session],
    server: ServerConfig,
    got: _Gated,
) -> Measurement:
    """Measure the AL point on SPEED-Bench and keep its tables."""
    load = LoadConfig.model_validate(
        {**params.load.model_dump(), "num_prompts": params.load.num_prompts or len(sessions)}
    )
    sampling = request_sampling(params.model, params.thinking, max_tokens=params.workload.max_tokens)
    m = steps.run_load(
        handle, PointLoad(sessions, load, sampling, params.k, "m1-progress", gpus=gpu_layout(server))
    )
    m = steps.spec_stats(m, params.k, params.tolerances.confidence)
    got.client = m.client
    got.add("requests", m.records)
    got.add("server_metrics", m.metrics_frame())
    if m.spec_stats is not None:
        row = {
            **flat_stats(dump_row(m.spec_stats)),
            "reference_al": reference,
            "partial": m.cut_short is not None,
        }
        got.add("spec_stats", pl.DataFrame([row]))
    return m


def _store(
    params: GateParams,
    server: ServerConfig,
    writer: RunWriter,
    steps: Steps[H],
    subject: str,
    got: _Gated,
) -> None:
    """Store the tables and ``summary.json``, then the report (also for a failed run)."""
    summary = M1RunSummary(
        flow="m1",
        subject=subject,
        passed=_passed(got),
        partial=got.partial is not None,
        failures=got.failures,
        verdicts=list(got.points),
        client=None if got.client is None else dump_row(got.client),
        gsm8k=got.gsm8k,
    )
    steps.store(writer, got.tables(), summary)
    rows = [{"gate": v.gate, "passed": v.passed, "message": v.message} for v in got.points]
    steps.render(writer, rows, f"m1-{server.framework}-k{params.k}")


def flat_stats(stats: dict[str, Any]) -> dict[str, Any]:
    """SpecStats as one table row (lists and maps as JSON-ready columns)."""
    ci = stats.pop("ci", None) or {}
    hist = stats.pop("histogram", None) or {}
    out = {**stats, "ci_low": ci.get("low"), "ci_high": ci.get("high"), "ci_method": ci.get("method")}
    out["histogram"] = [int(hist[k]) for k in sorted(hist, key=int)] if hist else None
    return out
