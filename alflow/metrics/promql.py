"""Counter windows read from a Prometheus server (``alflow bench --prometheus-url``): multi-node.

:class:`PromQLWindow` is the :class:`~alflow.metrics.prometheus.CounterWindow` of a Prometheus server
that scrapes every node of a deployment, queried through ``prometheus-api-client`` for each counter
series' value in its first scrape after the warm-up (:func:`promql_start`) and in its first scrape
after the load's end. Their difference is exact: no ``increase()``, whose extrapolation to the
window's edges changes counts (by up to a scrape interval's worth of traffic at each edge).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from alflow.errors import AlflowError
from alflow.metrics.prometheus import (
    DeltaSums,
    Labels,
    ScrapeError,
    Snapshot,
    _labels,
    _matches,
    counter_deltas,
)
from alflow.util.httpread import MAX_METRICS_BYTES, bound_requests_answers
from alflow.util.redact import redact_url, redact_urls_in_text

PROMQL_SYNC_TIMEOUT_S = 120.0
"""How long a PromQL window waits for Prometheus to scrape every series after an instant (the
default ``scrape_interval`` is 1 min; Debian's configuration says 15 s)."""


def _connect(url: str, client: Any, timeout_s: float) -> Any:
    """``client``, or a ``prometheus-api-client`` connection to ``url``."""
    if client is not None:
        return client
    import requests
    from prometheus_api_client import PrometheusConnect

    session = requests.Session()
    session.verify = False  # as disable_ssl=True sets it
    bound_requests_answers(session, MAX_METRICS_BYTES, f"Prometheus at {redact_url(url)}")
    return PrometheusConnect(url=url, disable_ssl=True, timeout=timeout_s, session=session)


def _promql_selector(name: str, selector: str, suffix: str = "_total") -> str:
    """``<name>_total{selector}`` (the selector's braces optional)."""
    inner = selector.strip().strip("{}").strip()
    return f"{name}{suffix}{{{inner}}}" if inner else f"{name}{suffix}"


def _query(client: Any, url: str, promql: str, time_s: float | None = None) -> list[dict[str, Any]]:
    """An instant query (at ``time_s``, else now); a failure is a :class:`ScrapeError` naming it."""
    try:
        params = {} if time_s is None else {"time": repr(time_s)}
        result = client.custom_query(promql, params=params)
    except Exception as exc:
        why = redact_urls_in_text(str(exc))
        raise ScrapeError(f"PromQL query {promql!r} at {url} failed: {why}") from None
    if not isinstance(result, list):
        raise ScrapeError(f"PromQL query {promql!r} at {url} returned {type(result).__name__}")
    return result


def _series_values(rows: list[dict[str, Any]]) -> dict[Labels, float]:
    """An instant vector's values by label set (the metric name left out)."""
    return {
        _labels({k: v for k, v in r["metric"].items() if k != "__name__"}): float(r["value"][1]) for r in rows
    }


def _scraped_since(
    client: Any,
    url: str,
    name: str,
    selector: str,
    after_s: float,
    timeout_s: float,
    poll_s: float,
    *,
    min_series: int = 0,
) -> dict[Labels, float] | None:
    """Counter ``name``'s values once Prometheus holds a sample of every series taken at or after ``after_s``.

    Polls ``timestamp(<name>_total{selector})`` until every series' latest sample is that recent (a
    sample's timestamp is the start of its scrape, so its value was read from the server after
    ``after_s``) and there are at least ``min_series`` series; then reads the values as Prometheus holds
    them now. None when Prometheus has no series of ``name`` and ``min_series`` is 0. Waiting longer than
    ``timeout_s`` is a :class:`ScrapeError`.
    """
    sel = _promql_selector(name, selector)
    deadline = time.monotonic() + timeout_s
    while True:
        stamps = [float(r["value"][1]) for r in _query(client, url, f"timestamp({sel})")]
        if not stamps and min_series == 0:
            return None
        if len(stamps) >= min_series and min(stamps) >= after_s:
            return _series_values(_query(client, url, sel))
        if time.monotonic() >= deadline:
            oldest = f"the oldest latest sample is from {min(stamps):.3f}" if stamps else "it holds none"
            raise ScrapeError(
                f"Prometheus at {url} has not scraped all {max(min_series, len(stamps))} series of {sel} "
                f"since {after_s:.3f} within {timeout_s:g} s ({len(stamps)} series; {oldest}): is every "
                "node a target, up, matched by the selector, and scraped more often than that?"
            )
        time.sleep(poll_s)


@dataclass(frozen=True)
class PromQLStart:
    """A PromQL window's start: counter values as Prometheus held them after warm-up, before the load.

    ``values`` maps a counter name (without ``_total``) to its series' values by label set; each
    series' sample was taken at or after ``after_s`` (the warm-up's end) and was already in Prometheus
    before the measured load began, so it counts all of the warm-up and none of the measured load.
    """

    url: str
    selector: str
    after_s: float
    time_s: float
    values: Mapping[str, Mapping[Labels, float]]


def promql_start(
    url: str,
    names: Mapping[str, int],
    after_s: float,
    *,
    selector: str = "",
    client: Any = None,
    timeout_s: float = 30.0,
    sync_timeout_s: float = PROMQL_SYNC_TIMEOUT_S,
    poll_s: float = 0.2,
) -> PromQLStart:
    """Read counters ``names`` from Prometheus once it has scraped each of their series after ``after_s``.

    ``names`` maps a counter name (without ``_total``) to the fewest series Prometheus must hold of it
    (the series the server's own endpoints show: Prometheus may not have scraped a new target yet).
    Call it after warm-up and before the measured load (``alflow bench`` does, after its baseline
    scrape, with the counters that scrape found); it blocks for up to one scrape interval.
    """
    client = _connect(url, client, timeout_s)
    shown = redact_url(url)
    values: dict[str, Mapping[Labels, float]] = {}
    for name, min_series in names.items():
        got = _scraped_since(
            client, shown, name, selector, after_s, sync_timeout_s, poll_s, min_series=min_series
        )
        if got is not None:
            values[name] = got
    return PromQLStart(shown, selector, after_s, time.time(), values)


def baseline_counters(baseline: Snapshot) -> dict[str, int]:
    """Counter names (without ``_total``) of a scrape and how many series each has over its endpoints."""
    parts = baseline.parts or (baseline,)
    out: dict[str, int] = {}
    for part in parts:
        for name, series in part.samples.items():
            if name.endswith("_total"):
                key = name.removesuffix("_total")
                out[key] = out.get(key, 0) + len(series)
    return dict(sorted(out.items()))


class PromQLWindow(DeltaSums):
    """Windowed increases from a Prometheus server (multi-node: it scrapes every node).

    A counter's increase is, per series, its value in the first samples Prometheus took after the
    load's end (``end_s``: :func:`_scraped_since` waits up to ``sync_timeout_s`` for them) minus its
    value at the start, summed over the series matching the selector. The start values are ``start``'s
    (:func:`promql_start`, read after warm-up) when it holds the counter, else the latest samples at or
    before ``start_s`` (which may predate the warm-up's last requests by up to a scrape interval; a
    note says so). Counter values are whole numbers and no ``increase()`` extrapolates them: the counts
    equal those of direct scrapes at the same two instants, with no rounding. A series that went
    backwards or vanished is a :class:`CounterResetError`, as in
    :class:`~alflow.metrics.prometheus.SnapshotWindow`. Prometheus
    samples carry Prometheus' clock: across hosts, keep its clock and this one's in sync.
    """

    def __init__(
        self,
        url: str,
        start_s: float,
        end_s: float,
        *,
        selector: str = "",
        client: Any = None,
        timeout_s: float = 30.0,
        start: PromQLStart | None = None,
        sync_timeout_s: float = PROMQL_SYNC_TIMEOUT_S,
        poll_s: float = 0.2,
    ) -> None:
        if end_s <= start_s:
            raise AlflowError(f"PromQL window end {end_s} is not after its start {start_s}")
        self._client = _connect(url, client, timeout_s)
        self.url = redact_url(url)
        self.start_s = start_s
        self.end_s = end_s
        self.selector = selector
        self.start = start
        self.sync_timeout_s = sync_timeout_s
        self.poll_s = poll_s
        began = (
            "of the first scrapes after the warm-up's end"
            if start is not None
            else f"of the latest scrapes at or before {start_s:.3f} (they may count the warm-up's last requests)"
        )
        self.notes: list[str] = [
            f"from Prometheus at {self.url}: counter values {began} and of the first scrapes after the "
            f"load's end ({end_s:.3f}), differenced per series (exact counts, no extrapolation)"
        ]
        self._end: dict[str, dict[Labels, float] | None] = {}

    def _end_values(self, name: str) -> dict[Labels, float] | None:
        if name not in self._end:
            # as many series as at the start: a failed scrape marks a node's series stale for a while
            known = len(self.start.values.get(name, {})) if self.start is not None else 0
            self._end[name] = _scraped_since(
                self._client,
                self.url,
                name,
                self.selector,
                self.end_s,
                self.sync_timeout_s,
                self.poll_s,
                min_series=known,
            )
        return self._end[name]

    def _start_values(self, name: str) -> Mapping[Labels, float]:
        if self.start is not None and name in self.start.values:
            return self.start.values[name]
        if self.start is not None:
            note = f"{name} was not read after warm-up: its window starts at the latest sample before {self.start_s:.3f}"
            if note not in self.notes:
                self.notes.append(note)
        return _series_values(
            _query(self._client, self.url, _promql_selector(name, self.selector), self.start_s)
        )

    def _deltas(self, name: str, match: Mapping[str, str] | None) -> dict[Labels, float] | None:
        after = self._end_values(name)
        if after is None:
            return None
        return counter_deltas(
            name,
            {lab: v for lab, v in self._start_values(name).items() if _matches(lab, match)},
            {lab: v for lab, v in after.items() if _matches(lab, match)},
            vanished=f"from Prometheus at {self.url} inside the measured window: a node restarted or stopped being "
            "scraped",
            backwards=f" (Prometheus at {self.url}): a node restarted or its counters were reset",
        )

    def has(self, name: str) -> bool:
        """True when Prometheus holds at least one series of counter ``name``."""
        return self._end_values(name) is not None

    def gauge_series(self, name: str) -> list[tuple[float, float]]:
        """Points of ``avg(name{selector})`` over the window (range query, 15 s step or finer)."""
        step = max(1.0, min(15.0, (self.end_s - self.start_s) / 100))
        try:
            data = self._client.custom_query_range(
                f"avg({_promql_selector(name, self.selector, '')})",
                start_time=_dt(self.start_s),
                end_time=_dt(self.end_s),
                step=f"{step:g}s",
            )
        except Exception as exc:
            why = redact_urls_in_text(str(exc))
            raise ScrapeError(f"PromQL range query for {name} at {self.url} failed: {why}") from None
        return [(float(t), float(v)) for series in data for t, v in series.get("values", [])]


def _dt(ts: float) -> Any:
    import datetime as _d

    return _d.datetime.fromtimestamp(ts, tz=_d.UTC)
