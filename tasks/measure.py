"""Measurement steps (tasks by ``flows/steps.py``): one measured point, never retried, and its statistics."""

from __future__ import annotations

import logging
import time

from prefect import get_run_logger
from prefect.artifacts import create_progress_artifact, update_progress_artifact

from alflow.config import LoadConfig
from alflow.datasets.random_tokens import detokenize_sessions
from alflow.loadgen.client import auth_headers
from alflow.loadgen.records import RequestRecord
from alflow.loadgen.spec import LoadSpec, Target
from alflow.measure import PARTIAL_ATTR, Measurement, interrupted_measurement, measure, window_stats
from alflow.methods.steps import PointLoad
from alflow.util.eventloop import run_stoppable
from alflow_infra.runners import ServerHandle
from alflow_infra.runners.base import handle_api_key

_log = logging.getLogger(__name__)


class _ProgressArtifact:
    """Load progress as a Prefect progress artifact, updated at most every 5%."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.total: int | None = None
        self.done = 0
        self.last = -1.0
        self.artifact_id: object = None

    def start(self, total: int | None, description: str) -> None:
        self.total, self.done, self.last = total, 0, -1.0
        if description == "measured" and self.artifact_id is None:
            try:
                self.artifact_id = create_progress_artifact(
                    0.0, key=self.key, description="measured requests"
                )
            except Exception as exc:  # a progress bar must never stop a measurement
                _log.warning("progress artifact %r not published: %r", self.key, exc)

    def advance(self) -> None:
        self.done += 1
        if self.artifact_id is None or not self.total:
            return
        pct = 100.0 * self.done / self.total
        if pct - self.last >= 5.0 or self.done == self.total:
            self.last = pct
            try:
                update_progress_artifact(self.artifact_id, pct)  # type: ignore[arg-type]
            except Exception as exc:  # a progress bar must never stop a measurement
                _log.warning("progress artifact %r not updated: %r", self.key, exc)
                self.artifact_id = None


def run_load(handle: ServerHandle, point: PointLoad) -> Measurement:
    """Warm up, scrape, stream the workload, scrape again: one measured point.

    A load that aborts (the server died, stalled, or refused everything) comes back with ``aborted`` set and the
    requests recorded so far, for the method to store as a partial point; one stopped by SIGTERM or Ctrl-C
    carries what it recorded on the exception (``PARTIAL_ATTR``).

    Every scrape reads all of the server's metrics endpoints (``handle.all_metrics_urls``: several
    for a multi-node or data-parallel server) and sums their counters. ``point.gpus`` is the server's GPU
    layout for per-GPU throughput (:func:`alflow.methods.topology.gpu_layout`: every node's GPUs).
    """
    log = get_run_logger()
    recorded: list[RequestRecord] = []
    api_key = handle_api_key(handle)  # read now, never stored: /detokenize and every request carry it
    load = point.load

    async def go() -> Measurement:
        todo, warm = list(point.sessions), list(point.warmup_sessions) if point.warmup_sessions else None
        if point.endpoint == "chat" and any(not isinstance(t.prompt, str) for s in todo for t in s.turns):
            key = auth_headers(api_key)
            todo = await detokenize_sessions(todo, handle.base_url, handle.model, headers=key)
            if warm:
                warm = await detokenize_sessions(warm, handle.base_url, handle.model, headers=key)
        return await measure(
            todo,
            Target(handle.base_url, handle.model, point.endpoint, point.sampling, api_key=api_key),
            _load_spec(load),
            metrics_url=handle.all_metrics_urls,
            dialect=handle.dialect,
            k=point.k,
            warmup_sessions=warm,
            progress=_ProgressArtifact(point.progress_key),
            compute_stats=False,
            gpus=point.gpus,
            sink=recorded,
        )

    log.info(
        "streaming %d sessions at concurrency %d to %s (warm-up %d)",
        load.num_prompts or len(point.sessions),
        load.concurrency,
        handle.base_url,
        load.warmup,
    )
    started = time.monotonic()
    try:
        result = run_stoppable(go())  # a SIGTERM cancels the load, never lost in it
    except Exception:
        raise
    except BaseException as stop:  # SIGTERM or Ctrl-C: the flow stores what was answered, then stops
        partial = interrupted_measurement(
            recorded,
            f"interrupted ({type(stop).__name__})",
            duration_s=time.monotonic() - started,
            gpus=point.gpus,
        )
        setattr(stop, PARTIAL_ATTR, partial)
        log.error("the point was interrupted: %d requests recorded", partial.records.height)
        raise
    return _finished(result)


def _finished(result: Measurement) -> Measurement:
    """The measured point, logged (an aborted one as an error: the method stores it as partial)."""
    log = get_run_logger()
    if result.aborted is not None:
        log.error("the point aborted: %s (%d requests recorded)", result.aborted, result.records.height)
    c = result.client
    log.info(
        "done in %.1f s: %s completed, %s failed, output %.0f tok/s",
        result.duration_s,
        c.completed,
        c.failed,
        c.output_throughput,
    )
    return result


def _load_spec(load: LoadConfig) -> LoadSpec:
    """The load generator's spec of a flow's load configuration (text not kept: the flows store no replies)."""
    return LoadSpec(
        concurrency=load.concurrency,
        request_rate=load.request_rate,
        num_prompts=load.num_prompts,
        warmup=load.warmup,
        timeout_s=load.timeout_s,
        stall_timeout_s=load.stall_timeout_s,
        keep_text=False,
        processes=load.client_processes,
        auto_processes=load.auto_client_processes,
    )


def spec_stats(measurement: Measurement, k: int, level: float) -> Measurement:
    """Server-side spec-decode statistics of a measured point, from its baseline and final scrapes.

    Fills ``measurement.spec_stats`` (or ``stats_error``) through the server's metrics dialect, with a
    ``level`` confidence interval of AL, and returns the measurement.
    """
    log = get_run_logger()
    m = measurement
    if m.dialect is None or m.baseline is None or m.final is None:
        m.stats_error = m.stats_error or "no baseline and final scrape of the server's metrics"
    else:
        m.spec_stats, m.stats_error = window_stats(
            m.dialect, m.baseline, m.final, m.series, k, level=level, records=m.records
        )
    if m.spec_stats is not None and m.spec_stats.al is not None:
        ci = m.spec_stats.ci
        log.info(
            "AL %.4f over %d steps%s",
            m.spec_stats.al,
            m.spec_stats.num_drafts,
            "" if ci is None else f" ({ci.level:.0%} CI [{ci.low:.4f}, {ci.high:.4f}])",
        )
    elif m.stats_error:
        log.error("server-side stats unavailable: %s", m.stats_error)
    return m
