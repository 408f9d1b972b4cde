"""What each flow returns: typed outcomes of M0, M1, M2 and the K sweep.

A flow returns one of these (Prefect keeps it as the flow run's result); the command line prints it as
pydantic serializes it (:func:`alflow.util.rows.dump_row`), and composite flows (the sweep, the demo) read their fields, never keys of a
dict. The run directory named in each outcome holds everything measured; the outcome is its summary.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, field_serializer, model_serializer

from alflow.gates import Verdict
from alflow.methods.points import BestK
from alflow.reference.table import ReferenceEntry
from alflow.results.rows import M2Point
from alflow.util.rows import dump_row

_UNLESS_NONE: Any = Field(exclude_if=lambda value: value is None)
"""A field the stored row leaves out while it is None."""


@dataclass(frozen=True)
class M0Outcome:
    """M0: the entries the run measured and merged into the reference table."""

    run_dir: str
    reference_path: str
    entries: tuple[ReferenceEntry, ...]
    cached_points: tuple[str, ...] = ()
    """``model K=k`` of the points reused from Prefect's cache (not measured again)."""

    def rows(self) -> list[dict[str, object]]:
        """The key numbers of each entry (the table artifact): model, thinking, K, AL (4 digits), steps."""
        return [
            {
                "model": e.model,
                "thinking": e.thinking.value,
                "k": e.k,
                "al": round(e.al, 4),
                "num_drafts": e.num_drafts,
            }
            for e in self.entries
        ]

    @field_serializer("entries")
    def _entries(self, _: object) -> list[dict[str, object]]:
        return self.rows()


@dataclass(frozen=True)
class M1Outcome:
    """M1: the gates' verdicts (the flow fails instead of returning a failed outcome)."""

    run_dir: str
    passed: bool
    verdicts: tuple[Verdict, ...]


@dataclass(frozen=True)
class M2Outcome:
    """M2: one audited point per concurrency at the synthetic target, and what failed."""

    run_dir: str
    target_al: float
    scheme: str
    nodes: int
    num_gpus: int
    points: tuple[M2Point, ...]
    failures: tuple[str, ...] = ()


Step = Literal["passed", "failed"]


@dataclass(frozen=True)
class ChildRun:
    """One M1 or M2 run of a sweep's K: the flow run, the node it ran on, how it ended, its run directory.

    ``state`` is the Prefect state name of a deployment run (Completed, Failed, Crashed, Cancelled, or
    the state it was left in when its node was lost) or the subflow's state in the in-process mode.
    """

    flow: Literal["m1", "m2"]
    passed: bool
    state: str
    name: str | None = None
    flow_run_id: str | None = None
    node: str | None = None
    run_dir: str | None = None
    message: str | None = None
    cached: bool = False


@dataclass(frozen=True)
class KOutcome:
    """One K of a sweep: whether M1 passed, whether M2 ran through (None: not run), and why not.

    ``gate_run`` / ``benchmark_run``: the child runs behind those steps (None where none was made,
    e.g. M2 skipped after a failed gate).
    """

    gate: Step
    gate_message: Annotated[str | None, _UNLESS_NONE] = None
    benchmark: Annotated[Step | None, _UNLESS_NONE] = None
    benchmark_message: Annotated[str | None, _UNLESS_NONE] = None
    gate_run: Annotated[ChildRun | None, _UNLESS_NONE] = None
    benchmark_run: Annotated[ChildRun | None, _UNLESS_NONE] = None

    @property
    def failed(self) -> bool:
        """True when the gate or the benchmark failed."""
        return self.gate == "failed" or self.benchmark == "failed"

    @classmethod
    def of(cls, gate: ChildRun, benchmark: ChildRun | None) -> KOutcome:
        """The K's outcome from its child runs."""
        return cls(
            gate="passed" if gate.passed else "failed",
            gate_message=None if gate.passed else gate.message,
            benchmark=None if benchmark is None else ("passed" if benchmark.passed else "failed"),
            benchmark_message=None if benchmark is None or benchmark.passed else benchmark.message,
            gate_run=gate,
            benchmark_run=benchmark,
        )


@dataclass(frozen=True)
class SweepOutcome:
    """The sweep: each K's outcome and, per concurrency, the best K (:func:`alflow.methods.points.best_k`)."""

    per_k: Mapping[int, KOutcome]
    best_k: tuple[BestK, ...]
    points: Annotated[tuple[M2Point, ...], Field(exclude=True)] = field(default=())
    run_dir: Annotated[str | None, _UNLESS_NONE] = None

    @field_serializer("best_k")
    def _best_k(self, best_k: tuple[BestK, ...]) -> dict[int, dict[str, object]]:
        return {b.concurrency: dump_row(b) for b in best_k}


@dataclass(frozen=True)
class DemoGate:
    """One M1 run of the demo: the engine (or example framework) it gated, whether it passed, and why."""

    name: str
    passed: bool
    message: str
    outcome: M1Outcome | None = None
    """The gate's verdicts when it passed (a failed gate ends its flow run with the message instead)."""

    @model_serializer(mode="wrap")
    def _flat(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        """The gate with its outcome's keys (run directory, verdicts) beside its own."""
        row: dict[str, Any] = handler(self)
        return row | (row.pop("outcome") or {})


@dataclass(frozen=True)
class DemoBenchmark:
    """One M2 run of the demo at a synthetic target: ``target`` None is the M0 reference AL."""

    target: float | None
    outcome: Annotated[M2Outcome | None, _UNLESS_NONE] = None
    failed: Annotated[str | None, _UNLESS_NONE] = None
    """Why the run failed (then ``outcome`` is None)."""

    @field_serializer("target")
    def _target(self, target: float | None) -> float | str:
        return "reference" if target is None else target


@dataclass(frozen=True)
class DemoOutcome:
    """The demo on one engine: M0's reference, each M1 gate, each M2 run, and where the results are.

    ``engine`` is ``sim``, ``tiny`` or ``vllm``. The simulated demo gates two example frameworks (one fails by
    design) and runs one M2; the real engines gate themselves, and the real vLLM runs M2 at each target.
    """

    engine: str
    results_root: str
    reference_path: str
    m0: M0Outcome
    m1: tuple[DemoGate, ...]
    m2: tuple[DemoBenchmark, ...] = ()
    label: str | None = None
    """The label every run of a real CPU engine carries (None: the simulated demo, labelled SIMULATED)."""
    model_path: str | None = None
    """Where the real vLLM's prepared model is, and where it came from (the vLLM demo only)."""
    model_source: str | None = None

    def gate(self, name: str) -> DemoGate:
        """The M1 run named ``name``."""
        for g in self.m1:
            if g.name == name:
                return g
        raise KeyError(f"no M1 run named {name!r}: {', '.join(g.name for g in self.m1)}")
