"""What every method's procedure shares: the run skeleton, a run's engine label, a point's server and variant."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Generic, TypeVar

import polars as pl

from alflow.config import (
    BenchmarkParams,
    GateParams,
    ServerConfig,
    SpecMethod,
    SpeculativeConfig,
    SyntheticAcceptance,
    server_config,
)
from alflow.reference.table import VariantQuery, server_variant_query
from alflow.results.manifest import ServerProvenance


def engine_note_of(server: ServerConfig, provenance: ServerProvenance) -> str | None:
    """The run's engine label: the config's (simulated, tiny engine, its label) and what the launch added.

    A launch adds a note when the install changes what the numbers are (vLLM's CPU build with alflow's synthetic
    port: ``Launch.engine_note``, in the server's provenance).
    """
    notes = [n for n in (server.engine_note, provenance.engine_note) if n]
    return " ".join(notes) or None


def point_server(
    template: ServerConfig,
    model: str,
    method: SpecMethod,
    k: int,
    *,
    draft_model: str | None = None,
    synthetic: SyntheticAcceptance | None = None,
) -> ServerConfig:
    """The template with this point's model, speculative method and K, and synthetic knobs (validated)."""
    data = template.model_dump()
    carry: dict[str, object] = {}
    spec = template.speculative
    if spec is not None:
        # vLLM's sampler switches hold for every K and method
        carry = {
            "rejection_sample_method": spec.rejection_sample_method,
            "draft_sample_method": spec.draft_sample_method,
        }
        if spec.method is method:
            # the template's n-gram lookup windows hold for every K
            carry.update(prompt_lookup_min=spec.prompt_lookup_min, prompt_lookup_max=spec.prompt_lookup_max)
    point_spec = SpeculativeConfig.model_validate(
        {"method": method, "k": k, "draft_model": draft_model, **carry}
    )
    data.update(
        model=model,
        speculative=point_spec.model_dump(),
        synthetic=None if synthetic is None else synthetic.model_dump(),
    )
    return server_config(data)


def reference_variant(params: GateParams | BenchmarkParams) -> VariantQuery:
    """The drafter variant M1/M2 look up: the server's drafter and sample methods (where it sets them).

    M2 at another method's reference (``reference_method``) asks for no drafter: the server's is not that
    method's. The params' ``reference_variant`` fields, where given, take precedence.
    """
    spec = params.server.speculative
    method = getattr(params, "reference_method", None) or params.method
    query = server_variant_query(
        method,
        params.draft_model if method is params.method else None,
        spec.draft_sample_method if spec else None,
        spec.rejection_sample_method if spec else None,
    )
    if params.reference_variant is None:
        return query
    chosen = {k: v for k, v in params.reference_variant.model_dump().items() if v is not None}
    return replace(query, **chosen)


def synthetic_target(server: ServerConfig) -> float:
    """The synthetic target AL ``server`` is configured with (M2's server holds it: the one place it is kept)."""
    synthetic = server.synthetic
    if synthetic is None or synthetic.target_al is None:
        raise ValueError(f"internal: the {server.framework} server has no synthetic target AL")
    return synthetic.target_al


PointT = TypeVar("PointT")


@dataclass
class Collected(Generic[PointT]):
    """What a method's run has measured so far: all of it is stored, whatever happens next (:func:`run_skeleton`)."""

    points: list[PointT] = field(default_factory=list)
    """The run's points: M0's reference entries, M1's verdicts, M2's points."""
    frames: dict[str, list[pl.DataFrame]] = field(default_factory=dict)
    """Each table's frames, one a point (stored concatenated)."""
    failures: list[str] = field(default_factory=list)
    stopped: BaseException | None = None
    """What stopped the run: an error after something was measured, or a signal that stopped a point."""

    def add(self, table: str, frame: pl.DataFrame) -> None:
        """Keep ``frame`` for the run's table ``table``."""
        self.frames.setdefault(table, []).append(frame)

    def tables(self) -> dict[str, pl.DataFrame]:
        """The run's tables as stored: each table's frames, one after another."""
        return {
            name: pl.concat(parts, how="diagonal_relaxed") for name, parts in self.frames.items() if parts
        }

    @property
    def measured(self) -> bool:
        """Whether the run has anything to store."""
        return bool(self.points) or any(self.frames.values())


def run_skeleton(got: Collected[Any], measure: Callable[[], None], store: Callable[[], None]) -> None:
    """The skeleton of every method's run: measure into ``got``, store what it holds, then raise what stopped it.

    ``got.stopped`` is an error the measurement raised, or a signal (SIGTERM's ``TerminationSignal``, Ctrl-C): one a
    point kept (M2), or one that came between points or while the server was stopped, after the points were
    collected. An error or a signal before anything was measured is raised at once: there is nothing to store.
    """
    try:
        measure()
    except BaseException as exc:  # a signal too: what was measured before it is stored, then it goes on
        if not got.measured:
            raise
        got.stopped = exc
    try:
        store()
    except Exception as exc:  # storing failed too: the error says what stopped the run first
        if got.stopped is not None:
            raise exc from got.stopped
        raise
    if got.stopped is not None:
        raise got.stopped
