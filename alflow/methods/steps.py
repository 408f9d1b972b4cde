"""The side effects a method's procedure asks for, as one protocol (:class:`Steps`).

The flows give Prefect's tasks (``flows/steps.py``), unit tests give fakes; the procedures
(:mod:`alflow.methods.m1`, :mod:`alflow.methods.m2`) only call these.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar

import polars as pl

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
from alflow.results.manifest import ServerProvenance
from alflow.results.store import RunWriter
from alflow.results.summaries import StoredSummary


class RunningServer(Protocol):
    """What M2 reads of a started server's handle (``infra.runners.ServerHandle`` is one)."""

    @property
    def provenance(self) -> ServerProvenance: ...

    @property
    def all_metrics_urls(self) -> Sequence[str]: ...

    def to_dict(self) -> dict[str, Any]: ...


H = TypeVar("H", bound=RunningServer)


class Steps(Protocol[H]):
    """The side effects of a method's run (the flows' Prefect tasks, or a test's fakes)."""

    def server_lifetime(self, server: ServerConfig, placement: ServerPlacement) -> AbstractContextManager[H]:
        """Start the server, yield its handle when ready, stop it on leaving (also on error)."""
        ...

    def wait_ready(self, handle: H, runner: RunnerOptions) -> object:
        """Raise when the server is no longer healthy."""
        ...

    def preflight(
        self,
        handle: H,
        server: ServerConfig,
        k: int,
        dist: AcceptanceDistribution | None,
        *,
        subject: str,
        timeout_s: float = 60.0,
    ) -> PreflightResult:
        """The pre-flight burst, judged against the synthetic scheme (None: real acceptance, speculation runs)."""
        ...

    def run_load(
        self,
        handle: H,
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
        """One measured point, kept partial when it aborts (its ``aborted`` set) or is stopped (:data:`PARTIAL_ATTR`)."""
        ...

    def spec_stats(self, m: Measurement, k: int, level: float | None = None) -> Measurement:
        """The point with its spec-decode statistics (``level``: the confidence of their interval; None: the default)."""
        ...

    def audit(self, stats: SpecStats, dist: AcceptanceDistribution, abs_tol: float, subject: str) -> Verdict:
        """M2: the achieved AL against the synthetic target."""
        ...

    def check_al_gate(
        self, stats: SpecStats, reference_al: float, tolerances: GateTolerances, subject: str
    ) -> Verdict:
        """M1: the achieved AL against the reference."""
        ...

    def check_accuracy_gate(
        self, handle: H, model: ModelSpec, thinking: ThinkingMode, settings: Gsm8kSettings, *, synthetic: bool
    ) -> tuple[Verdict, EvalResult]:
        """M1: GSM8K against the model's threshold."""
        ...

    def store(self, writer: RunWriter, tables: Mapping[str, pl.DataFrame], summary: StoredSummary) -> object:
        """Write the run's tables and ``summary.json``."""
        ...

    def render(self, writer: RunWriter, rows: Sequence[Mapping[str, Any]], *, key: str) -> object:
        """Write and publish the run's report."""
        ...

    def check_regression(self, writer: RunWriter, settings: RegressionSettings) -> object:
        """Judge the stored run's points against their series' history; store and tell whoever listens.

        A sweep gathers its children's verdicts. Writes ``regression.json``; never raises (a failure is a warning).
        """
        ...

    def check_reference(
        self, writer: RunWriter, previous: ReferenceTable | None, table: ReferenceTable, keys: Sequence[Key]
    ) -> object:
        """M0: the entries ``keys`` of the merged ``table`` against ``previous``; store and tell when one moved."""
        ...

    def fail(self, flow: str, message: str, payload: dict[str, Any]) -> Exception:
        """The error that fails the run (after telling whoever listens)."""
        ...

    def gate_passed(self, params: GateParams, *, run_dir: str, reference_al: float) -> None:
        """M1 passed: tell whoever listens (the M2-after-M1 trigger)."""
        ...

    def log(self, message: str) -> None:
        """Say what the run is doing."""
        ...

    def warn(self, message: str) -> None:
        """Say what the run did differently from what it was asked, or lost."""
        ...
