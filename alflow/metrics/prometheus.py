"""Prometheus scraping: snapshots, windowed deltas with reset detection, background series.

Exposition text is parsed with ``prometheus_client.parser.text_string_to_metric_families`` (never
a regex). Samples are indexed by their sample name, so a counter is found whether the parser
groups ``<name>_total`` under the family ``<name>`` or reports it on its own; ``_created`` samples
are kept apart and never mistaken for values; e-notation values parse as floats.

Two sources of windowed increases feed the framework dialects (:mod:`alflow.metrics.dialects`)
through the :class:`CounterWindow` protocol:

- :class:`SnapshotWindow`: two snapshots of one server's ``/metrics`` (baseline after warm-up, final
  after the run); a counter that went backwards raises :class:`CounterResetError`;
  a server with several metrics endpoints (data-parallel ranks, nodes, decode workers) is scraped as
  one snapshot per endpoint, merged by :func:`merge_snapshots` (samples summed per sample name and
  label set; ``_created`` timestamps keep the latest): the window takes each endpoint's deltas on its
  own, so a reset on any one endpoint is detected even when the others' growth hides it in the sum;
- :class:`alflow.metrics.promql.PromQLWindow`: a Prometheus server that scrapes every node of a
  multi-node deployment (its own module).

:class:`PeriodicScraper` scrapes in the background during a run so windowed gauges (SGLang's
``spec_accept_length``) have a time series.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Annotated, Any, Protocol

import aiohttp
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BeforeValidator, PlainSerializer

from alflow.acceptance.stats import CounterResetError
from alflow.errors import AlflowError
from alflow.util.httpread import MAX_METRICS_BYTES, AnswerTooLargeError, read_text_bounded
from alflow.util.redact import redact_url, redact_urls_in_text

log = logging.getLogger(__name__)

Labels = tuple[tuple[str, str], ...]


class ScrapeError(AlflowError):
    """A metrics endpoint could not be read or did not answer Prometheus text.

    ``status`` is the HTTP status when the endpoint answered one other than 200 (a 5xx may pass on a
    second try; a network failure carries its cause).
    """

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class MalformedMetricsError(ScrapeError):
    """Exposition text with an impossible value: a counter (or histogram count) that is NaN, infinite or negative.

    Named as malformed, not as a counter reset or a server restart: the server's metrics are broken.
    """


def _check_count(family_type: str, sample_name: str, labels: Labels, value: float, url: str) -> None:
    """Raise :class:`MalformedMetricsError` when a counter-like sample is not a finite number >= 0."""
    counter_like = (
        (family_type == "counter" and not sample_name.endswith("_created"))
        or (family_type == "unknown" and sample_name.endswith("_total"))
        or (family_type == "histogram" and sample_name.endswith(("_bucket", "_count")))
    )
    if counter_like and not (math.isfinite(value) and value >= 0):
        shown = sample_name + ("{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}" if labels else "")
        raise MalformedMetricsError(
            f"metrics at {url or '<text>'} are malformed: {shown} = {value!r}, but a counter is a finite "
            "number >= 0 (a broken exporter, not a server restart)"
        )


def _labels(raw: Mapping[str, str]) -> Labels:
    return tuple(sorted(raw.items()))


def _dump_samples(samples: Mapping[str, Mapping[Labels, float]]) -> dict[str, list[dict[str, Any]]]:
    return {
        name: [{"labels": dict(lab), "value": v} for lab, v in series.items()]
        for name, series in samples.items()
    }


def _load_samples(data: Any) -> Any:
    """Stored samples (lists of ``{labels, value}``) by label set; samples already by label set as they are."""
    if not isinstance(data, Mapping):
        return data
    return {
        name: series
        if isinstance(series, Mapping)
        else {_labels(s["labels"]): float(s["value"]) for s in series}
        for name, series in data.items()
    }


Samples = Annotated[
    Mapping[str, Mapping[Labels, float]], BeforeValidator(_load_samples), PlainSerializer(_dump_samples)
]


def _matches(labels: Labels, match: Mapping[str, str] | None) -> bool:
    if not match:
        return True
    d = dict(labels)
    return all(d.get(k) == v for k, v in match.items())


@dataclass(frozen=True)
class Snapshot:
    """One scrape: every sample by sample name, declared family types, and when it was taken.

    Stored by pydantic (:func:`alflow.util.rows.dump_row`, ``scrapes.json``), each sample name's series as a list of
    ``{labels, value}``; :func:`alflow.util.rows.load_row` reads it back.
    """

    url: str
    wall_time_s: float
    mono_ns: int
    samples: Samples
    types: Mapping[str, str] = field(default_factory=dict)
    parts: tuple[Snapshot, ...] = ()
    """The per-endpoint snapshots this one sums (empty: a single endpoint's scrape)."""

    @property
    def urls(self) -> tuple[str, ...]:
        """Every endpoint this snapshot covers."""
        return tuple(p.url for p in self.parts) if self.parts else (self.url,)

    def has(self, name: str) -> bool:
        """True when a sample ``name``, ``name_total`` or a family ``name`` is present."""
        return name in self.samples or name + "_total" in self.samples or name in self.types

    def families(self) -> set[str]:
        """Names of every sample and declared family (for dialect detection)."""
        return set(self.samples) | set(self.types)

    def _series(self, name: str, counter: bool) -> Mapping[Labels, float] | None:
        if counter and name + "_total" in self.samples:
            return self.samples[name + "_total"]
        return self.samples.get(name)

    def counter_samples(self, name: str, match: Mapping[str, str] | None = None) -> dict[Labels, float]:
        """Samples of counter ``name`` (``name_total`` in the text, else ``name``) by label set."""
        series = self._series(name, counter=True) or {}
        return {lab: v for lab, v in series.items() if _matches(lab, match)}

    def counter(self, name: str, match: Mapping[str, str] | None = None) -> float | None:
        """Sum of counter ``name`` over label sets matching ``match``; None when absent."""
        series = self._series(name, counter=True)
        return None if series is None else math.fsum(v for lab, v in series.items() if _matches(lab, match))

    def gauge(self, name: str, match: Mapping[str, str] | None = None) -> float | None:
        """Sum of gauge ``name`` over matching label sets (one value when unlabelled); None if absent."""
        series = self._series(name, counter=False)
        if series is None:
            return None
        vals = [v for lab, v in series.items() if _matches(lab, match)]
        return math.fsum(vals) if vals else None


def merge_snapshots(parts: Sequence[Snapshot]) -> Snapshot:
    """One snapshot of a server from its endpoints' snapshots: samples summed per name and label set.

    Counters, histogram buckets and gauges add up (``sum`` in PromQL terms; a window's
    :meth:`SnapshotWindow.gauge_series` averages the endpoints instead); ``_created`` samples
    (timestamps, not values) keep the latest. The parts are kept, so a window can take each
    endpoint's deltas on its own (:class:`SnapshotWindow`). One part is returned as it is.
    """
    if not parts:
        raise ScrapeError("no metrics endpoint to merge")
    if len(parts) == 1:
        return parts[0]
    urls = [p.url for p in parts]
    if len(set(urls)) != len(urls):
        raise ScrapeError(f"the same metrics endpoint is listed twice: {urls}")
    samples: dict[str, dict[Labels, float]] = {}
    types: dict[str, str] = {}
    for part in parts:
        types.update(part.types)
        for name, series in part.samples.items():
            merged = samples.setdefault(name, {})
            for lab, value in series.items():
                if lab not in merged:
                    merged[lab] = value
                elif name.endswith("_created"):
                    merged[lab] = max(merged[lab], value)
                else:
                    merged[lab] += value
    return Snapshot(
        " + ".join(urls),
        max(p.wall_time_s for p in parts),
        max(p.mono_ns for p in parts),
        samples,
        types,
        tuple(parts),
    )


def parse_exposition(
    text: str, *, url: str = "", wall_time_s: float | None = None, mono_ns: int | None = None
) -> Snapshot:
    """Parse Prometheus exposition text into a :class:`Snapshot` (summaries are skipped)."""
    samples: dict[str, dict[Labels, float]] = {}
    types: dict[str, str] = {}
    try:
        for family in text_string_to_metric_families(text):
            if family.type != "unknown" or not family.samples:
                types[family.name] = family.type
            if family.type == "summary":
                continue
            for s in family.samples:
                labels, value = _labels(s.labels), float(s.value)
                _check_count(family.type, s.name, labels, value, url)
                samples.setdefault(s.name, {})[labels] = value
    except ValueError as exc:
        raise ScrapeError(
            f"metrics at {url or '<text>'} are not valid Prometheus exposition text: {exc}"
        ) from exc
    return Snapshot(
        url,
        time.time() if wall_time_s is None else wall_time_s,
        time.perf_counter_ns() if mono_ns is None else mono_ns,
        samples,
        types,
    )


async def scrape(
    url: str, *, session: aiohttp.ClientSession | None = None, timeout_s: float = 10.0
) -> Snapshot:
    """GET ``url`` and parse it; raises :class:`ScrapeError` with the URL and the reason.

    The snapshot and every message carry the URL without credentials (:func:`alflow.util.redact.redact_url`).
    """
    if session is None:
        async with aiohttp.ClientSession() as own:
            return await scrape(url, session=own, timeout_s=timeout_s)
    shown = redact_url(url)
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            body = await read_text_bounded(resp, MAX_METRICS_BYTES, f"metrics at {shown}")
            ctype = resp.content_type
            status = resp.status
    except TimeoutError:  # its str() is empty: the reason said
        why = f"no complete answer within {timeout_s:g} s"
        raise ScrapeError(f"cannot scrape metrics at {shown}: {why}") from None
    except AnswerTooLargeError as exc:  # an endless page held gigabytes (round 15)
        raise ScrapeError(str(exc)) from None
    except aiohttp.ClientError as exc:
        why = redact_urls_in_text(str(exc) or type(exc).__name__)
        raise ScrapeError(f"cannot scrape metrics at {shown}: {why}") from None
    if status != 200:
        raise ScrapeError(f"metrics at {shown} answered HTTP {status}: {body[:200].strip()}", status=status)
    if ctype == "application/json" or body.lstrip().startswith(("{", "[")):
        raise ScrapeError(
            f"metrics at {shown} are JSON, not Prometheus text (TensorRT-LLM serves Prometheus text at "
            "/prometheus/metrics; its /metrics is JSON iteration stats)"
        )
    return parse_exposition(body, url=shown)


async def scrape_all(
    urls: str | Sequence[str], *, session: aiohttp.ClientSession | None = None, timeout_s: float = 10.0
) -> Snapshot:
    """Scrape every endpoint of ``urls`` (at once) and merge them (:func:`merge_snapshots`).

    One URL gives that endpoint's snapshot; any endpoint failing raises its :class:`ScrapeError`.
    """
    targets = (urls,) if isinstance(urls, str) else tuple(urls)
    if not targets:
        raise ScrapeError("no metrics URL to scrape")
    if session is None:
        async with aiohttp.ClientSession() as own:
            return await scrape_all(targets, session=own, timeout_s=timeout_s)
    parts = await asyncio.gather(*(scrape(u, session=session, timeout_s=timeout_s) for u in targets))
    return merge_snapshots(parts)


def _paired_parts(before: Snapshot, after: Snapshot) -> list[tuple[Snapshot, Snapshot]] | None:
    """Per-endpoint (before, after) pairs of two merged snapshots; None when they are single scrapes."""
    if not before.parts and not after.parts:
        return None
    if before.urls != after.urls:
        raise CounterResetError(
            f"the baseline covers metrics endpoints {list(before.urls)} but the final scrape "
            f"{list(after.urls)}: the windows cannot be compared"
        )
    return list(zip(before.parts, after.parts, strict=True))


def counter_resets(before: Snapshot, after: Snapshot) -> list[str]:
    """Sample names of counters (``*_total``) that went backwards or vanished between two snapshots.

    For merged snapshots every endpoint is checked on its own (``name at URL``).
    """
    pairs = _paired_parts(before, after)
    if pairs is not None:
        return [f"{name} at {b.url}" for b, a in pairs for name in counter_resets(b, a)]
    resets: list[str] = []
    for name, series in before.samples.items():
        if not name.endswith("_total"):
            continue
        now = after.samples.get(name, {})
        for lab, v in series.items():
            if lab not in now or now[lab] < v:
                resets.append(name)
                break
    return resets


def counter_deltas(
    name: str, before: Mapping[Labels, float], after: Mapping[Labels, float], *, vanished: str, backwards: str
) -> dict[Labels, float]:
    """Per series of counter ``name``: ``after - before``; one that vanished or went backwards is a reset (said how)."""
    for lab in before:
        if lab not in after:
            raise CounterResetError(
                f"counter {name}{dict(lab)} vanished {vanished}; measure the window again"
            )
    out = {lab: v - before.get(lab, 0.0) for lab, v in after.items()}
    for lab, delta in out.items():
        if delta < 0:
            raise CounterResetError(
                f"counter {name}{dict(lab)} went backwards by {-delta:g} inside the measured window{backwards}; "
                "measure the window again"
            )
    return out


class CounterWindow(Protocol):
    """Increases of counters and series of gauges over one measured window."""

    def increase(self, name: str, match: Mapping[str, str] | None = None) -> float | None:
        """Increase of counter ``name`` summed over matching label sets; None when absent."""
        ...

    def increase_by(self, name: str, label: str) -> dict[str, float]:
        """Increase of counter ``name`` grouped by the value of ``label`` (empty when absent)."""
        ...

    def gauge_series(self, name: str) -> list[tuple[float, float]]:
        """``(wall time s, value)`` points of gauge ``name`` inside the window."""
        ...

    def has(self, name: str) -> bool:
        """True when the source knows metric ``name``."""
        ...

    @property
    def notes(self) -> list[str]:
        """Caveats about how the increases were obtained."""
        ...


class DeltaSums:
    """``increase`` and ``increase_by`` of a window, from its per-series counter deltas (``_deltas``)."""

    def _deltas(self, name: str, match: Mapping[str, str] | None) -> dict[Labels, float] | None:
        """Per series of counter ``name`` matching ``match``: its increase over the window; None when absent."""
        raise NotImplementedError

    def increase(self, name: str, match: Mapping[str, str] | None = None) -> float | None:
        """The increase of counter ``name`` summed over its series (a reset is an error); None when absent."""
        deltas = self._deltas(name, match)
        return None if deltas is None else math.fsum(deltas.values())

    def increase_by(self, name: str, label: str) -> dict[str, float]:
        """The increase of counter ``name`` grouped by the value of ``label``."""
        out: dict[str, float] = {}
        for lab, d in (self._deltas(name, None) or {}).items():
            key = dict(lab).get(label)
            if key is not None:
                out[key] = out.get(key, 0.0) + d
        return out


@dataclass
class SnapshotWindow(DeltaSums):
    """Counter deltas between two snapshots of one server, with reset detection."""

    before: Snapshot
    after: Snapshot
    series: Sequence[Snapshot] = ()
    notes: list[str] = field(default_factory=list)

    def has(self, name: str) -> bool:
        """True when ``name`` is in the final snapshot."""
        return self.after.has(name)

    def _deltas(self, name: str, match: Mapping[str, str] | None) -> dict[Labels, float] | None:
        pairs = _paired_parts(self.before, self.after)
        if pairs is not None:
            # each endpoint on its own (a reset on one must not hide behind another's growth), then summed
            total: dict[Labels, float] | None = None
            for part_before, part_after in pairs:
                try:
                    deltas = SnapshotWindow(part_before, part_after)._deltas(name, match)
                except CounterResetError as exc:
                    raise CounterResetError(f"{exc} (metrics endpoint {part_after.url})") from exc
                if deltas is None:
                    continue
                total = {} if total is None else total
                for lab, d in deltas.items():
                    total[lab] = total.get(lab, 0.0) + d
            return total
        after = self.after.counter_samples(name, match)
        if not after and not self.after.has(name):
            return None
        return counter_deltas(
            name,
            self.before.counter_samples(name, match),
            after,
            vanished="between the baseline and the final scrape: the server restarted",
            backwards=": the server restarted or its counters were reset",
        )

    def gauge_series(self, name: str) -> list[tuple[float, float]]:
        """Gauge values from the baseline, the background scrapes and the final snapshot.

        A merged snapshot contributes the mean over its endpoints (as the ``avg`` of
        :class:`~alflow.metrics.promql.PromQLWindow`): a windowed gauge such as an acceptance length is
        not a sum over nodes.
        """
        points: list[tuple[float, float]] = []
        seen: set[int] = set()
        for snap in (self.before, *self.series, self.after):
            if snap.mono_ns in seen or not self.before.mono_ns <= snap.mono_ns <= self.after.mono_ns:
                continue
            seen.add(snap.mono_ns)
            if snap.parts:
                values = [v for part in snap.parts if (v := part.gauge(name)) is not None]
                v = math.fsum(values) / len(values) if values else None
            else:
                v = snap.gauge(name)
            if v is not None:
                points.append((snap.wall_time_s, v))
        return points


class PeriodicScraper:
    """Scrapes ``url`` every ``interval_s`` seconds in the background (an async context manager).

    ``url`` may list several endpoints: each round scrapes all of them and merges them
    (:func:`scrape_all`). Failed scrapes are logged and counted in ``errors``; they never stop the run.
    """

    def __init__(
        self,
        url: str | Sequence[str],
        interval_s: float = 1.0,
        *,
        session: aiohttp.ClientSession | None = None,
        timeout_s: float = 5.0,
    ) -> None:
        if interval_s <= 0:
            raise AlflowError(f"scrape interval {interval_s} s must be positive")
        self.urls = (url,) if isinstance(url, str) else tuple(url)
        if not self.urls:
            raise AlflowError("a periodic scraper needs at least one metrics URL")
        self.url = " + ".join(self.urls)
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.snapshots: list[Snapshot] = []
        self.errors: list[str] = []
        self._session = session
        self._own: aiohttp.ClientSession | None = None
        self._task: asyncio.Task[None] | None = None

    async def _loop(self) -> None:
        assert self._session is not None
        next_t = time.monotonic()
        while True:
            try:
                self.snapshots.append(
                    await scrape_all(self.urls, session=self._session, timeout_s=self.timeout_s)
                )
            except ScrapeError as exc:
                self.errors.append(str(exc))
                log.warning("background scrape failed: %s", exc)
            next_t += self.interval_s
            await asyncio.sleep(max(0.0, next_t - time.monotonic()))

    async def __aenter__(self) -> PeriodicScraper:
        if self._session is None:
            self._own = self._session = aiohttp.ClientSession()
        self._task = asyncio.create_task(self._loop())
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._own is not None:
            await self._own.close()

    def series(self, name: str) -> list[tuple[float, float]]:
        """``(wall time s, value)`` of gauge ``name`` over the background scrapes."""
        return [(s.wall_time_s, v) for s in self.snapshots if (v := s.gauge(name)) is not None]
