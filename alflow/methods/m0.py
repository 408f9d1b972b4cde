"""M0, the calibration, as a plain procedure.

For every model and K: one server, one calibration point (every thinking mode the model has), one reference
entry per mode; then the reference table is merged under its lock and the run stores what changed. A run that
fails part-way stores what it measured in the run only and never changes the table. A point is measured by
:func:`measure_calibration_point`; how it is cached and retried is the caller's (the flow's Prefect task).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol

import polars as pl

from alflow.acceptance.stats import CI_LEVEL
from alflow.config import (
    CalibrateParams,
    LoadConfig,
    ModelSpec,
    ServerConfig,
    ServerPlacement,
    SpeedBenchWorkload,
    ThinkingMode,
)
from alflow.config.workloads import LiteratureWorkload
from alflow.methods.calibration import (
    CalibrationPoint,
    EntryContext,
    ModePoint,
    mode_point,
    reference_entry,
)
from alflow.methods.common import Collected, point_server, run_skeleton
from alflow.methods.outcomes import M0Outcome
from alflow.methods.steps import H, PointLoad, Steps
from alflow.preflight import PREFLIGHT_TIMEOUT_S, PreflightError
from alflow.reference.table import (
    ReferenceDiff,
    ReferenceEntry,
    ReferenceTable,
    ReferenceTableError,
    diff_tables,
    load_reference,
    m0_variant,
    update_reference,
)
from alflow.results.audit import SCRAPES, scrape_key
from alflow.results.manifest import ServerRecord
from alflow.results.provenance import code_version, host_info
from alflow.results.store import RunWriter
from alflow.results.summaries import M0RunSummary, store_summary
from alflow.util.rows import dump_row
from alflow.workloads import (
    al_workload_sessions,
    dataset_description,
    reference_table_keys,
    request_sampling,
    workload_category,
)


class PartialPointError(ReferenceTableError):
    """A calibration point aborted mid-way (the server died or stalled): what it measured comes along.

    ``records`` are the requests measured before the abort, ``scrapes`` the raw scrapes per thinking
    mode (the aborted mode's final scrape when one was taken); the run stores both and marks the point
    partial. Picklable, so Prefect can keep it as the task's failed result.
    """

    def __init__(self, message: str, records: pl.DataFrame, scrapes: dict[str, Any]) -> None:
        super().__init__(message)
        self.records = records
        self.scrapes = scrapes

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.records, self.scrapes))


def measure_calibration_point(
    steps: Steps[H],
    server: ServerConfig,
    placement: ServerPlacement,
    model: ModelSpec,
    thinking: tuple[ThinkingMode, ...],
    workload: SpeedBenchWorkload | LiteratureWorkload,
    load: LoadConfig,
    check_first: bool = True,
) -> CalibrationPoint:
    """Measure one (model, K) on one server for each thinking mode; plain data, safe to cache.

    ``check_first``: a pre-flight burst proves speculation runs with this K before the measurement. An aborted
    mode raises :class:`PartialPointError` with what was measured.
    """
    sessions = al_workload_sessions(workload)
    spec = server.speculative
    assert spec is not None
    modes: dict[str, ModePoint] = {}
    with steps.server_lifetime(server, placement) as handle:
        record = ServerRecord.model_validate(dump_row(handle))
        if check_first:
            check = steps.preflight(
                handle, server, spec.k, None, f"{model.id} K={spec.k}", PREFLIGHT_TIMEOUT_S
            )
            if not check.passed:
                raise PreflightError(check.message)
        for mode in thinking:
            point_load = LoadConfig.model_validate(
                {**load.model_dump(), "num_prompts": load.num_prompts or len(sessions)}
            )
            sampling = request_sampling(model, mode, max_tokens=workload.max_tokens)
            m = steps.run_load(
                handle, PointLoad(sessions, point_load, sampling, spec.k, f"m0-k{spec.k}-{mode.value}")
            )
            m = steps.spec_stats(m, spec.k, CI_LEVEL)
            if m.cut_short is not None:
                scrapes: dict[str, Any] = {name: done.scrapes() for name, done in modes.items()}
                scrapes[mode.value] = {"dialect": m.dialect, **m.snapshots(), "partial": True}
                raise PartialPointError(
                    f"{model.id} K={spec.k} thinking={mode.value}: the point aborted mid-way ({m.cut_short}); "
                    f"its {m.records.height} requests are kept and the point is marked partial",
                    m.records.with_columns(pl.lit(spec.k).alias("k"), pl.lit(mode.value).alias("thinking")),
                    scrapes,
                )
            modes[mode.value] = mode_point(
                m, prompts=len(sessions), subject=f"{model.id} K={spec.k} thinking={mode.value}"
            )
    return CalibrationPoint(measured_at=datetime.now(UTC), server=record, modes=modes)


@dataclass(frozen=True)
class MeasuredPoint:
    """A calibration point and whether it came from the cache (measured by an earlier run)."""

    point: CalibrationPoint
    cached: bool


class PointMeasurer(Protocol):
    """Measure (or take from the cache) the calibration point of one model and K on ``server``."""

    def __call__(
        self, server: ServerConfig, model: ModelSpec, modes: tuple[ThinkingMode, ...]
    ) -> MeasuredPoint: ...


@dataclass(frozen=True)
class M0Target:
    """Where the run's entries go and what they are: checked before anything is measured."""

    path: Path
    kind: Literal["simulated", "measured"]
    dataset: dict[str, str]
    table_dataset: str
    table_category: str


def check_reference_target(params: CalibrateParams) -> M0Target:
    """The reference table the run writes, refused before measuring when it cannot take these values.

    The merge reads the table again under its lock (another run may have written it in the meantime).
    """
    dataset = dataset_description(params.workload)
    kind: Literal["simulated", "measured"] = "simulated" if params.server.simulated else "measured"
    path = Path(params.reference_path)
    existing = load_reference(path) if path.exists() else None
    if existing is not None and existing.kind != kind:
        raise ReferenceTableError(
            f"{path} is a {existing.kind} table; refusing to add {kind} values to it (choose another reference_path)"
        )
    table_dataset, table_category = reference_table_keys(params.workload, dataset)
    if existing is not None and (existing.dataset, existing.category) != (table_dataset, table_category):
        raise ReferenceTableError(
            f"{path} holds {existing.dataset} / {existing.category}; refusing to add {table_dataset} / "
            f"{table_category} values to it: one table per dataset (choose another reference_path)"
        )
    return M0Target(path, kind, dataset, table_dataset, table_category)


@dataclass
class _Calibrated(Collected[ReferenceEntry]):
    """The run's reference entries (its points) and a partial point's requests (:class:`Collected`), its scrapes."""

    cached_points: list[str] = field(default_factory=list)
    scrapes: dict[str, Any] = field(default_factory=dict)


def run_m0(
    params: CalibrateParams,
    target: M0Target,
    writer: RunWriter,
    steps: Steps[H],
    measure: PointMeasurer,
    *,
    flow_run_id: str,
) -> M0Outcome:
    """Calibrate every (model, K) of ``params`` into ``target``'s table; ``writer`` is the open run."""
    context = EntryContext(
        method=params.method,
        framework=params.server.framework,
        dataset=target.dataset["dataset"],
        dataset_hash=target.dataset["dataset_hash"],
        code_version=code_version(),
        flow_run_id=flow_run_id,
        host=None if (host := host_info().get("host")) is None else str(host),
        variant=m0_variant(params),
    )
    writer.update_provenance(dataset=target.dataset)
    got = _Calibrated()

    def store() -> None:
        writer.write_json(SCRAPES, {"points": got.scrapes})
        if got.stopped is not None:  # a failed calibration never changes the table: the run keeps it
            failed = m0_summary(target.path, got.points, got.cached_points, None, failures=[str(got.stopped)])
            steps.store(writer, got.tables(), failed)
        else:
            previous, table = update_reference(target.path, got.points, new=_empty_table(params, target))
            diff = diff_tables(previous, table) if previous is not None else None
            store_summary(writer, m0_summary(target.path, got.points, got.cached_points, diff))
            steps.check_reference(writer, previous, table, [e.key for e in got.points])
        steps.render(writer, M0Outcome("", "", tuple(got.points)).rows(), "m0-calibration")

    run_skeleton(got, lambda: _measure_all(params, steps, measure, context, got), store)
    return M0Outcome(
        run_dir=writer.dir,
        reference_path=str(target.path),
        entries=tuple(got.points),
        cached_points=tuple(got.cached_points),
    )


def _measure_all(
    params: CalibrateParams, steps: Steps[H], measure: PointMeasurer, context: EntryContext, got: _Calibrated
) -> None:
    for model in params.models:
        modes = tuple(m for m in params.thinking if model.reasoning or m is ThinkingMode.OFF)
        if not modes:
            steps.warn(f"{model.id} is not a reasoning model: measured with thinking off only")
            modes = (ThinkingMode.OFF,)
        for k in params.ks:
            server = point_server(params.server, model.id, params.method, k, draft_model=params.draft_model)
            try:
                measured = measure(server, model, modes)
            except PartialPointError as error:
                got.add("requests", error.records)
                for mode_name, raw in error.scrapes.items():
                    got.scrapes[scrape_key(model.id, params.method.value, mode_name, k)] = {"k": k, **raw}
                raise
            label = f"{model.id} K={k}"
            if measured.cached:
                got.cached_points.append(label)
                steps.log(
                    f"calibration point {label} reused from cache (measured {measured.point.measured_at.isoformat()})"
                )
            for mode in modes:
                got.points.append(reference_entry(measured.point, model, k, mode, context))
                key = scrape_key(model.id, params.method.value, mode.value, k)
                got.scrapes[key] = {"k": k, **measured.point.mode(mode).scrapes()}


def _empty_table(params: CalibrateParams, target: M0Target) -> ReferenceTable:
    simulated = target.kind == "simulated"
    note = params.server.engine_note
    return ReferenceTable(
        kind=target.kind,
        dataset=target.table_dataset,
        category=target.table_category,
        description=(
            "Reference AL measured by alflow M0"
            + (" on the SIMULATED engine (not a real reference)" if simulated else "")
            + (f" ({note})" if note and not simulated else "")
            + f" on {target.dataset['dataset']} / {workload_category(params.workload)}."
        ),
        entries=(),
    )


def m0_summary(
    path: Path,
    entries: Sequence[ReferenceEntry],
    cached_points: Sequence[str],
    diff: ReferenceDiff | None,
    *,
    failures: Sequence[str] = (),
) -> M0RunSummary:
    """summary.json of an M0 run; a failed run (``failures``) says its entries are not in the table."""
    return M0RunSummary(
        flow="m0",
        reference_path=str(path),
        entries=list(entries),
        cached_points=list(cached_points),
        diff=diff,
        partial=bool(failures),
        failures=list(failures),
        reference_updated=not failures,
    )
