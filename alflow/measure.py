"""One measured point: warm-up, baseline scrape, load, final scrape, client and server statistics.

This is the sequence every flow runs per point (DESIGN.md section 1): the baseline scrape is taken
after warm-up, so warm-up traffic never enters the spec-decode window; counters become deltas
over the window (a reset is an error); the client metrics come from the records afterwards.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import polars as pl

from alflow.acceptance.stats import SpecStats
from alflow.datasets.types import Session
from alflow.errors import AlflowError
from alflow.loadgen.records import RequestRecord, records_frame
from alflow.loadgen.runner import LoadAbortedError, LoadResult, LoadSpec, Progress, Target, run_load
from alflow.metrics.client import GpuLayout, summarize
from alflow.metrics.dialects import get_dialect
from alflow.metrics.prometheus import PeriodicScraper, Snapshot, SnapshotWindow, counter_resets, scrape


class MeasurementError(AlflowError):
    """A point could not be measured (the load aborted, or the server's counters are unusable)."""


@dataclass
class Measurement:
    """Everything measured at one point; plain data (no live objects)."""

    records: pl.DataFrame
    client: dict[str, Any]
    spec_stats: SpecStats | None
    dialect: str | None
    baseline: Snapshot | None = None
    final: Snapshot | None = None
    series: list[Snapshot] = field(default_factory=list)
    counter_resets: list[str] = field(default_factory=list)
    duration_s: float = 0.0
    wall_start_s: float = 0.0
    wall_end_s: float = 0.0

    @property
    def all_ok(self) -> bool:
        """True when every measured request succeeded."""
        return bool(self.client.get("all_ok"))

    def metrics_frame(self) -> pl.DataFrame:
        """Scrape time series (baseline, periodic, final) as long rows: time, sample, labels, value."""
        rows: list[dict[str, Any]] = []
        snaps = [s for s in (self.baseline, *self.series, self.final) if s is not None]
        for snap in snaps:
            for name, series in snap.samples.items():
                for labels, value in series.items():
                    rows.append(
                        {
                            "wall_time_s": snap.wall_time_s,
                            "sample": name,
                            "type": snap.types.get(name.removesuffix("_total"), snap.types.get(name, "")),
                            "labels": ",".join(f"{k}={v}" for k, v in labels),
                            "value": value,
                        }
                    )
        schema = {
            "wall_time_s": pl.Float64,
            "sample": pl.String,
            "type": pl.String,
            "labels": pl.String,
            "value": pl.Float64,
        }
        return pl.DataFrame(rows, schema=schema)


async def measure(
    sessions: Sequence[Session],
    target: Target,
    spec: LoadSpec,
    *,
    metrics_url: str | None,
    dialect: str | None,
    k: int | None = None,
    warmup_sessions: Sequence[Session] | None = None,
    scrape_interval_s: float = 0.0,
    gpus: GpuLayout | None = None,
    progress: Progress | None = None,
) -> Measurement:
    """Measure one point against a running server; raises :class:`MeasurementError` when it aborts."""
    sink: list[RequestRecord] = []
    baseline: list[Snapshot] = []
    async with aiohttp.ClientSession() as http:

        async def on_measure_start() -> None:
            if metrics_url is not None:
                baseline.append(await scrape(metrics_url, session=http))

        scraper: PeriodicScraper | None = None
        try:
            async with contextlib.AsyncExitStack() as stack:
                if metrics_url is not None and scrape_interval_s > 0:
                    scraper = await stack.enter_async_context(
                        PeriodicScraper(metrics_url, scrape_interval_s, session=http)
                    )
                result: LoadResult = await run_load(
                    sessions,
                    target,
                    spec,
                    on_measure_start=on_measure_start,
                    progress=progress,
                    warmup_sessions=warmup_sessions,
                    sink=sink,
                )
        except LoadAbortedError as exc:
            raise MeasurementError(f"{exc} ({len(exc.result.records)} requests recorded)") from exc
        final = await scrape(metrics_url, session=http) if metrics_url is not None else None
    frame = records_frame(result.records)
    duration = result.duration_s
    client = summarize(frame, duration_s=duration if duration > 0 else 1e-9, gpus=gpus)
    stats: SpecStats | None = None
    resets: list[str] = []
    series = list(scraper.snapshots) if scraper is not None else []
    if final is not None and baseline and dialect is not None:
        resets = counter_resets(baseline[0], final)
        window = SnapshotWindow(baseline[0], final, series=series)
        stats = get_dialect(dialect).spec_stats(window, k=k)
    return Measurement(
        records=frame,
        client=client,
        spec_stats=stats,
        dialect=dialect,
        baseline=baseline[0] if baseline else None,
        final=final,
        series=series,
        counter_resets=resets,
        duration_s=duration,
        wall_start_s=result.wall_start_s,
        wall_end_s=result.wall_end_s,
    )
