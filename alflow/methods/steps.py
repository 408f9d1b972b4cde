"""The side effects a method's run asks for, declared once: :class:`Steps`, a dataclass of callables.

The procedures (:mod:`alflow.methods.m0`, :mod:`~alflow.methods.m1`, :mod:`~alflow.methods.m2`, the sweep) receive
one and call only its fields. The flows give Prefect's (``flows/steps.py``: each field the orchestration layer's
function of that job, wrapped as a Prefect task of its name by one helper); a unit test gives its own callables.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

if TYPE_CHECKING:  # hints only: the steps' data types, none imported at run time
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
    """What the methods read of a started server's handle: a dataclass, stored by pydantic (``ServerHandle``)."""

    @property
    def provenance(self) -> ServerProvenance: ...

    @property
    def all_metrics_urls(self) -> Sequence[str]: ...


H = TypeVar("H", bound=RunningServer)


@dataclass(frozen=True)
class PointLoad:
    """One measured point's load as a method asks for it (the ``run_load`` step's second argument)."""

    sessions: Sequence[Session]
    load: LoadConfig
    sampling: Sampling
    k: int
    progress_key: str
    """The Prefect progress artifact's key."""
    warmup_sessions: Sequence[Session] | None = None
    gpus: GpuLayout | None = None
    """The server's GPU layout, for per-GPU throughput (:func:`alflow.methods.topology.gpu_layout`)."""
    endpoint: str = "chat"


@dataclass(frozen=True)
class Steps(Generic[H]):
    """The side effects of a method's run, one field each (the flows' Prefect tasks, or a test's callables)."""

    server_lifetime: Callable[[ServerConfig, ServerPlacement], AbstractContextManager[H]]
    """Start the server, yield its handle when ready, stop it on leaving (also on error)."""
    wait_ready: Callable[[H, RunnerOptions], object]
    """Raise when the server is no longer healthy."""
    preflight: Callable[[H, ServerConfig, int, AcceptanceDistribution | None, str, float], PreflightResult]
    """The pre-flight burst, judged: (handle, server, K, the synthetic scheme or None for real acceptance,
    subject, the timeout of a request in seconds)."""
    run_load: Callable[[H, PointLoad], Measurement]
    """One measured point, kept partial when it aborts (its ``aborted`` set) or is stopped (``PARTIAL_ATTR``)."""
    spec_stats: Callable[[Measurement, int, float], Measurement]
    """(point, K, the confidence level of its interval): the point with its spec-decode statistics."""
    audit: Callable[[SpecStats, AcceptanceDistribution, float, str], Verdict]
    """M2: the achieved AL against the synthetic target (stats, scheme, absolute tolerance, subject)."""
    check_al_gate: Callable[[SpecStats, float, GateTolerances, str], Verdict]
    """M1: the achieved AL against the reference (stats, reference AL, tolerances, subject)."""
    check_accuracy_gate: Callable[
        [H, ModelSpec, ThinkingMode, Gsm8kSettings, bool], tuple[Verdict, EvalResult]
    ]
    """M1: GSM8K against the model's threshold (the last argument: the server runs synthetic acceptance)."""
    store: Callable[[RunWriter, Mapping[str, pl.DataFrame], StoredSummary], object]
    """Write the run's tables and ``summary.json``."""
    render: Callable[[RunWriter, Sequence[Mapping[str, Any]], str], object]
    """Write and publish the run's report (writer, its key numbers, the artifact key)."""
    check_regression: Callable[[RunWriter, RegressionSettings], object]
    """Judge the stored run's points against their series' history; store and tell. Never raises."""
    check_reference: Callable[[RunWriter, ReferenceTable | None, ReferenceTable, Sequence[Key]], object]
    """M0: the entries ``keys`` of the merged table against the previous one; store and tell. Never raises."""
    fail: Callable[[str, str, dict[str, Any]], Exception]
    """The error that fails the run (flow, message, event payload), after telling whoever listens."""
    gate_passed: Callable[[GateParams, str, float], None]
    """M1 passed (params, run directory, reference AL): tell whoever listens (the M2-after-M1 trigger)."""
    log: Callable[[str], None]
    """Say what the run is doing."""
    warn: Callable[[str], None]
    """Say what the run did differently from what it was asked, or lost."""
