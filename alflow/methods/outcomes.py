"""What each flow returns: typed outcomes of M0, M1, M2 and the K sweep.

A flow returns one of these (Prefect keeps it as the flow run's result); the command line prints its
:meth:`to_dict` as JSON, and composite flows (the sweep, the demo) read their fields, never keys of a
dict. The run directory named in each outcome holds everything measured; the outcome is its summary.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from alflow.gates import Verdict
from alflow.methods.points import BestK
from alflow.reference.table import ReferenceEntry
from alflow.results.rows import M2Point
from alflow.util.rows import dump_row


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

    def to_dict(self) -> dict[str, object]:
        return {**vars(self), "entries": self.rows(), "cached_points": list(self.cached_points)}


@dataclass(frozen=True)
class M1Outcome:
    """M1: the gates' verdicts (the flow fails instead of returning a failed outcome)."""

    run_dir: str
    passed: bool
    verdicts: tuple[Verdict, ...]

    def to_dict(self) -> dict[str, object]:
        return {**vars(self), "verdicts": [v.model_dump() for v in self.verdicts]}


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

    def to_dict(self) -> dict[str, object]:
        return {
            **vars(self),
            "points": [p.model_dump() for p in self.points],
            "failures": list(self.failures),
        }


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
    gate_message: str | None = None
    benchmark: Step | None = None
    benchmark_message: str | None = None
    gate_run: ChildRun | None = None
    benchmark_run: ChildRun | None = None

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

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form (messages and child runs only where there is one)."""
        optional = {
            "gate_message": self.gate_message,
            "benchmark": self.benchmark,
            "benchmark_message": self.benchmark_message,
            "gate_run": None if self.gate_run is None else dump_row(self.gate_run),
            "benchmark_run": None if self.benchmark_run is None else dump_row(self.benchmark_run),
        }
        return {"gate": self.gate} | {key: value for key, value in optional.items() if value is not None}


@dataclass(frozen=True)
class SweepOutcome:
    """The sweep: each K's outcome and, per concurrency, the best K (:func:`alflow.methods.points.best_k`)."""

    per_k: Mapping[int, KOutcome]
    best_k: tuple[BestK, ...]
    points: tuple[M2Point, ...] = field(default=())
    run_dir: str | None = None

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "per_k": {k: o.to_dict() for k, o in self.per_k.items()},
            "best_k": {b.concurrency: dump_row(b) for b in self.best_k},
        }
        if self.run_dir is not None:
            out["run_dir"] = self.run_dir
        return out


@dataclass(frozen=True)
class DemoGate:
    """One M1 run of the demo: the engine (or example framework) it gated, whether it passed, and why."""

    name: str
    passed: bool
    message: str
    outcome: M1Outcome | None = None
    """The gate's verdicts when it passed (a failed gate ends its flow run with the message instead)."""

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "passed": self.passed,
            "message": self.message,
            **(self.outcome.to_dict() if self.outcome is not None else {}),
        }


@dataclass(frozen=True)
class DemoBenchmark:
    """One M2 run of the demo at a synthetic target: ``target`` None is the M0 reference AL."""

    target: float | None
    outcome: M2Outcome | None = None
    failed: str | None = None
    """Why the run failed (then ``outcome`` is None)."""

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"target": "reference" if self.target is None else self.target}
        if self.outcome is not None:
            out["outcome"] = self.outcome.to_dict()
        if self.failed is not None:
            out["failed"] = self.failed
        return out


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

    def to_dict(self) -> dict[str, object]:
        nested = {
            "m0": self.m0.to_dict(),
            "m1": [g.to_dict() for g in self.m1],
            "m2": [b.to_dict() for b in self.m2],
        }
        return {**vars(self), **nested}
