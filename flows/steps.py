"""The methods' side effects as Prefect tasks: the :class:`alflow.methods.steps.Steps` the flows give.

Each step is the task of the same job (``tasks/``), so the Prefect UI shows the same task runs, caching and
retries as before the procedures moved out of the flows; the procedures themselves have no Prefect in them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, ParamSpec, TypeVar, cast

import polars as pl
from prefect import Task, get_run_logger
from prefect.utilities.annotations import opaque

from alflow.acceptance.stats import SpecStats
from alflow.acceptance.synthetic import AcceptanceDistribution
from alflow.config import (
    GateParams,
    GateTolerances,
    Gsm8kSettings,
    LoadConfig,
    ModelSpec,
    ServerConfig,
    ServerPlacement,
    ThinkingMode,
)
from alflow.config.regression import RegressionSettings
from alflow.config.runners import RunnerOptions
from alflow.datasets.types import Session
from alflow.evals.gsm8k import EvalResult
from alflow.gates import Verdict
from alflow.loadgen.endpoints import Sampling
from alflow.measure import Measurement
from alflow.metrics.client import GpuLayout
from alflow.preflight import PreflightResult
from alflow.reference.table import Key, ReferenceTable
from alflow.results.store import RunWriter
from alflow.results.summaries import StoredSummary
from flows.common import emit_passed, gate_failure, pass_event
from infra.runners import ServerHandle
from tasks import gates, measure, regression, results, servers
from tasks.preflight import preflight

P = ParamSpec("P")
R = TypeVar("R")


def _run(task: Task[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """Call ``task`` with every argument wrapped in Prefect's ``opaque``: each is resolved, not walked.

    Prefect visits every element of a task's arguments twice (to resolve futures and to record upstream task
    runs); a point's sessions and records are tens of thousands of objects: about a quarter of an M2 flow's
    CPU went there. ``opaque`` looks at the argument itself only, so a task's result handed to the next task
    (a measurement, its statistics) is still drawn as that task's input in the Prefect UI.
    """
    call = cast(Any, task)
    return cast(R, call(*(opaque(a) for a in args), **{name: opaque(v) for name, v in kwargs.items()}))


class PrefectSteps:
    """Every step of :class:`alflow.methods.steps.Steps` as the flows' Prefect task of that job."""

    def server_lifetime(
        self, server: ServerConfig, placement: ServerPlacement
    ) -> AbstractContextManager[ServerHandle]:
        return servers.server_lifetime(server, placement)

    def wait_ready(self, handle: ServerHandle, runner: RunnerOptions) -> object:
        return _run(servers.wait_ready, handle, runner)

    def preflight(
        self,
        handle: ServerHandle,
        server: ServerConfig,
        k: int,
        dist: AcceptanceDistribution | None,
        *,
        subject: str,
        timeout_s: float = 60.0,
    ) -> PreflightResult:
        return _run(preflight, handle, server, k, dist, subject=subject, timeout_s=timeout_s)

    def run_load(
        self,
        handle: ServerHandle,
        sessions: Sequence[Session],
        load: LoadConfig,
        sampling: Sampling,
        *,
        k: int,
        endpoint: str = "chat",
        warmup_sessions: Sequence[Session] | None = None,
        progress_key: str,
        gpus: GpuLayout | None = None,
    ) -> Measurement:
        return _run(
            measure.run_load,
            handle,
            sessions,
            load,
            sampling,
            k=k,
            endpoint=endpoint,
            warmup_sessions=warmup_sessions,
            progress_key=progress_key,
            gpus=gpus,
            keep_partial=True,
        )

    def spec_stats(self, m: Measurement, k: int, level: float | None = None) -> Measurement:
        return _run(measure.spec_stats, m, k) if level is None else _run(measure.spec_stats, m, k, level)

    def audit(self, stats: SpecStats, dist: AcceptanceDistribution, abs_tol: float, subject: str) -> Verdict:
        return _run(gates.audit_synthetic, stats, dist, abs_tol, subject)

    def check_al_gate(
        self, stats: SpecStats, reference_al: float, tolerances: GateTolerances, subject: str
    ) -> Verdict:
        return _run(gates.check_al_gate, stats, reference_al, tolerances, subject)

    def check_accuracy_gate(
        self,
        handle: ServerHandle,
        model: ModelSpec,
        thinking: ThinkingMode,
        settings: Gsm8kSettings,
        *,
        synthetic: bool,
    ) -> tuple[Verdict, EvalResult]:
        return _run(gates.check_accuracy_gate, handle, model, thinking, settings, synthetic=synthetic)

    def store(self, writer: RunWriter, tables: Mapping[str, pl.DataFrame], summary: StoredSummary) -> object:
        return _run(results.store_results, writer, tables, summary)

    def render(self, writer: RunWriter, rows: Sequence[Mapping[str, Any]], *, key: str) -> object:
        return _run(results.render_report, writer, rows, key=key)

    def check_regression(self, writer: RunWriter, settings: RegressionSettings) -> object:
        try:  # the task warns about its own failures; this catches the task run's (never fails the run)
            return _run(regression.check_regression, writer, settings)
        except Exception as exc:
            self.warn(f"regression check not run: {exc!r}")
            return None

    def check_reference(
        self, writer: RunWriter, previous: ReferenceTable | None, table: ReferenceTable, keys: Sequence[Key]
    ) -> object:
        try:
            return _run(regression.check_reference, writer, previous, table, keys)
        except Exception as exc:
            self.warn(f"reference check not run: {exc!r}")
            return None

    def fail(self, flow: str, message: str, payload: dict[str, Any]) -> Exception:
        return gate_failure(flow, message, payload)

    def gate_passed(self, params: GateParams, *, run_dir: str, reference_al: float) -> None:
        # the pass event: prefect.yaml's m2-after-m1 trigger starts M2 from it
        emit_passed("m1-gate", *pass_event(params, run_dir=run_dir, reference_al=reference_al))

    def log(self, message: str) -> None:
        get_run_logger().info("%s", message)

    def warn(self, message: str) -> None:
        get_run_logger().warning("%s", message)
