"""Typed rows of stored runs: what one line of a run's tables holds.

:class:`M2Point` is a pydantic model: the flows store ``model_dump()`` (one flat row: ``spec_stats.parquet``,
``summary.json``'s points) and :mod:`alflow.results.view` reads it back with ``model_validate``, so a report never
guesses a key. The client's figures are the declared ones (:data:`alflow.metrics.point_metrics.POINT_METRICS`), one
column each.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from alflow.metrics.point_metrics import POINT_METRICS, PointMetric


class M2Point(BaseModel):
    """One concurrency of an M2 run: the audit and the client's headline numbers (a row of spec_stats).

    A row stored before a field existed reads it as its default (None; ``partial`` False, ``nodes`` 1, ``repeat``
    0); columns this version does not know are ignored. A row without the identity of a point (concurrency, K,
    target AL) is refused, naming what it lacks.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    concurrency: int
    k: int
    target_al: float
    framework: str = "?"
    achieved_al: float | None = None
    valid: bool = False
    partial: bool = False
    audit: str = ""
    num_drafts: int | None = None
    expected_al: float | None = None
    allowed_deviation: float | None = None
    completed: int | None = None
    failed: int | None = None
    nodes: int = 1
    num_gpus: int | None = None
    duration_s: float = 0.0
    scheme: str | None = None
    """The synthetic scheme the audit tested against (its exact pmf at the target)."""
    al_source: str | None = None
    """Where the achieved AL's counts come from: ``per-request`` (the responses' own counts over exactly the
    measured requests) or ``counters`` (the server's metrics over the window)."""
    fit_p_value: float | None = None
    """The shape test: chi-square p of the accept-length histogram against the scheme's pmf (None: not tested)."""
    histogram_observed: tuple[int, ...] | None = None
    """Verify steps by accept length 1..K+1 (index 0 = length 1); None without a histogram."""
    histogram_expected: tuple[float, ...] | None = None
    """The scheme's expected steps by accept length at the target, same indexing."""
    repeat: int = 0
    """Which repeat of its (K, concurrency) this point is, 0-based (``BenchmarkParams.repeats``): each repeat is
    its own measurement window; rows written before repeats existed read as 0."""
    client_verdict: str | None = None
    """``client-bound`` when the load generator was the bottleneck at this point (its throughput measured the
    client, not the server), ``ok`` when not (:mod:`alflow.loadgen.timing`); None in rows written before."""
    client_reasons: str | None = None
    """Why the point is client-bound (CPU share, loop lag, streams in flight); None when it is not."""
    itl_note: str | None = None
    """Why the ITL median and percentiles are not measurable at this point (None: they are)."""
    stamp_source: str | None = None
    """``kernel`` (kernel receive stamps), ``clock``, or ``mixed``: what dated the client's reads."""
    coalesced_share: float | None = None
    """Share of output chunks that arrived in one read with another chunk of the same request."""
    client_cpu_share: float | None = None
    """The client's CPU seconds per wall second per process over the measured phase."""
    loop_lag_p99_ms: float | None = None
    """The client's event-loop lag, p99 over 10 ms probes."""
    metrics: dict[str, float | None] = Field(default_factory=dict)
    """The declared client figures by name (:data:`~alflow.metrics.point_metrics.POINT_METRICS`); stored flat,
    one column each."""

    def value(self, metric: PointMetric) -> float | None:
        """The point's figure ``metric`` (None when not measured, or stored before it was declared)."""
        return self.metrics.get(metric.name)

    @model_validator(mode="before")
    @classmethod
    def _stored_row(cls, row: Any) -> Any:
        if not isinstance(row, Mapping):
            return row
        missing = [name for name in _REQUIRED if row.get(name) is None]
        if missing:
            raise ValueError(f"an M2 point row lacks {', '.join(missing)}: {dict(row)!r:.200}")
        values = {name: v for name, v in row.items() if v is not None}  # None: the field's default
        if "metrics" not in values:  # a flat stored row: its figures' columns
            values["metrics"] = {m.name: row.get(m.name) for m in POINT_METRICS}
        return values

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        """The stored form's schema (``summary.schema.json``): each declared figure a column, no ``metrics``."""
        schema = handler(core_schema)
        fields = handler.resolve_ref_schema(schema)["properties"]
        fields.pop("metrics", None)
        for m in POINT_METRICS:
            number = {"anyOf": [{"type": "number"}, {"type": "null"}], "default": None}
            fields[m.name] = {
                **number,
                "title": m.heading,
                "description": f"{m.label} ({m.unit or 'a number'})",
            }
        return schema

    @model_serializer(mode="wrap")
    def _flat_row(self, dump: SerializerFunctionWrapHandler) -> dict[str, Any]:
        row: dict[str, Any] = dump(self)
        figures = row.pop("metrics", None) or {}
        row.update({m.name: figures.get(m.name) for m in POINT_METRICS})
        for name in ("histogram_observed", "histogram_expected"):
            if row.get(name) is not None:
                row[name] = list(row[name])
        return row


_REQUIRED: Final = ("concurrency", "k", "target_al")


@dataclass(frozen=True)
class BestK:
    """At one concurrency, the K chosen by output throughput per GPU and the K chosen by interactivity.

    Each K is chosen by :func:`alflow.methods.kchoice.choose` (vLLM's rule: median minus a MAD penalty over the
    repeats, ties within 1 % to the smaller K); the figure is the chosen K's median over its repeats.
    None where no K has a positive figure for that objective.
    """

    concurrency: int
    best_k_throughput: int | None
    output_throughput_per_gpu: float | None
    best_k_interactivity: int | None
    median_interactivity_tokens_per_s: float | None
