"""One M0 calibration point, typed: what a (model, K) measured per thinking mode, and its reference entry.

The M0 flow measures a point in a Prefect task (cached, so the point is plain picklable data) and
turns each thinking mode of it into a :class:`~alflow.reference.table.ReferenceEntry` here, without Prefect:
the entry's AL, counts and CI are the server's statistics over the measured window, its provenance the
server's launch facts. The raw baseline and final scrapes are kept so the reference audit
(:mod:`alflow.results.audit`) can recompute every entry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from alflow.acceptance.runtime_k import report_line, stored_knobs
from alflow.acceptance.stats import SpecStats
from alflow.config import ModelSpec, SpecMethod, ThinkingMode
from alflow.errors import AlflowError
from alflow.measure import Measurement, RequestAcceptance, request_acceptance
from alflow.metrics.prometheus import Snapshot
from alflow.reference.table import (
    Provenance,
    ReferenceEntry,
    Variant,
)
from alflow.util.rows import dump_row

if TYPE_CHECKING:  # the manifest's record is data here; alflow.results reads calibration's rules
    from alflow.results.manifest import ServerRecord


class CalibrationError(AlflowError):
    """A calibration point that cannot become a reference entry (nothing speculative was measured)."""


def _r12(x: float) -> float:
    """Stored figures are rounded to 12 digits (as :meth:`SpecStats.to_dict`), so a table and its audit agree."""
    return round(x, 12) + 0.0


@dataclass(frozen=True)
class ModePoint:
    """One thinking mode of a calibration point: the server's statistics and the scrapes they come from."""

    stats: SpecStats
    dialect: str
    baseline: Snapshot
    final: Snapshot
    prompts: int
    """Prompts sent (the dataset's sessions)."""
    failed: int
    """Requests that failed (the statistics are the server's over the window either way)."""
    requests: RequestAcceptance | None = None
    """Per-request AL percentiles and the pooled histogram, where the responses carried per-request counts."""
    output_throughput: float | None = None
    """Output tokens per second over the measured window (the client's count; ``alflow report matrix``)."""

    def scrapes(self) -> dict[str, object]:
        """The raw window as ``scrapes.json`` keeps it for the audit, and the per-request acceptance."""
        out: dict[str, object] = {
            "dialect": self.dialect,
            "baseline": dump_row(self.baseline),
            "final": dump_row(self.final),
        }
        if self.requests is not None:
            out["per_request"] = dump_row(self.requests)
        if self.output_throughput is not None:
            out["output_throughput"] = self.output_throughput
        return out


def mode_point(m: Measurement, *, prompts: int, subject: str) -> ModePoint:
    """The mode's point from a complete measurement; :class:`CalibrationError` when no draft was verified."""
    if m.spec_stats is None or not m.spec_stats.observed:
        why = (
            m.stats_error or (m.spec_stats.note if m.spec_stats is not None else "") or "no spec-decode stats"
        )
        raise CalibrationError(f"no speculative steps measured for {subject}: {why}")
    if m.dialect is None or m.baseline is None or m.final is None:
        raise CalibrationError(f"{subject}: the measurement has no baseline and final scrape of the server")
    return ModePoint(
        m.spec_stats,
        m.dialect,
        m.baseline,
        m.final,
        prompts,
        m.client.failed,
        request_acceptance(m.records),
        output_throughput=m.client.output_throughput,
    )


@dataclass(frozen=True)
class CalibrationPoint:
    """One (model, K) on one server: each thinking mode's :class:`ModePoint`, and the server that ran them."""

    measured_at: datetime
    server: ServerRecord
    modes: Mapping[str, ModePoint]
    """By thinking mode (``ThinkingMode.value``)."""

    def mode(self, mode: ThinkingMode) -> ModePoint:
        """The point of one thinking mode; :class:`CalibrationError` naming the modes it has otherwise."""
        try:
            return self.modes[mode.value]
        except KeyError:
            raise CalibrationError(
                f"the calibration point has no thinking={mode.value} measurement (it has {sorted(self.modes)})"
            ) from None


@dataclass(frozen=True)
class EntryContext:
    """What a reference entry records beyond the measurement: the run and the data it measured."""

    method: SpecMethod
    framework: str
    """The configured framework, used where the launch did not record one."""
    dataset: str
    dataset_hash: str
    code_version: str
    flow_run_id: str | None
    host: str | None
    variant: Variant
    """The drafter variant every entry of the run is measured with (:func:`m0_variant`)."""


def reference_entry(
    point: CalibrationPoint, model: ModelSpec, k: int, mode: ThinkingMode, ctx: EntryContext
) -> ReferenceEntry:
    """The reference entry of one thinking mode of ``point``, with full provenance."""
    data = point.mode(mode)
    stats = data.stats
    if stats.al is None:
        raise CalibrationError(f"{model.id} K={k} thinking={mode.value}: no AL was measured")
    launch = point.server.provenance
    return ReferenceEntry(
        model=model.id,
        method=ctx.method,
        thinking=mode,
        k=k,
        **asdict(ctx.variant),  # draft model, sample methods, concurrency, prefix caching
        al=_r12(stats.al),
        per_position_rates=None
        if not stats.per_position_rates
        else tuple(_r12(p) for p in stats.per_position_rates),
        num_drafts=stats.num_drafts,
        draft_tokens=stats.draft_tokens,
        accepted_tokens=stats.accepted_tokens,
        ci_low=None if stats.ci is None else _r12(stats.ci.low),
        ci_high=None if stats.ci is None else _r12(stats.ci.high),
        provenance=Provenance(
            framework=launch.framework or ctx.framework,
            framework_version=launch.framework_version,
            image=point.server.image,
            image_digest=point.server.image_digest,
            command=tuple(launch.argv) or None,
            model_revision=model.revision,
            dataset=ctx.dataset,
            dataset_hash=ctx.dataset_hash,
            sampling=model.sampling(mode),
            prompt_count=data.prompts,
            date=point.measured_at,
            code_version=ctx.code_version,
            flow_run_id=ctx.flow_run_id,
            host=ctx.host,
        ),
        note=report_line(stored_knobs(launch.runtime_k)),  # runtime-varying K: recorded with the reference
    )
