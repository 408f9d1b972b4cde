"""Regression verdicts: each M2 point against its series' recent history, and reference entries that moved.

**The series.** A point's series is its (framework, image repository without tag, model, K, concurrency,
thinking mode, target AL, scheme) (:class:`alflow.results.catalog.SeriesKey`): a nightly new tag of the same image
continues the series; a run forced to another target AL is another series. Its history is the good points (run complete, point valid, not partial, not client-bound) of the last
``history_runs`` runs of that series started before this one (:meth:`alflow.results.catalog.Catalog.history`).

**The per-request values** (measured phase, successful requests, ``requests.parquet``):

- ``tpot_ms``: ``(end - first token) / (output tokens - 1)`` per request (higher is worse);
- ``tokens_per_s_per_request``: ``output tokens / e2e latency`` per request, the request's own delivered rate
  (lower is worse). At a fixed concurrency C the point's output throughput is about C x the mean of it, so
  its relative change is the throughput's; per-request values give the test its samples.

**The test**, per metric: baseline = the median of the history's requests pooled; current = the median of the
point's requests; change = current / baseline - 1. Its interval is a seeded two-level bootstrap: each of
``resamples`` resamples draws as many history runs as there are, with replacement, then each drawn run's
requests with replacement (so the run-to-run spread widens the interval, not only the requests' spread), and
the point's requests with replacement; the interval is the resampled changes' central ``confidence`` quantiles,
widened to hold the change itself where it misses it.
A Mann-Whitney p (current against the pooled history, normal approximation with ties) is stored for
information; it ignores the runs' clustering and decides nothing.

**The verdict** of a metric: ``regressed`` when its whole interval lies on the worse side of zero AND
``|change| >= threshold``; ``improved`` symmetrically; ``unchanged`` otherwise. A point is ``regressed`` when
any metric regressed, else ``improved`` when any improved, else ``unchanged``. These rules are
:func:`alflow.results.regression.metric_outcome` and :func:`~alflow.results.regression.combine`, which the reader of a
stored report applies again to refuse a verdict its numbers do not make. Before that:

- a point stopped mid-way (partial) or whose client was the bottleneck (client-bound) is ``not compared``:
  its numbers measure the stop or the client;
- a point whose AL audit failed is not compared for TPOT or throughput (both depend on the AL it realised):
  it is ``regressed`` on ``achieved_al`` when its series has at least ``min_history`` good runs (they passed
  the audit), else ``not enough history``;
- fewer than ``min_history`` usable history runs: ``not enough history``;
- a metric with an impossible value on either side (:func:`not_comparable`: below zero, above :data:`MAX_VALUE`,
  not finite) or a median of zero on either side is ``not compared``, with its reason; a point none of whose
  metrics could be compared is ``not compared`` ("not comparable: ..."), never ``unchanged``.

A run stopped or failed part-way is not judged at all (it stores no ``regression.json``).

**A reference that moved** (:func:`judge_reference`): an entry a calibration rewrote is ``moved`` when the new
and the previous confidence intervals of its AL do not overlap (when only the previous has one: the new AL is
outside it), ``unchanged`` otherwise; an entry whose previous side has no interval is ``not enough history``. This rule is
:func:`alflow.results.regression.reference_outcome`, applied to the numbers the report stores (the intervals relative to
the previous AL), so the reader of a stored report judges them again the same way.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

import polars as pl

from alflow.config.regression import RegressionSettings
from alflow.errors import AlflowError, InvalidInputError
from alflow.metrics.client import per_request
from alflow.reference.table import Key, ReferenceEntry, ReferenceTable
from alflow.results.catalog import (
    Catalog,
    CatalogEntry,
    read_entry,
)
from alflow.results.catalog_cache import default_cache_dir
from alflow.results.regression import (
    METRICS,
    REFERENCE_AL,
    THROUGHPUT,
    TPOT,
    Metric,
    MetricChange,
    Outcome,
    PointVerdict,
    RegressionParameters,
    RegressionReport,
    audit_point_outcome,
    combine,
    metric_outcome,
    reference_outcome,
)
from alflow.results.rows import M2Point
from alflow.results.series import SeriesKey, split_image
from alflow.results.store import StoredRun, open_run
from alflow.results.view import regression_report, table_or_none
from alflow.util.rows import dump_row

MIN_REQUESTS: Final = 5
"""A run (or the point) with fewer usable requests than this gives no sample."""
MIN_VALUE: Final = {m.name: m.least for m in METRICS}
"""The smallest possible per-request value of each metric above zero (:attr:`Metric.least`)."""
MAX_VALUE: Final = {m.name: m.most for m in METRICS}
"""The largest possible per-request value of each metric (:attr:`Metric.most`). A value above it, below zero or not
finite is impossible (a damaged or forged history, a clock that ran backwards): the metric is then not comparable,
never judged (a negative history TPOT was judged "improved -200 %", issue #49)."""
OUTPUT_TOKENS: Final = "output_tokens"
"""The request values' column of output tokens: not a metric, what says two points ran requests of one length."""
MAX_IMPOSSIBLE_SHARE: Final = 0.01
"""The share of a side's values of a metric that may be impossible and left out (a stamp moved by a clock step, a
burst through a buffering proxy); past it the side is damaged and the metric not compared."""
METHOD: Final = (
    "Per point, per metric (per-request TPOT, higher is worse; per-request output tokens / e2e latency, lower "
    "is worse): change = median(this run) / median(history pooled) - 1, with a seeded two-level bootstrap "
    "interval (history runs resampled, then their requests; the point's requests resampled). Regressed: the "
    "interval entirely on the worse side and |change| >= threshold; improved: the same on the better side; "
    "else unchanged. Partial or client-bound points are not compared; a point whose AL audit failed is "
    "regressed on its AL (speed not compared); fewer good history runs than min_history: not enough history; "
    "over 1 % of a metric's values impossible (below 0, absurd, not finite; fewer are left out) or its median 0 on "
    "either side: the point is not compared (not comparable, with the reason)."
)
REFERENCE_METHOD: Final = (
    "Each reference entry this calibration wrote against the same entry before it: moved when the two "
    "confidence intervals of the AL do not overlap (only the previous one known: the new AL outside it)."
)


class HistorySource(Protocol):
    """Where a series' history comes from (:class:`alflow.results.catalog.Catalog`)."""

    def history(
        self, key: SeriesKey, *, before: str, n: int, exclude_rel: str | None = None
    ) -> list[tuple[CatalogEntry, M2Point]]: ...

    def entries(self) -> tuple[CatalogEntry, ...]: ...


# --------------------------------------------------------------------------------------------
# Samples and the bootstrap


def request_values(records: pl.DataFrame) -> pl.DataFrame:
    """Per successful measured request: ``concurrency``, ``repeat``, ``tpot_ms``, ``tokens_per_s_per_request``.

    ``tokens_per_s_per_request = output_tokens / (e2el_ms / 1000)``; a request without a TPOT (one output token)
    or with a zero latency gives null there. Rows without ``concurrency`` give an empty frame.
    """
    if records.height == 0 or "concurrency" not in records.columns:
        return pl.DataFrame(schema={"concurrency": pl.Int64, "repeat": pl.Int64, TPOT.name: pl.Float64,
                                    THROUGHPUT.name: pl.Float64, OUTPUT_TOKENS: pl.Float64})  # fmt: skip
    frame = records if "repeat" in records.columns else records.with_columns(pl.lit(0).alias("repeat"))
    req = per_request(frame).filter(pl.col("ok"))
    rate = pl.when(pl.col("e2el_ms") > 0).then(pl.col("output_tokens") / (pl.col("e2el_ms") / 1000.0))
    # a first token before the request, or an end before the first token, is no measurement: NaN, which
    # not_comparable counts as impossible (a history whose first token came before its request read "improved")
    order = [c for c in ("start_ns", "first_token_ns", "end_ns") if c in frame.columns]
    out_of_order = pl.lit(False)
    for early, late in itertools.pairwise(order):  # 1 ms of slack: kernel stamps are moved to the wall clock
        out_of_order = out_of_order | (pl.col(late) < pl.col(early) - 1_000_000).fill_null(False)
    nan = pl.lit(float("nan"))
    return req.select(
        pl.col("concurrency").cast(pl.Int64),
        pl.col("repeat").fill_null(0).cast(pl.Int64),
        pl.when(out_of_order).then(nan).otherwise(pl.col("tpot_ms")).cast(pl.Float64).alias(TPOT.name),
        pl.when(out_of_order).then(nan).otherwise(rate).cast(pl.Float64).alias(THROUGHPUT.name),
        pl.col("output_tokens").cast(pl.Float64).alias(OUTPUT_TOKENS),
    )


def _boot_medians(
    runs: Sequence[pl.DataFrame], names: Sequence[str], resamples: int, rng: random.Random
) -> pl.DataFrame:
    """Per resample ``b``: the median of each column of ``names`` over the resampled requests of resampled runs.

    Each resample draws ``len(runs)`` runs with replacement, then each drawn run's rows with replacement (one
    vectorized ``sample`` per run over all the resamples that drew it).
    """
    picks: list[list[int]] = [[] for _ in runs]
    for b in range(resamples):
        for _ in runs:
            picks[rng.randrange(len(runs))].append(b)
    frames = []
    for run, drawn in zip(runs, picks, strict=True):
        if not drawn:
            continue
        n, total = run.height, run.height * len(drawn)
        idx = pl.int_range(0, n, eager=True).sample(total, with_replacement=True, seed=rng.randrange(2**32))
        group = pl.Series("b", drawn, dtype=pl.Int32).repeat_by(n).explode()
        frames.append(run.select(names)[idx].with_columns(group))
    return pl.concat(frames).group_by("b").agg(pl.col(list(names)).median())


def _median(values: pl.Series) -> float:
    """The median of a non-empty float series."""
    value = values.cast(pl.Float64).median()
    assert isinstance(value, float)
    return value


def _mann_whitney_p(current: pl.Series, pooled: pl.Series) -> float | None:
    """Two-sided Mann-Whitney p of ``current`` against ``pooled`` (normal approximation, tie-corrected)."""
    n1, n2 = current.len(), pooled.len()
    both = pl.concat([current, pooled])
    ranks = both.rank("average")
    u = float(ranks[:n1].sum()) - n1 * (n1 + 1) / 2
    ties = both.value_counts().get_column("count").cast(pl.Float64)
    n = n1 + n2
    tie_term = float((ties**3 - ties).sum()) / (n * (n - 1))
    var = n1 * n2 / 12.0 * ((n + 1) - tie_term)
    if var <= 0:
        return None
    z = (u - n1 * n2 / 2.0) / math.sqrt(var)
    return math.erfc(abs(z) / math.sqrt(2.0))


def _impossible_expr(metric: Metric) -> pl.Expr:
    """True where ``metric`` cannot be: below 0, between 0 and :data:`MIN_VALUE`, above :data:`MAX_VALUE`, not finite."""
    v = pl.col(metric.name).cast(pl.Float64)
    least, bound = MIN_VALUE[metric.name], MAX_VALUE[metric.name]
    return v.is_nan() | v.is_infinite() | (v < 0) | (v > bound) | ((v > 0) & (v < least))


def _impossible(values: pl.Series, metric: Metric) -> pl.Series:
    """Which of ``values`` (of ``metric``) cannot be (:func:`_impossible_expr`)."""
    return values.alias(metric.name).to_frame().select(_impossible_expr(metric)).to_series()


def not_comparable(metric: Metric, mine: pl.Series, pooled: pl.Series) -> str | None:
    """Why ``metric`` cannot be compared between this point's values and the history's (None: it can).

    More than :data:`MAX_IMPOSSIBLE_SHARE` of a side's values impossible (:func:`_impossible`: a damaged or forged
    side; fewer are glitches, left out), or a median of zero on a side (a change relative to zero has no scale: every
    simulated run at time scale 0 has TPOT 0).
    """
    for side, values in (("this point", mine), ("the history", pooled)):
        impossible = _impossible(values, metric)
        bad = int(impossible.sum())
        if bad > MAX_IMPOSSIBLE_SHARE * values.len():
            return (
                f"{metric.name}: {bad} of {values.len()} values impossible in {side} (below 0, between 0 and "
                f"{MIN_VALUE[metric.name]:g}, above {MAX_VALUE[metric.name]:,.0f}, not finite, or stamps out of order)"
            )
        if _median(values.filter(~impossible).cast(pl.Float64)) == 0:
            return f"{metric.name}: the median of {side} is 0, so a relative change has no scale"
    return None


def _sane(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with each metric's impossible values as nulls (a few glitches left out of the medians)."""
    return frame.with_columns(
        pl.when(_impossible_expr(m)).then(None).otherwise(pl.col(m.name)).alias(m.name) for m in METRICS
    )


def compare_metrics(
    current: pl.DataFrame, history: Sequence[pl.DataFrame], settings: RegressionSettings
) -> list[MetricChange]:
    """Each metric of :data:`METRICS` that both sides can give: medians, change, bootstrap interval, verdict.

    ``current`` and every frame of ``history`` hold the metrics' columns (:func:`request_values`). One bootstrap
    resamples whole requests for every metric at once (medians skip a request's null values, and its impossible
    ones); a side with fewer than :data:`MIN_REQUESTS` values of a metric leaves that metric out.
    """
    names = [m.name for m in METRICS]
    some = pl.any_horizontal(pl.col(names).is_not_null())
    cur = current.select(names).filter(some)
    runs = [r for r in (h.select(names).filter(some) for h in history) if r.height >= MIN_REQUESTS]
    if cur.height < MIN_REQUESTS or not runs:
        return []
    rng = random.Random(settings.seed)
    changes = _boot_medians([_sane(cur)], names, settings.resamples, rng).join(
        _boot_medians([_sane(r) for r in runs], names, settings.resamples, rng), on="b", suffix="_base"
    )
    tail = (1.0 - settings.confidence) / 2.0
    out: list[MetricChange] = []
    for metric in METRICS:
        mine = cur.get_column(metric.name).drop_nulls()
        pooled = pl.concat([r.get_column(metric.name) for r in runs]).drop_nulls()
        if mine.len() < MIN_REQUESTS or pooled.len() < MIN_REQUESTS:
            continue
        why = not_comparable(metric, mine, pooled)
        boot = (
            changes.select(pl.col(metric.name) / pl.col(f"{metric.name}_base") - 1.0).to_series().drop_nulls()
        )
        low, high = (float(boot.quantile(q, interpolation="linear") or 0.0) for q in (tail, 1.0 - tail))
        if why is None and not (math.isfinite(low) and math.isfinite(high)):  # resampled history medians of 0
            why = f"{metric.name}: the history's resampled median is 0 in some draws, so the interval has no bound"
        if why is not None:
            out.append(MetricChange(metric=metric.name, current=None, baseline=None, change=None,
                                    outcome="not compared", note=why))  # fmt: skip
            continue
        mine, pooled = mine.filter(~_impossible(mine, metric)), pooled.filter(~_impossible(pooled, metric))
        baseline, median = _median(pooled), _median(mine)
        change = median / baseline - 1.0 if baseline else 0.0
        # a percentile interval can miss its own estimate (lopsided resamples): widened to hold it, as stored reports
        # are read (a stored change outside its interval is refused, round 15)
        low, high = min(low, change), max(high, change)
        out.append(
            MetricChange(
                metric=metric.name,
                current=median,
                baseline=baseline,
                change=change,
                low=low,
                high=high,
                p_value=_mann_whitney_p(mine, pooled),
                outcome=metric_outcome(
                    change, low, high, higher_is_worse=metric.higher_is_worse, threshold=settings.threshold
                ),
            )
        )
    return out


# --------------------------------------------------------------------------------------------
# One point, one run


@dataclass(frozen=True)
class HistoryRun:
    """One history run of a point's series: its rel path, its good points there and its requests at them."""

    rel: str
    points: tuple[M2Point, ...]
    values: pl.DataFrame


def _point_verdict(
    key: SeriesKey, point: M2Point, outcome: Outcome, message: str, history: Sequence[HistoryRun],
    metrics: Sequence[MetricChange] = (),
) -> PointVerdict:  # fmt: skip
    return PointVerdict(
        series=dump_row(key),
        concurrency=point.concurrency,
        k=point.k,
        repeat=point.repeat,
        outcome=outcome,
        metrics=list(metrics),
        history=[h.rel for h in history],
        message=message,
    )


def _audit_failed(
    key: SeriesKey, point: M2Point, history: Sequence[HistoryRun], settings: RegressionSettings
) -> PointVerdict:
    """A point whose AL audit failed: regressed on its AL when the series has enough good runs to say so."""
    # an AL outside [1, K+1] (a step emits at least 1 token, at most K+1) is damaged history: no baseline
    past = [
        p.achieved_al
        for h in history
        for p in h.points
        if p.achieved_al is not None and math.isfinite(p.achieved_al) and 1.0 <= p.achieved_al <= p.k + 1
    ]
    baseline = sorted(past)[len(past) // 2] if past else None
    achieved = point.achieved_al
    change = achieved / baseline - 1.0 if achieved is not None and baseline else None
    why = (
        f"the AL audit failed (achieved AL {achieved if achieved is None else round(achieved, 4)}, target "
        f"{point.target_al:.4f}: {point.audit or 'no audit text'}); TPOT and throughput are not compared, they "
        "would measure another AL"
    )
    enough = len(history) >= settings.min_history
    metric = MetricChange(metric="achieved_al", current=achieved, baseline=baseline, change=change,
                          outcome="regressed" if enough else "unchanged")  # fmt: skip
    if not enough:
        why += f"; {len(history)} good history run(s), fewer than min_history={settings.min_history}"
    else:
        why += f"; the series' last {len(history)} good runs passed it"
    return _point_verdict(key, point, audit_point_outcome(metric.outcome), why, history, [metric])


def judge_point(
    key: SeriesKey,
    point: M2Point,
    current: pl.DataFrame,
    history: Sequence[HistoryRun],
    settings: RegressionSettings,
) -> PointVerdict:
    """One point's verdict (the rules of the module docstring); ``current`` holds the point's request values."""
    if point.partial:
        return _point_verdict(key, point, "not compared", "the point stopped mid-way (partial)", history)
    if point.client_verdict == "client-bound":
        why = f"the load generator was the bottleneck ({point.client_reasons or 'client-bound'})"
        return _point_verdict(key, point, "not compared", why, history)
    if not point.valid:
        return _audit_failed(key, point, history, settings)
    # a run counts when it has requests with a value of a metric (not rows only)
    names = [m.name for m in METRICS]
    usable = [
        h
        for h in history
        if h.values.filter(pl.any_horizontal(pl.col(names).is_not_null())).height >= MIN_REQUESTS
    ]
    if len(usable) < settings.min_history:
        return _point_verdict(
            key, point, "not enough history",
            f"{len(usable)} good history run(s) with request records, fewer than min_history={settings.min_history}",
            usable,
        )  # fmt: skip
    if current.height < MIN_REQUESTS:
        why = f"the point has {current.height} successful measured request(s), fewer than {MIN_REQUESTS}"
        return _point_verdict(key, point, "not compared", why, usable)
    metrics = compare_metrics(current, [h.values for h in usable], settings)
    refused = [m.note for m in metrics if m.outcome == "not compared" and m.note] + _other_lengths(
        current, usable
    )
    judged = [m for m in metrics if m.outcome != "not compared"]
    lines = [
        f"{m.metric} {m.change:+.1%} [{m.low:+.1%}, {m.high:+.1%}]"
        for m in judged
        if m.change is not None and m.low is not None and m.high is not None
    ]
    if refused or not judged:
        # a side with an impossible value or no scale is damaged data: no verdict on the point, whatever the other
        # metrics say (a forged history judged "unchanged" on its one sane metric, issue #49); no metric: no verdict
        why = "; ".join(refused) or f"no metric has {MIN_REQUESTS} values on both sides"
        seen = f" (compared only: {'; '.join(lines)})" if lines else ""
        return _point_verdict(key, point, "not compared", f"not comparable: {why}{seen}", usable, metrics)
    outcome = combine(m.outcome for m in judged)
    message = f"{outcome} against {len(usable)} run(s): " + "; ".join(lines)
    return _point_verdict(key, point, outcome, message, usable, metrics)


MAX_LENGTH_RATIO: Final = 1.5
"""The most the median output length of a request may differ between a point and its history (either way): beyond
it the requests are of another workload, and a rate per request compares other work."""


def _other_lengths(current: pl.DataFrame, history: Sequence[HistoryRun]) -> list[str]:
    """Why the history's requests are of another length than the point's (a forged or mixed series), if they are."""

    def length(frames: Sequence[pl.DataFrame]) -> float | None:
        cols = [f[OUTPUT_TOKENS].cast(pl.Float64) for f in frames if OUTPUT_TOKENS in f.columns]
        value = pl.concat(cols).drop_nulls().median() if cols else None
        return value if isinstance(value, float) else None

    mine, theirs = length([current]), length([h.values for h in history])
    if not mine or not theirs or 1 / MAX_LENGTH_RATIO <= mine / theirs <= MAX_LENGTH_RATIO:
        return []
    return [
        f"the requests' output lengths differ: a median of {mine:g} tokens against {theirs:g} in the history"
    ]


def parameters_of(settings: RegressionSettings) -> RegressionParameters:
    """The stored parameters of a check."""
    return RegressionParameters.model_validate(settings.model_dump())  # its fields less ``enabled``


class _Values:
    """Request values of runs, each run's ``requests.parquet`` read once."""

    def __init__(self) -> None:
        self._by_dir: dict[str, pl.DataFrame] = {}

    def of(self, run: StoredRun) -> pl.DataFrame:
        if run.dir not in self._by_dir:
            records = table_or_none(run, "requests")
            try:
                values = request_values(records if records is not None else pl.DataFrame())
            # a column of the wrong type: no requests
            except (pl.exceptions.PolarsError, TypeError, ValueError):
                values = request_values(pl.DataFrame())
            self._by_dir[run.dir] = values
        return self._by_dir[run.dir]


def _history_runs(
    pairs: Sequence[tuple[CatalogEntry, M2Point]], concurrency: int, values: _Values, opener: _Opener
) -> list[HistoryRun]:
    """The history pairs grouped by run (newest first), each with its requests at the good points' repeats."""
    grouped: dict[str, tuple[CatalogEntry, list[M2Point]]] = {}
    for entry, p in pairs:
        grouped.setdefault(entry.rel, (entry, []))[1].append(p)
    out = []
    for rel, (entry, pts) in grouped.items():
        run = opener(entry.run_dir)
        frame = pl.DataFrame() if run is None else values.of(run)
        repeats = [p.repeat for p in pts]
        if frame.height:
            frame = frame.filter((pl.col("concurrency") == concurrency) & pl.col("repeat").is_in(repeats))
        out.append(HistoryRun(rel, tuple(pts), frame))
    return out


class _Opener(Protocol):
    def __call__(self, run_dir: str) -> StoredRun | None: ...


def judge_m2_run(
    run: StoredRun, rel: str, source: HistorySource, settings: RegressionSettings, opener: _Opener
) -> RegressionReport:
    """Every point of the M2 run ``run`` (at ``rel`` under its results root) against its series' history.

    ``opener`` opens a history run's directory (None when it cannot be read: that run gives no requests).
    """
    entry = read_entry(rel, run.dir)  # the catalogue's own reading of this run: the same series keys
    values = _Values()
    mine = values.of(run)
    verdicts = []
    for key, point in entry.series():
        pairs = source.history(key, before=entry.started, n=settings.history_runs, exclude_rel=rel)
        history = _history_runs(pairs, point.concurrency, values, opener)
        current = (
            mine.filter((pl.col("concurrency") == point.concurrency) & (pl.col("repeat") == point.repeat))
            if mine.height
            else mine
        )
        verdicts.append(judge_point(key, point, current, history, settings))
    return RegressionReport(
        kind="m2", method=METHOD, parameters=parameters_of(settings), points=verdicts, notes=_skipped(source)
    )


def _skipped(source: HistorySource) -> list[str]:
    """A note naming the run folders of the root that could not be read, so none of them was history."""
    unread = [e for e in source.entries() if e.status == "unreadable"]
    if not unread:
        return []
    shown = "; ".join(e.problem or e.rel for e in unread[:3])
    more = f" and {len(unread) - 3} more" if len(unread) > 3 else ""
    return [
        f"{len(unread)} run folder(s) of the results root could not be read and are no history: {shown}{more}"
    ]


# --------------------------------------------------------------------------------------------
# A sweep's children, a reference table


def gather_children(children: Sequence[tuple[str, RegressionReport | None]]) -> RegressionReport:
    """A sweep's report: its M2 children's verdicts (each point naming its child run), a note per child without."""
    points: list[PointVerdict] = []
    notes: list[str] = []
    for rel, report in children:
        if report is None:
            notes.append(f"{rel}: no regression verdicts stored")
            continue
        points += [p.model_copy(update={"run": rel}) for p in report.points]
    parameters = next((r.parameters for _, r in children if r is not None), None)
    return RegressionReport(kind="sweep", method=METHOD, parameters=parameters, points=points, notes=notes)


def _reference_series(entry: ReferenceEntry) -> dict[str, str | int]:
    prov = entry.provenance
    key = SeriesKey(
        framework=(prov.framework if prov is not None else None) or "",
        image=split_image(prov.image if prov is not None else None)[0],
        model=entry.model,
        k=entry.k,
        concurrency=entry.concurrency,
        thinking=entry.thinking.value,
    )
    return dump_row(key)


def _reference_metric(old: ReferenceEntry, new: ReferenceEntry) -> MetricChange:
    """``new``'s AL against ``old``'s, judged by :func:`~alflow.results.regression.reference_outcome` of what it stores.

    The intervals are stored relative to the previous AL (each bound / previous AL - 1), so the reader of the report
    judges the very numbers the judge did.
    """

    def rel(value: float | None) -> float | None:
        return None if value is None else value / old.al - 1.0

    change = new.al / old.al - 1.0
    low, high, new_low, new_high = rel(old.ci_low), rel(old.ci_high), rel(new.ci_low), rel(new.ci_high)
    outcome = reference_outcome(change, low, high, new_low, new_high)
    return MetricChange(
        metric=REFERENCE_AL, current=new.al, baseline=old.al, change=change, low=low, high=high,
        current_low=new_low, current_high=new_high, outcome=outcome,
    )  # fmt: skip


def _reference_why(old: ReferenceEntry, new: ReferenceEntry, outcome: Outcome) -> str:
    """Why ``new`` got ``outcome`` (see the module docstring), in the entries' own ALs."""
    if old.ci_low is None or old.ci_high is None:
        return "the previous entry has no confidence interval"
    previous = f"[{old.ci_low:.4f}, {old.ci_high:.4f}]"
    if new.ci_low is not None and new.ci_high is not None:
        text = f"[{new.ci_low:.4f}, {new.ci_high:.4f}] against {previous}"
        return f"the intervals do not overlap: {text}" if outcome == "moved" else f"overlap: {text}"
    text = f"AL {new.al:.4f} against the previous interval {previous}"
    return f"outside: {text}" if outcome == "moved" else f"inside: {text}"


def judge_reference(
    previous: ReferenceTable | None, table: ReferenceTable, keys: Iterable[Key]
) -> RegressionReport:
    """Each entry of ``keys`` in ``table`` against the same entry of ``previous`` (entries new to the table are left out)."""
    old = {e.key: e for e in previous.entries} if previous is not None else {}
    new = {e.key: e for e in table.entries}
    points = []
    for key in dict.fromkeys(keys):
        o, n = old.get(key), new.get(key)
        if o is None or n is None:
            continue
        metric = _reference_metric(o, n)
        why = _reference_why(o, n, metric.outcome)
        points.append(
            PointVerdict(
                series=_reference_series(n), concurrency=n.concurrency, k=n.k, outcome=metric.outcome,
                metrics=[metric], message=f"{n.label}: AL {o.al:.4f} -> {n.al:.4f}; {why}", reference=n.label,
            )
        )  # fmt: skip
    return RegressionReport(kind="reference", method=REFERENCE_METHOD, points=points)


# --------------------------------------------------------------------------------------------
# A stored run


def root_and_rel(run_dir: str) -> tuple[str, str]:
    """The results root of a run directory ``<root>/<flow>/<name>`` and its ``<flow>/<name>``."""
    parts = run_dir.rstrip("/").rsplit("/", 2)
    if len(parts) != 3 or not all(parts):
        raise InvalidInputError(f"run directory {run_dir!r}: expected <results root>/<flow>/<run dir name>")
    return parts[0], f"{parts[1]}/{parts[2]}"


def _open_or_none(run_dir: str) -> StoredRun | None:
    try:
        return open_run(run_dir)
    except AlflowError:
        return None


def judge_run(run: StoredRun, settings: RegressionSettings) -> RegressionReport:
    """The regression verdicts of a stored run: an M2 run against its results root's history, a sweep's children.

    A sweep gathers the verdicts its M2 children stored (``per_k.parquet``'s ``benchmark_dir``,
    :func:`gather_children`); another flow gets an empty report.
    """
    root, rel = root_and_rel(run.dir)
    if run.manifest.flow == "m2":
        return judge_m2_run(run, rel, Catalog(root, cache_dir=default_cache_dir()), settings, _open_or_none)
    if run.manifest.flow == "sweep":
        per_k = table_or_none(run, "per_k")
        dirs = (
            [] if per_k is None or "benchmark_dir" not in per_k.columns else per_k["benchmark_dir"].to_list()
        )
        children: list[tuple[str, RegressionReport | None]] = []
        for child_dir in (str(d) for d in dirs if d):
            child = _open_or_none(child_dir)
            children.append((root_and_rel(child_dir)[1], None if child is None else regression_report(child)))
        return gather_children(children)
    return RegressionReport(kind="m2", method=METHOD, parameters=parameters_of(settings))
