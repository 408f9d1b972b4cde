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
from datetime import timedelta
from typing import Any

from prefect import flow, task
from prefect.context import TaskRunContext

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
from alflow.methods.calibration import CalibrationPoint
from alflow.methods.dry_run import Plan
from alflow.methods.m0 import (
    MeasuredPoint,
    PartialPointError,
    PointMeasurer,
    check_reference_target,
    measure_calibration_point,
    run_m0,
)
from alflow.methods.outcomes import M0Outcome
from alflow.reference.table import ReferenceTableError
from alflow_flows.common import check_outputs, dry_run_plan, label_flow_run, new_run_writer, run_id
from alflow_flows.presets import m0_params, run_name
from alflow_flows.steps import PREFECT_STEPS

__all__ = ["POINT_VERSION", "PartialPointError", "calibrate", "calibrate_point"]

POINT_VERSION = 4
"""Version of a cached point's content (2: raw baseline and final scrapes kept for the audit;
3: a typed :class:`~alflow.methods.calibration.CalibrationPoint` instead of a dict; 4: its server's provenance a
typed ``ServerProvenance``, the class at ``alflow.methods.calibration``). A point cached by another version is not
reused: its pickled shape is not this one's (Prefect hands a cached value back as it was stored)."""


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
    """Measure one (model, K) on one server for each thinking mode (:func:`measure_calibration_point`); cached.

    ``dataset_hash`` is not read here: it is part of the cache key, so new prompts mean a new point.
    """
    del dataset_hash
    return measure_calibration_point(
        PREFECT_STEPS, server, placement, model, thinking, workload, load, check_first
    )


def _measurer(params: CalibrateParams, dataset_hash: str) -> PointMeasurer:
    """The cached point task as M0's point measurer (a failed task run raises its error here)."""
    point_task = (
        # refresh_cache, not cache_policy=NO_CACHE: the task's cache_key_fn wins over a cache policy, so
        # NO_CACHE alone still handed back cached points (seen with the tiny demo)
        calibrate_point.with_options(refresh_cache=True)
        if params.cache_days <= 0
        else calibrate_point.with_options(
            cache_expiration=timedelta(days=params.cache_days), refresh_cache=params.refresh_cache
        )
    )

    def measure(server: ServerConfig, model: ModelSpec, modes: tuple[ThinkingMode, ...]) -> MeasuredPoint:
        state = point_task(
            server, params.placement, model, modes, params.workload, dataset_hash, params.load, params.preflight,
            return_state=True,
        )  # fmt: skip
        if state.is_failed():
            error = state.result(raise_on_failure=False)
            raise error if isinstance(error, BaseException) else ReferenceTableError(str(error))
        return MeasuredPoint(state.result(), cached=state.name == "Cached")

    return measure


@flow(name="m0-calibrate", flow_run_name=run_name("m0", m0_params, lambda p: str(p.server.framework)))
def calibrate(
    preset: str | None = None,
    models: list[str] | None = None,
    ks: list[int] | None = None,
    dry_run: bool = False,
    params: CalibrateParams | None = None,
) -> M0Outcome | Plan:
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
        dry_run: Print the plan (each server's command, environment with secrets by name, config
            files, release gates and knobs) to the log and an artifact, and start nothing.
        params: Advanced: the full configuration (empty: built from the preset). The fields above win
            over it.
    """
    params = m0_params(preset, models, ks, params)
    if dry_run:
        return dry_run_plan("m0", params)
    check_outputs(params)  # the results root and the reference table's folder can take the files
    target = check_reference_target(params)  # before measuring: the table on disk can take these values
    writer = new_run_writer("m0", params.placement.results_root, params, params.server)
    measure = _measurer(params, target.dataset["dataset_hash"])
    label_flow_run(f"framework:{params.server.framework}", "m0")
    with writer:
        return run_m0(params, target, writer, PREFECT_STEPS, measure, flow_run_id=run_id())
