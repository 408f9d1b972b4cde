"""M0: calibration. Reference AL for models x thinking modes x K on SPEED-Bench coding, synthetic off.

One server per (model, K); thinking is toggled per request through the chat template. Each (model,
K) point is a cached task: its key covers everything that decides the measurement (server
configuration and image, model and revision, K, thinking modes and their sampling, the prompt
file's hash, the load), it expires after ``cache_days``, and ``refresh_cache`` measures again. The
flow merges the points into the reference table (under its lock file: re-read, merge, atomic
replace, so concurrent M0 runs keep each other's entries) and reports the diff against what the
table held just before.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import polars as pl
from prefect import flow, get_run_logger, tags, task
from prefect.context import TaskRunContext

from alflow.calibration import (
    CalibrationPoint,
    EntryContext,
    ModePoint,
    m0_variant,
    mode_point,
    reference_entry,
)
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
from alflow.outcomes import M0Outcome
from alflow.reference import (
    ReferenceDiff,
    ReferenceEntry,
    ReferenceTable,
    ReferenceTableError,
    diff_tables,
    load_reference,
    update_reference,
)
from alflow.reports.markdown import M0Row, M0Summary
from alflow.results.audit import SCRAPES, scrape_key
from alflow.results.manifest import ServerRecord
from alflow.results.provenance import code_version, host_info
from alflow.results.store import RunWriter
from alflow.workloads import (
    al_workload_sessions,
    dataset_description,
    reference_table_keys,
    workload_category,
)
from flows.common import check_outputs, open_run, point_server, run_id
from flows.presets import m0_params, run_name
from tasks.measure import request_sampling, run_load, spec_stats
from tasks.preflight import preflight, require_preflight
from tasks.results import render_report, store_results
from tasks.servers import server_lifetime


class PartialPointError(ReferenceTableError):
    """A calibration point aborted mid-way (the server died or stalled): what it measured comes along.

    ``records`` are the requests measured before the abort, ``scrapes`` the raw scrapes per thinking
    mode (the aborted mode's final scrape when one was taken); the flow stores both in its run and
    marks the point partial. Picklable, so Prefect can keep it as the task's failed result.
    """

    def __init__(self, message: str, records: pl.DataFrame, scrapes: dict[str, Any]) -> None:
        super().__init__(message)
        self.records = records
        self.scrapes = scrapes

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.records, self.scrapes))


POINT_VERSION = 3
"""Version of a cached point's content (2: raw baseline and final scrapes kept for the audit;
3: a typed :class:`~alflow.calibration.CalibrationPoint` instead of a dict)."""


def _point_key(_context: TaskRunContext, parameters: dict[str, Any]) -> str:
    """Cache key of a calibration point: a hash of everything that decides its measurement."""
    server: ServerConfig = parameters["server"]
    model: ModelSpec = parameters["model"]
    basis = {
        "server": server.model_dump(mode="json", exclude={"port", "host", "readiness_timeout_s"}),
        "model": model.model_dump(mode="json"),
        "thinking": [t.value for t in parameters["thinking"]],
        "workload": parameters["workload"].model_dump(mode="json"),
        "dataset_hash": parameters["dataset_hash"],
        "load": parameters["load"].model_dump(mode="json"),
    }
    text = json.dumps(basis, sort_keys=True)
    return f"alflow-m0-v{POINT_VERSION}-" + hashlib.sha256(text.encode()).hexdigest()[:32]


@task(name="calibrate_point", cache_key_fn=_point_key, persist_result=True)
def calibrate_point(
    server: ServerConfig,
    placement: ServerPlacement,
    model: ModelSpec,
    thinking: tuple[ThinkingMode, ...],
    workload: SpeedBenchWorkload | LiteratureWorkload,
    dataset_hash: str,
    load: LoadConfig,
    check_first: bool = True,
) -> CalibrationPoint:
    """Measure one (model, K) on one server for each thinking mode; plain data, safe to cache.

    ``dataset_hash`` is not read here: it is part of the cache key, so new prompts mean a new point.
    ``check_first``: a pre-flight burst proves speculation runs with this K before the measurement.
    """
    del dataset_hash
    sessions = al_workload_sessions(workload)
    spec = server.speculative
    assert spec is not None
    modes: dict[str, ModePoint] = {}
    with server_lifetime(server, placement) as handle:
        record = ServerRecord.model_validate(handle.to_dict())
        if check_first:
            require_preflight(preflight(handle, server, spec.k, None, subject=f"{model.id} K={spec.k}"))
        for mode in thinking:
            point_load = LoadConfig.model_validate(
                {**load.model_dump(), "num_prompts": load.num_prompts or len(sessions)}
            )
            sampling = request_sampling(model, mode, max_tokens=workload.max_tokens)
            m = run_load(
                handle,
                sessions,
                point_load,
                sampling,
                k=spec.k,
                progress_key=f"m0-k{spec.k}-{mode.value}",
                keep_partial=True,
            )
            m = spec_stats(m, spec.k)
            if m.aborted is not None:
                scrapes: dict[str, Any] = {name: done.scrapes() for name, done in modes.items()}
                scrapes[mode.value] = {"dialect": m.dialect, **m.snapshots(), "partial": True}
                raise PartialPointError(
                    f"{model.id} K={spec.k} thinking={mode.value}: the point aborted mid-way ({m.aborted}); "
                    f"its {m.records.height} requests are kept and the point is marked partial",
                    m.records.with_columns(pl.lit(spec.k).alias("k"), pl.lit(mode.value).alias("thinking")),
                    scrapes,
                )
            modes[mode.value] = mode_point(
                m, prompts=len(sessions), subject=f"{model.id} K={spec.k} thinking={mode.value}"
            )
    return CalibrationPoint(measured_at=datetime.now(UTC), server=record, modes=modes)


@flow(name="m0-calibrate", flow_run_name=run_name("m0", m0_params, lambda p: str(p.server.framework)))
def calibrate(
    preset: str | None = None,
    models: list[str] | None = None,
    ks: list[int] | None = None,
    params: CalibrateParams | None = None,
) -> M0Outcome:
    """M0: measure reference AL for every (model, thinking, K) and update the reference table.

    Give a preset (and change what you need below it), or the full configuration as params.

    Args:
        preset: Server preset by name: presets/NAME.yaml in the project (sim, vllm-h200, ...) or a Prefect
            Variable alflow-preset-NAME. It brings the server, where it runs, the model, the reference
            table to write and this run's defaults. Given with params, it replaces their server and
            placement.
        models: Model ids to calibrate, e.g. [Qwen/Qwen3-Next-80B-A3B-Instruct]; a new id takes the
            preset's model settings (empty: the preset's model).
        ks: Numbers of speculative tokens K to calibrate, e.g. [1, 2, 3] (empty: the preset's).
        params: Advanced: the full configuration (empty: built from the preset). The fields above win
            over it.
    """
    params = m0_params(preset, models, ks, params)
    log = get_run_logger()
    dataset = dataset_description(params.workload)
    simulated = params.server.simulated
    kind: Literal["simulated", "measured"] = "simulated" if simulated else "measured"
    check_outputs(params)  # the results root and the reference table's folder can take the files
    path = Path(params.reference_path)
    # fail before measuring when the table on disk cannot take these values; the merge below reads
    # it again under the table's lock (another run may have written it in the meantime)
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
    writer = open_run(
        "m0",
        params.placement.results_root,
        params.model_dump(mode="json"),
        simulated=simulated,
        engine_note=params.server.engine_note,
    )
    entries: list[ReferenceEntry] = []
    cached_points: list[str] = []
    scrapes: dict[str, Any] = {}
    point_task = (
        # refresh_cache, not cache_policy=NO_CACHE: the task's cache_key_fn wins over a cache policy, so
        # NO_CACHE alone still handed back cached points (seen with the tiny demo)
        calibrate_point.with_options(refresh_cache=True)
        if params.cache_days <= 0
        else calibrate_point.with_options(
            cache_expiration=timedelta(days=params.cache_days), refresh_cache=params.refresh_cache
        )
    )
    failures: list[str] = []
    partial_records: list[pl.DataFrame] = []
    crashed: Exception | None = None
    context = EntryContext(
        method=params.method,
        framework=params.server.framework,
        dataset=dataset["dataset"],
        dataset_hash=dataset["dataset_hash"],
        code_version=code_version(),
        flow_run_id=run_id(),
        host=None if (host := host_info().get("host")) is None else str(host),
        variant=m0_variant(params),
    )
    with writer, tags(f"framework:{params.server.framework}", "m0"):
        writer.update_provenance(dataset=dataset)
        try:
            for model in params.models:
                modes = tuple(m for m in params.thinking if model.reasoning or m is ThinkingMode.OFF)
                if not modes:
                    log.warning("%s is not a reasoning model: measured with thinking off only", model.id)
                    modes = (ThinkingMode.OFF,)
                for k in params.ks:
                    server = point_server(
                        params.server, model.id, params.method, k, draft_model=params.draft_model
                    )
                    state = point_task(
                        server,
                        params.placement,
                        model,
                        modes,
                        params.workload,
                        dataset["dataset_hash"],
                        params.load,
                        params.preflight,
                        return_state=True,
                    )
                    if state.is_failed():
                        error = state.result(raise_on_failure=False)
                        if isinstance(error, PartialPointError):
                            partial_records.append(error.records)
                            for mode_name, raw in error.scrapes.items():
                                scrapes[scrape_key(model.id, params.method.value, mode_name, k)] = {
                                    "k": k,
                                    **raw,
                                }
                        raise error if isinstance(error, BaseException) else ReferenceTableError(str(error))
                    point = state.result()
                    label = f"{model.id} K={k}"
                    if state.name == "Cached":
                        cached_points.append(label)
                        log.info(
                            "calibration point %s reused from cache (measured %s)",
                            label,
                            point.measured_at.isoformat(),
                        )
                    for mode in modes:
                        entries.append(reference_entry(point, model, k, mode, context))
                        key = scrape_key(model.id, params.method.value, mode.value, k)
                        scrapes[key] = {"k": k, **point.mode(mode).scrapes()}
        # what was measured is stored below (not in the reference table), then raised
        except Exception as exc:
            crashed = exc
            if not entries and not partial_records:
                raise
            failures.append(str(exc))
        if crashed is not None:
            # a failed calibration never changes the reference table: its points are stored in the run only
            summary = _summary(path, entries, cached_points, None, failures=failures)
            tables = (
                {"requests": pl.concat(partial_records, how="diagonal_relaxed")} if partial_records else {}
            )
            writer.write_json(SCRAPES, {"points": scrapes})
            store_results(writer, tables, summary)
            report = _report(writer, params, path, kind, dataset, entries, cached_points, None, failures)
            render_report(writer, report, _rows(entries), key="m0-calibration")
            raise crashed
        empty = ReferenceTable(
            kind=kind,
            dataset=table_dataset,
            category=table_category,
            description=(
                "Reference AL measured by alflow M0"
                + (" on the SIMULATED engine (not a real reference)" if simulated else "")
                + (f" ({params.server.engine_note})" if params.server.engine_note and not simulated else "")
                + f" on {dataset['dataset']} / {workload_category(params.workload)}."
            ),
            entries=(),
        )
        previous, table = update_reference(path, entries, new=empty)
        diff = diff_tables(previous, table) if previous is not None else None
        writer.write_json(SCRAPES, {"points": scrapes})
        writer.write_summary(_summary(path, entries, cached_points, diff))
        changed = None if diff is None else sum(r.status != "unchanged" for r in diff.rows)
        report = _report(writer, params, path, kind, dataset, entries, cached_points, changed, [])
        render_report(writer, report, _rows(entries), key="m0-calibration")
    return M0Outcome(
        run_dir=writer.dir,
        reference_path=str(path),
        entries=tuple(entries),
        cached_points=tuple(cached_points),
    )


def _summary(
    path: Path,
    entries: Sequence[ReferenceEntry],
    cached_points: Sequence[str],
    diff: ReferenceDiff | None,
    *,
    failures: Sequence[str] = (),
) -> dict[str, Any]:
    """summary.json of an M0 run; a failed run (``failures``) says its entries are not in the table."""
    return {
        "flow": "m0",
        "reference_path": str(path),
        "entries": [e.model_dump(mode="json", exclude_none=True) for e in entries],
        "cached_points": list(cached_points),
        "diff": None if diff is None else diff.to_dict(),
        "partial": bool(failures),
        "failures": list(failures),
        "reference_updated": not failures,
    }


def _rows(entries: Sequence[ReferenceEntry]) -> list[dict[str, object]]:
    """The key numbers of each entry (the table artifact)."""
    return M0Outcome("", "", tuple(entries)).rows()


def _report(
    writer: RunWriter,
    params: CalibrateParams,
    path: Path,
    kind: str,
    dataset: dict[str, str],
    entries: Sequence[ReferenceEntry],
    cached_points: Sequence[str],
    changed: int | None,
    failures: Sequence[str],
) -> M0Summary:
    return M0Summary(
        run_dir=writer.dir,
        engine_note=params.server.engine_note,
        reference_path=str(path),
        kind=kind,
        dataset=str(dataset["dataset"]),
        category=workload_category(params.workload),
        rows=tuple(M0Row(e.model, e.thinking.value, e.k, e.al, e.num_drafts) for e in entries),
        cached_points=tuple(cached_points),
        changed=changed,
        failures=tuple(failures),
    )
