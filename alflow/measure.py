"""One measured point: warm-up, baseline scrape, load, final scrape, client and server statistics.

This is the sequence every benchmark runs (DESIGN.md section 1), shared by ``alflow bench`` and the
flows: the baseline scrape is taken after warm-up, so warm-up traffic never enters the spec-decode
window; counters become deltas over the window (a reset is reported, not hidden); the client
metrics come from the records afterwards. A run that aborts still returns what it recorded.

Some servers' responses carry per-request speculative counts (SGLang's ``sglext.spec_tokens_details``, vLLM's
``metrics.speculative_decoding``; in the records as ``spec_verify_ct``, ``spec_accepted_drafts`` and, from
vLLM, ``spec_draft_tokens`` and the acceptance histogram ``spec_accept_hist``): whatever the dialect, when
every successful measured request has them, they are the AL source (:func:`window_stats`), exact over exactly
the measured requests (warm-up excluded), the pooled histogram is the statistics' histogram, and the counters'
AL becomes a cross-check in the note.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import aiohttp
import orjson
import polars as pl
from pydantic import ValidationError

from alflow.acceptance.stats import CI_LEVEL, SpecStats, from_counters, from_histogram
from alflow.datasets.types import Session
from alflow.errors import AlflowError
from alflow.loadgen.frames import records_frame
from alflow.loadgen.records import RequestRecord
from alflow.loadgen.runner import run_load
from alflow.loadgen.spec import LoadAbortedError, LoadResult, LoadSpec, Progress, Target
from alflow.metrics.client import (
    DEFAULT_PERCENTILES,
    SLO,
    ClientSummary,
    GpuLayout,
    check_percentiles,
    summarize,
)
from alflow.metrics.dialects import Dialect
from alflow.metrics.prometheus import (
    PeriodicScraper,
    ScrapeError,
    Snapshot,
    SnapshotWindow,
    counter_resets,
    scrape_all,
)
from alflow.metrics.readers import count_readers, get_dialect
from alflow.util.rows import dump_row, load_row

PARTIAL_ATTR = "alflow_partial_measurement"
"""Attribute set on a SIGTERM / Ctrl-C exception that stopped a load: the :class:`Measurement` so far."""


def interrupted_measurement(
    records: Sequence[RequestRecord], reason: str, *, duration_s: float, gpus: GpuLayout | None = None
) -> Measurement:
    """The requests a load recorded before the run was stopped (SIGTERM, Ctrl-C), as an aborted point."""
    frame = records_frame(records)
    client = summarize(frame, duration_s=max(duration_s, 1e-9), gpus=gpus)
    return Measurement(
        records=frame, client=client, spec_stats=None, dialect=None, aborted=reason, duration_s=duration_s
    )


@dataclass
class Measurement:
    """Everything measured at one point; plain data (no live objects).

    ``aborted`` holds the reason when the load stopped early (the records are then partial and no
    server-side window was taken); ``stats_error`` says why server-side stats are missing.
    """

    records: pl.DataFrame
    client: ClientSummary
    spec_stats: SpecStats | None
    dialect: str | None
    baseline: Snapshot | None = None
    final: Snapshot | None = None
    series: list[Snapshot] = field(default_factory=list)
    counter_resets: list[str] = field(default_factory=list)
    scrape_errors: list[str] = field(default_factory=list)
    stats_error: str | None = None
    aborted: str | None = None
    duration_s: float = 0.0
    wall_start_s: float = 0.0
    wall_end_s: float = 0.0

    @property
    def all_ok(self) -> bool:
        """True when the run was not aborted and every measured request succeeded."""
        return self.aborted is None and self.client.all_ok

    @property
    def cut_short(self) -> str | None:
        """Why the point stopped before its end, None for a whole point: the load aborted, or the server went away.

        A server that dies mid-point is seen one of two ways, by timing alone: a request that finds no server
        aborts the load (``aborted``), or the last requests were in flight, fail, and the final scrape finds no
        server (no ``final``, ``stats_error`` says why). The methods treat both as the point cut short.
        """
        if self.aborted is not None:
            return self.aborted
        if self.baseline is not None and self.final is None and self.stats_error and self.client.failed:
            return f"the server stopped answering: {self.client.failed} measured request(s) failed and {self.stats_error}"
        return None

    def spec_block(self) -> dict[str, Any]:
        """Server-side results as JSON-ready data (stats, error, resets, scrape counts)."""
        return {
            "dialect": self.dialect,
            "stats": None if self.spec_stats is None else dump_row(self.spec_stats),
            "error": self.stats_error,
            "counter_resets": list(self.counter_resets),
            "background_scrapes": len(self.series),
            "scrape_errors": self.scrape_errors[:5],
        }

    def snapshots(self) -> dict[str, Any]:
        """Baseline, final and periodic scrapes as JSON-ready data."""
        return {
            "baseline": None if self.baseline is None else dump_row(self.baseline),
            "final": None if self.final is None else dump_row(self.final),
            "series": [dump_row(s) for s in self.series],
        }

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


@dataclass(frozen=True, slots=True)
class MetaInfoTotals:
    """Per-request speculative counts summed over the successful measured requests.

    The counts are SGLang's ``sglext.spec_tokens_details`` or vLLM's ``metrics.speculative_decoding``.
    """

    requests: int
    """Successful measured (not warm-up) requests."""
    reported: int
    """Those of them whose record has both ``spec_verify_ct`` and ``spec_accepted_drafts``."""
    verify_ct: int
    """Verify steps summed over the reporting requests."""
    accepted_drafts: int
    """Accepted draft tokens summed over the reporting requests."""
    draft_tokens: int | None = None
    """Proposed draft tokens summed, when every reporting request gave them (vLLM); else None."""
    histogram: tuple[int, ...] | None = None
    """The pooled acceptance histogram (index j: steps that accepted exactly j drafts), when every reporting
    request gave one (vLLM); else None."""
    full_k_histogram: tuple[int, ...] | None = None
    """The same pooled over only the steps that carried all K drafts, when every reporting request said each
    step's draft count (vLLM ``detailed``); else None."""

    @property
    def complete(self) -> bool:
        """True when there is at least one request and every one reported both counts."""
        return self.requests > 0 and self.reported == self.requests


def pooled_histogram(histograms: Sequence[Sequence[int] | None]) -> tuple[int, ...] | None:
    """The element-wise sum of per-request acceptance histograms (shorter ones padded with 0); None if any is None."""
    if not histograms or any(h is None for h in histograms):
        return None
    width = max(len(h) for h in histograms if h is not None)
    total = [0] * width
    for h in histograms:
        assert h is not None
        for j, count in enumerate(h):
            total[j] += int(count)
    return tuple(total)


@dataclass(frozen=True, slots=True)
class RequestAcceptance:
    """Per-request acceptance over a point's measured requests, as AIPerf's per-request acceptance metrics show it.

    A request's AL is ``1 + accepted drafts / verify steps`` (its own counts); requests with no verify step are
    left out. ``histogram`` is the pooled acceptance histogram (index j: steps that accepted exactly j drafts)
    when every such request sent one.
    """

    requests: int
    """Measured successful requests with at least one verify step."""
    p10_al: float
    p50_al: float
    p90_al: float
    mean_al: float
    """The requests' ALs averaged (each request weighs the same; the point's AL weighs each step the same)."""
    histogram: tuple[int, ...] | None


def stored_acceptance(raw: object) -> RequestAcceptance | None:
    """The per-request acceptance a point stored (``scrapes.json``); None when it is not one (older runs, damage)."""
    if not isinstance(raw, Mapping):
        return None
    try:
        return load_row(RequestAcceptance, raw)
    except ValidationError:
        return None


def _reporting(records: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame | None]:
    """The successful measured requests, and those with both per-request counts (None: a frame without them)."""
    measured = records.filter(~pl.col("warmup") & pl.col("error").is_null())
    if "spec_verify_ct" not in measured.columns or "spec_accepted_drafts" not in measured.columns:
        return measured, None
    both = pl.col("spec_verify_ct").is_not_null() & pl.col("spec_accepted_drafts").is_not_null()
    return measured, measured.filter(both)


def _pooled(rows: pl.DataFrame, column: str = "spec_accept_hist") -> tuple[int, ...] | None:
    """The rows' pooled acceptance histogram in ``column`` (:func:`pooled_histogram`); None without the column."""
    hists = rows.get_column(column, default=None)
    return None if hists is None else pooled_histogram(hists.to_list())


def request_acceptance(records: pl.DataFrame) -> RequestAcceptance | None:
    """Per-request AL percentiles (p10/p50/p90, linear) and the pooled histogram; None without per-request counts."""
    _, both = _reporting(records)
    rows = None if both is None else both.filter(pl.col("spec_verify_ct") > 0)
    if rows is None or rows.height == 0:
        return None
    al = 1.0 + rows["spec_accepted_drafts"].cast(pl.Float64) / rows["spec_verify_ct"].cast(pl.Float64)

    def q(x: float) -> float:
        value = al.quantile(x, interpolation="linear")
        return float(value) if value is not None else math.nan

    return RequestAcceptance(
        rows.height, q(0.1), q(0.5), q(0.9), float(al.sum()) / rows.height, _pooled(rows)
    )


def meta_info_totals(records: pl.DataFrame) -> MetaInfoTotals:
    """Sum the records' per-request speculative counts over the successful measured requests.

    Frames stored before the columns existed (no ``spec_verify_ct`` column) count as reporting nothing.
    """
    measured, both = _reporting(records)
    if both is None:
        return MetaInfoTotals(measured.height, 0, 0, 0)
    drafts: int | None = None
    if "spec_draft_tokens" in both.columns and both.height and both["spec_draft_tokens"].null_count() == 0:
        drafts = int(both["spec_draft_tokens"].sum())
    return MetaInfoTotals(
        measured.height,
        both.height,
        int(both["spec_verify_ct"].sum()),
        int(both["spec_accepted_drafts"].sum()),
        drafts,
        _pooled(both),
        _pooled(both, "spec_full_k_hist"),
    )


PER_REQUEST_SOURCE = "per-request counts"
"""How a note names the responses' counts when the dialect does not say where its framework puts them."""


def window_stats(
    dialect: Dialect | str,
    baseline: Snapshot,
    final: Snapshot,
    series: Sequence[Snapshot] = (),
    k: int | None = None,
    *,
    level: float = CI_LEVEL,
    records: pl.DataFrame | None = None,
) -> tuple[SpecStats | None, str | None]:
    """Spec-decode statistics over the window between two scrapes (a ``level`` CI of AL), or None and the reason.

    With the point's ``records``, whatever the dialect: when every successful measured (not warm-up) request
    carries per-request counts (``spec_verify_ct`` and ``spec_accepted_drafts``: SGLang's ``sglext.spec_tokens_details``, vLLM's
    ``metrics.speculative_decoding``), the statistics come from their sums, exact over exactly the measured
    requests (``source == "per-request"``):

    - ``AL = 1 + sum(accepted drafts) / sum(verify steps)``;
    - when every one also sent its acceptance histogram (vLLM), the pooled histogram ``H[j] = sum_r h_r[j]``
      gives the per-position counts, :attr:`SpecStats.histogram` ``{j + 1: H[j]}`` (accept length -> steps, what
      :func:`alflow.gates.audit_synthetic` tests the scheme's shape on) and a ``histogram-iid`` CI
      (:func:`~alflow.acceptance.stats.from_histogram`); else the CI is the variance bound.

    The note reads "exact, from the <source> of N requests; counters: AL x (per-request minus counters: d)",
    where <source> is ``Dialect.request_counts`` (``sglext.spec_tokens_details``, ``metrics.speculative_decoding``) or "per-request
    counts" for a dialect that names none. When only some requests carry counts, the counters stay the source and
    the note (or the error, when the counters failed) says how many lacked them; when none do (an older server, the
    flag off, an older frame), the counters' result is returned unchanged. Histograms whose length is not the
    window's K + 1 or whose sums disagree with the requests' counts, or counts
    :func:`~alflow.acceptance.stats.from_counters` refuses, fall back to the counters with a note naming why.
    """
    the_dialect = get_dialect(dialect) if isinstance(dialect, str) else dialect
    counters: SpecStats | None = None
    error: str | None = None
    try:
        window = SnapshotWindow(baseline, final, series=list(series))
        counters = the_dialect.spec_stats(window, k=k, level=level)
    except AlflowError as exc:
        error = str(exc)
    if records is None:
        return counters, error
    source = getattr(the_dialect, "request_counts", None) or PER_REQUEST_SOURCE
    totals = meta_info_totals(records)
    if totals.reported == 0:
        asked = dict(getattr(the_dialect, "request_fields", None) or {})
        if asked and totals.requests:
            fields = ", ".join(
                f"{key}: {orjson.dumps(value).decode()}" for key, value in sorted(asked.items())
            )
            return _with_note(
                counters,
                error,
                f"none of the {totals.requests} measured requests carried {source} although each asked for it "
                f"({fields}): the server does not honour the field (a release without it); AL from the counters",
            )
        return counters, error  # no per-request counts (older release, flag off, older frame): the counters
    k_used = k if k is not None else None if counters is None else counters.k
    unusable = _unusable_counts(totals, k_used, source)
    if unusable is not None:
        return _with_note(counters, error, f"{unusable}: AL from the counters")
    exact_al = 1.0 + totals.accepted_drafts / totals.verify_ct if totals.verify_ct else None
    note = (
        f"exact, from the {source} of {totals.requests} requests; {_cross_check(counters, error, exact_al)}"
    )
    try:
        stats = _exact_stats(totals, k_used, level, note)
    except AlflowError as exc:
        return _with_note(counters, error, f"{source} counts rejected ({exc}): AL from the counters")
    return stats, None


def _exact_stats(totals: MetaInfoTotals, k: int | None, level: float, note: str) -> SpecStats:
    """The statistics of the per-request counts: from their pooled histogram where every request sent one."""
    hist = totals.histogram
    if hist is not None:
        stats = from_histogram(hist, draft_tokens=totals.draft_tokens, k=k, level=level, note=note)
    else:
        stats = from_counters(
            totals.verify_ct,
            totals.accepted_drafts,
            draft_tokens=totals.draft_tokens,
            k=k,
            level=level,
            note=note,
        )
    full = totals.full_k_histogram
    full_k = None if full is None or len(full) != len(hist or ()) else {j + 1: n for j, n in enumerate(full)}
    return replace(stats, source="per-request", full_k_histogram=full_k)


def _unusable_counts(totals: MetaInfoTotals, k: int | None, source: str) -> str | None:
    """Why the per-request counts cannot be a point's source (some lacked them, or their histograms are off)."""
    hist = totals.histogram
    if not totals.complete:
        return f"{totals.requests - totals.reported} of {totals.requests} measured requests lacked {source}"
    if hist is not None and k is not None and len(hist) != k + 1:
        return f"{source} histograms have {len(hist)} buckets, not K + 1 = {k + 1}"
    if hist is not None and (
        sum(hist) != totals.verify_ct or sum(j * c for j, c in enumerate(hist)) != totals.accepted_drafts
    ):
        return f"{source} histograms disagree with the requests' step and accepted-draft counts"
    return None


def _cross_check(counters: SpecStats | None, error: str | None, exact_al: float | None) -> str:
    """The counters' AL beside the exact one, for the note of per-request statistics."""
    if counters is None:
        return f"counters: unavailable ({error})"
    if counters.al is None:
        return "counters: no steps"
    if exact_al is None:
        return f"counters: AL {counters.al:.4f}"
    return f"counters: AL {counters.al:.4f} (per-request minus counters: {exact_al - counters.al:+.4f})"


def _with_note(stats: SpecStats | None, error: str | None, note: str) -> tuple[SpecStats | None, str | None]:
    """``(stats, error)`` with ``note`` added to the stats' note, or to the error when there are no stats."""
    if stats is None:
        return None, note if not error else f"{error}; {note}"
    return replace(stats, note=f"{stats.note}; {note}" if stats.note else note), error


def with_request_fields(target: Target, dialect: Dialect | None) -> Target:
    """``target`` whose requests carry the fields ``dialect`` needs for per-request counts, and its reader of them.

    SGLang's ``return_spec_tokens_details: true`` (a field the run already sets keeps its value); the counts are read
    by the dialect's reader, or by every known one when the dialect is not known (:func:`count_readers`).
    """
    target = replace(target, counts=target.counts or count_readers(dialect))
    fields = getattr(dialect, "request_fields", None) if dialect is not None else None
    if not fields:
        return target
    extra = {**fields, **target.sampling.extra_body}
    return replace(target, sampling=replace(target.sampling, extra_body=extra))


async def _open_window(
    urls: Sequence[str],
    lag: float,
    http: aiohttp.ClientSession,
    baseline: list[Snapshot],
    after_baseline: Callable[[Snapshot | None], Awaitable[None]] | None,
) -> None:
    """At the measured phase's start: the baseline scrape into ``baseline``, then ``after_baseline``.

    The scrape waits ``lag`` seconds first: a server that serves a snapshot (ATOM) catches up, idle, after warm-up.
    """
    if urls:
        await asyncio.sleep(lag)
        baseline.append(await scrape_all(urls, session=http))
    if after_baseline is not None:
        await after_baseline(baseline[0] if baseline else None)


async def _close_window(
    result: LoadResult,
    aborted: str | None,
    scraper: PeriodicScraper | None,
    urls: Sequence[str],
    baseline: list[Snapshot],
    the_dialect: Dialect | None,
    http: aiohttp.ClientSession,
    *,
    k: int | None,
    compute_stats: bool,
    percentiles: Sequence[float],
    slo: SLO | None,
    gpus: GpuLayout | None,
) -> Measurement:
    """After the load: the final scrape, the window's statistics and the client summary, as one Measurement."""
    final: Snapshot | None = None
    stats: SpecStats | None = None
    stats_error: str | None = None
    resets: list[str] = []
    series = list(scraper.snapshots) if scraper is not None else []
    lag = 0.0 if the_dialect is None else the_dialect.snapshot_lag_s
    if urls and baseline and aborted is None and the_dialect is not None:
        final, stats_error, resets = await _final_scrape(urls, http, lag, baseline[0])
    frame = records_frame(result.records)
    if final is not None and the_dialect is not None and compute_stats:
        stats, stats_error = window_stats(the_dialect, baseline[0], final, series, k, records=frame)
    duration = result.duration_s
    client = summarize(
        frame, duration_s=duration if duration > 0 else 1e-9, percentiles=percentiles, slo=slo, gpus=gpus,
        client_load=result.client_load,
    )  # fmt: skip
    return Measurement(
        records=frame,
        client=client,
        spec_stats=stats,
        dialect=None if the_dialect is None else the_dialect.name,
        baseline=baseline[0] if baseline else None,
        final=final,
        series=series,
        counter_resets=resets,
        scrape_errors=list(scraper.errors) if scraper is not None else [],
        stats_error=stats_error,
        aborted=aborted,
        duration_s=duration,
        wall_start_s=result.wall_start_s,
        wall_end_s=result.wall_end_s,
    )


async def _final_scrape(
    urls: Sequence[str], http: aiohttp.ClientSession, lag: float, baseline: Snapshot
) -> tuple[Snapshot | None, str | None, list[str]]:
    """The window's end (after ``lag`` seconds for a server that serves a snapshot), or the reason there is none."""
    try:
        await asyncio.sleep(lag)
        final = await scrape_all(urls, session=http)
    except ScrapeError as exc:
        # The server went away during the window (a crash on the first request, say): the
        # requests already measured are kept and the window is reported without an end.
        return None, f"the final metrics scrape failed, so the window has no end: {exc}", []
    return final, None, counter_resets(baseline, final)


async def _load_with_scrapes(
    load: Callable[[], Awaitable[LoadResult]],
    urls: Sequence[str],
    interval_s: float,
    http: aiohttp.ClientSession,
) -> tuple[LoadResult, str | None, PeriodicScraper | None]:
    """Run ``load()`` with background scrapes of ``urls`` (none when empty): its result, why it aborted, the scraper.

    An aborted load gives the result it had (:class:`LoadAbortedError`) and the reason; the scraper stops either way.
    """
    scraper: PeriodicScraper | None = None
    try:
        async with contextlib.AsyncExitStack() as stack:
            if urls:
                scraper = await stack.enter_async_context(PeriodicScraper(urls, interval_s, session=http))
            return await load(), None, scraper
    except LoadAbortedError as exc:
        return exc.result, str(exc), scraper


async def measure(
    sessions: Sequence[Session],
    target: Target,
    spec: LoadSpec,
    *,
    metrics_url: str | Sequence[str] | None,
    dialect: Dialect | str | None,
    k: int | None = None,
    warmup_sessions: Sequence[Session] | None = None,
    scrape_interval_s: float = 0.0,
    gpus: GpuLayout | None = None,
    slo: SLO | None = None,
    percentiles: Sequence[float] = DEFAULT_PERCENTILES,
    progress: Progress | None = None,
    sink: list[RequestRecord] | None = None,
    session: aiohttp.ClientSession | None = None,
    compute_stats: bool = True,
    after_baseline: Callable[[Snapshot | None], Awaitable[None]] | None = None,
) -> Measurement:
    """Measure one point against a running server (see the module docstring for the sequence).

    ``metrics_url`` may list several endpoints (a multi-node or data-parallel server's
    ``ServerHandle.all_metrics_urls``): every scrape reads all of them and sums their counters
    (:func:`~alflow.metrics.prometheus.scrape_all`); a reset on any one endpoint is still reported.
    ``compute_stats=False`` keeps the scrapes but leaves the spec-decode statistics to the caller
    (:func:`window_stats`), as the flows' separate ``spec_stats`` task does. ``after_baseline`` is
    awaited after warm-up and the baseline scrape (given that snapshot, or None without metrics URLs),
    before the measured load starts: ``alflow bench`` reads its Prometheus window's start there.
    """
    check_percentiles(percentiles)  # before any request: a bad percentile must not waste a run
    # a session of its own when given none, closed at the end
    async with contextlib.AsyncExitStack() as owned:
        http = session if session is not None else await owned.enter_async_context(aiohttp.ClientSession())
        # none, one, or every endpoint of a multi-endpoint server
        urls = (
            ()
            if metrics_url is None
            else (metrics_url,)
            if isinstance(metrics_url, str)
            else tuple(metrics_url)
        )
        records = sink if sink is not None else []
        baseline: list[Snapshot] = []
        the_dialect = get_dialect(dialect) if isinstance(dialect, str) else dialect
        target = with_request_fields(target, the_dialect)

        lag = 0.0 if the_dialect is None else the_dialect.snapshot_lag_s
        on_start = functools.partial(_open_window, urls, lag, http, baseline, after_baseline)
        scrapes = urls if scrape_interval_s > 0 else []
        result, aborted, scraper = await _load_with_scrapes(
            lambda: run_load(
                sessions,
                target,
                spec,
                on_measure_start=on_start,
                progress=progress,
                warmup_sessions=warmup_sessions,
                sink=records,
            ),
            scrapes,
            scrape_interval_s,
            http,
        )
        return await _close_window(
            result, aborted, scraper, urls, baseline, the_dialect, http,
            k=k, compute_stats=compute_stats, percentiles=percentiles, slo=slo, gpus=gpus,
        )  # fmt: skip
