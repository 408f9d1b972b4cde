"""Typed data of the site's pages: the runs index, the trends, the reference tables.

Each page is built once from the catalogue as a frozen dataclass; the HTML template renders it and the
JSON API returns its :meth:`to_dict`, so a page and its API answer hold the same data. Query parameters
are parsed here: a bad one is an :class:`~alflow.errors.InvalidInputError` naming the parameter, its
value and what is allowed (the site answers 400 with that line).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Final
from urllib.parse import urlencode

import orjson

from alflow.errors import InvalidInputError
from alflow.metrics.point_metrics import POINT_METRICS
from alflow.reports.markdown import escape_controls
from alflow.results.catalog import Catalog, CatalogEntry
from alflow.results.rows import M2Point
from alflow.results.series import SeriesKey

PAGE_SIZE: Final = 100
SORT_COLUMNS: Final = ("date", "flow", "model", "framework", "image", "k", "status", "outcome", "verdict")
ORDERS: Final = ("asc", "desc")
FILTERS: Final = ("flow", "model", "framework", "outcome")
"""The index's filters: a run is listed when each one given equals the run's catalogue field of that name."""
TREND_LAST_MAX: Final = 1000
MAX_SERIES: Final = 40
"""Trend lines drawn on one page at most (filter to see others)."""


def _text_param(params: Mapping[str, str], name: str, limit: int = 200) -> str:
    value = params.get(name, "")
    if len(value) > limit or escape_controls(value, keep="") != value:  # DEL, C1 (CSI), RLO, zero-width too
        raise InvalidInputError(
            f"query parameter {name} {value[:40]!r}: must be text of at most {limit} characters without control characters"
        )
    return value


def _int_param(params: Mapping[str, str], name: str, low: int, high: int, default: int | None) -> int | None:
    raw = params.get(name, "")
    if raw == "":
        return default
    # "²" is a digit int() refuses; over 4,300 digits int() raises: no bound here has 20
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 20) or not low <= int(raw) <= high:
        raise InvalidInputError(f"query parameter {name} {raw[:40]!r}: must be an integer in [{low}, {high}]")
    return int(raw)


def _choice_param(params: Mapping[str, str], name: str, allowed: tuple[str, ...], default: str) -> str:
    value = params.get(name, "") or default
    if value not in allowed:
        raise InvalidInputError(f"query parameter {name} {value[:40]!r}: must be one of {', '.join(allowed)}")
    return value


# --------------------------------------------------------------------------------------------
# The runs index


@dataclass(frozen=True)
class IndexQuery:
    """Filters, sort and page of the runs index (``/`` and ``/api/runs``)."""

    flow: str = ""
    model: str = ""
    framework: str = ""
    outcome: str = ""
    text: str = ""
    sort: str = "date"
    order: str = "desc"
    page: int = 1

    @classmethod
    def parse(cls, params: Mapping[str, str]) -> IndexQuery:
        """The query of a request's parameters (unknown parameters are ignored)."""
        return cls(
            **{name: _text_param(params, name) for name in (*FILTERS, "text")},
            sort=_choice_param(params, "sort", SORT_COLUMNS, "date"),
            order=_choice_param(params, "order", ORDERS, "desc"),
            page=_int_param(params, "page", 1, 1_000_000, 1) or 1,
        )

    def url(self, **changes: Any) -> str:
        """``?...`` of this query with ``changes`` (defaults left out), for the page's links."""
        q = replace(self, **changes)
        default = IndexQuery()
        pairs = {
            f.name: getattr(q, f.name) for f in fields(q) if getattr(q, f.name) != getattr(default, f.name)
        }
        return "?" + urlencode(pairs) if pairs else "?"

    def sort_url(self, column: str) -> str:
        """The link of a column heading: sort by it, flipping the order when it is already the sort."""
        order = ("asc" if self.order == "desc" else "desc") if column == self.sort else "desc"
        return self.url(sort=column, order=order, page=1)


@dataclass(frozen=True)
class RunRow:
    """One run as the index lists it."""

    rel: str
    flow: str
    run_id: str
    started: str
    date: str
    status: str
    outcome: str
    model: str | None
    framework: str | None
    image: str | None
    image_tag: str | None
    ks: tuple[int, ...]
    thinking: str | None
    verdict: str | None
    simulated: bool
    files: tuple[str, ...]
    problem: str | None

    @classmethod
    def of(cls, e: CatalogEntry) -> RunRow:
        """The row of a catalogue entry: its fields, with the date as shown and what served it as its image."""
        values = {name: getattr(e, name) for name in _ROW_FROM_ENTRY}
        # a process-run server: what served it, never an image it did not use
        return cls(**values, date=e.started[:16].replace("T", " "), image=e.image or e.served)


_ROW_FROM_ENTRY: Final = tuple(f.name for f in fields(RunRow) if f.name not in ("date", "image"))


@dataclass(frozen=True)
class Choices:
    """The values the index's filters offer (from every run in the root)."""

    flows: tuple[str, ...]
    models: tuple[str, ...]
    frameworks: tuple[str, ...]
    outcomes: tuple[str, ...]


@dataclass(frozen=True)
class IndexPage:
    """One page of the runs index."""

    query: IndexQuery
    rows: tuple[RunRow, ...]
    matching: int
    total: int
    page: int
    pages: int
    page_size: int
    choices: Choices

    def to_dict(self) -> dict[str, Any]:
        """The JSON API's answer (``/api/runs``): ``asdict`` without its deep copies (the rows hold flat values)."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data.update(
            query=asdict(self.query), choices=asdict(self.choices), rows=[vars(r).copy() for r in self.rows]
        )
        return data


_SORT_KEYS: Final[dict[str, Callable[[CatalogEntry], Any]]] = {
    "date": lambda e: e.started,
    "flow": lambda e: e.flow,
    "model": lambda e: e.model or "",
    "framework": lambda e: e.framework or "",
    "image": lambda e: e.image or e.served or "",
    "k": lambda e: min(e.ks, default=-1),
    "status": lambda e: e.status,
    "outcome": lambda e: e.outcome,
    "verdict": lambda e: e.verdict or "",
}


def _text(e: CatalogEntry) -> str:
    """What the index's text filter searches in a run (lower case)."""
    return " ".join(
        str(v) for v in (e.rel, e.model, e.framework, e.image, e.status, e.outcome, e.verdict, e.problem) if v
    ).lower()


class ChoiceCache:
    """The filter choices of a catalogue and the text of each of its runs, computed once per catalogue generation."""

    def __init__(self) -> None:
        self._kept: tuple[tuple[int, int], Choices] | None = None
        """(catalogue, generation) and its choices, as one value: pages are built in several threads at once."""
        self._texts: tuple[tuple[CatalogEntry, ...], tuple[str, ...]] | None = None
        """The entries the texts were made of (kept: compared by identity) and the text of each, in their order."""

    def get(self, catalog: Catalog) -> Choices:
        """The choices of the catalogue as it is now."""
        key = (id(catalog), catalog.generation)
        kept = self._kept
        if kept is not None and kept[0] == key:
            return kept[1]
        entries = catalog.entries()
        value = Choices(
            flows=tuple(sorted({e.flow for e in entries})),
            models=tuple(sorted({e.model for e in entries if e.model})),
            frameworks=tuple(sorted({e.framework for e in entries if e.framework})),
            outcomes=tuple(sorted({e.outcome for e in entries})),
        )
        self._kept = (key, value)
        return value

    def texts(self, entries: tuple[CatalogEntry, ...]) -> tuple[str, ...]:
        """The searched text of each of ``entries`` (a catalogue's :meth:`~Catalog.entries`), in their order."""
        kept = self._texts
        if kept is not None and kept[0] is entries:
            return kept[1]
        texts = tuple(_text(e) for e in entries)
        self._texts = (entries, texts)
        return texts


def index_page(catalog: Catalog, q: IndexQuery, cache: ChoiceCache) -> IndexPage:
    """The runs of the catalogue that match ``q``, sorted, one page of :data:`PAGE_SIZE` rows."""
    entries = catalog.entries()
    found = list(entries)
    if needle := q.text.lower():
        found = [e for e, text in zip(entries, cache.texts(entries), strict=True) if needle in text]
    for name in FILTERS:
        if value := getattr(q, name):
            found = [e for e in found if getattr(e, name) == value]
    if q.sort != "date" or q.order != "desc":  # the catalogue's own order is newest first
        found.sort(key=lambda e: (_SORT_KEYS[q.sort](e), e.started), reverse=q.order == "desc")
    pages = max(1, math.ceil(len(found) / PAGE_SIZE))
    page = min(q.page, pages)
    rows = tuple(RunRow.of(e) for e in found[(page - 1) * PAGE_SIZE : page * PAGE_SIZE])
    return IndexPage(q, rows, len(found), len(entries), page, pages, PAGE_SIZE, cache.get(catalog))


def entry_dict(entry: CatalogEntry) -> dict[str, Any]:
    """A run's catalogue entry for the JSON API (``/api/runs/<flow>/<run>``): without the server's own path."""
    data = entry.to_dict()
    data.pop("run_dir", None)
    return data


# --------------------------------------------------------------------------------------------
# Trends

TREND_METRICS: Final = tuple(m for m in POINT_METRICS if m.trend)
"""The declared figures a trend line shows per run (besides the achieved AL)."""
METRICS: Final = (
    *((m.name, m.label[:1].upper() + m.label[1:], m.unit) for m in TREND_METRICS),
    ("achieved_al", "Achieved AL", "tokens/step"),
)
"""The values a trend line shows per run, one chart each: (name, title, unit)."""


@dataclass(frozen=True)
class TrendQuery:
    """Which trend lines (``/trends``, ``/api/trends``): filters, and how many of the latest runs per line."""

    framework: str = ""
    model: str = ""
    k: int | None = None
    concurrency: int | None = None
    last: int = 60

    @classmethod
    def parse(cls, params: Mapping[str, str]) -> TrendQuery:
        """The query of a request's parameters."""
        return cls(
            framework=_text_param(params, "framework"),
            model=_text_param(params, "model"),
            k=_int_param(params, "k", 1, 64, None),
            concurrency=_int_param(params, "concurrency", 1, 1_000_000, None),
            last=_int_param(params, "last", 1, TREND_LAST_MAX, 60) or 60,
        )

    def wants(self, key: SeriesKey) -> bool:
        """Whether the line ``key`` passes the filters."""
        return (
            (not self.framework or key.framework == self.framework)
            and (not self.model or key.model == self.model)
            and (self.k is None or key.k == self.k)
            and (self.concurrency is None or key.concurrency == self.concurrency)
        )


@dataclass(frozen=True)
class TrendPoint:
    """One run on a trend line."""

    rel: str
    started: str
    image_tag: str | None
    repeat: int
    valid: bool
    partial: bool
    client_bound: bool
    verdict: str | None
    values: dict[str, float | None]
    """Each of :data:`METRICS` by name (None: not measured or not finite)."""

    @classmethod
    def of(cls, entry: CatalogEntry, key: SeriesKey, p: M2Point) -> TrendPoint:
        """The point of ``p`` (measured by ``entry``) on the line ``key``."""
        return cls(
            rel=entry.rel,
            started=entry.started,
            image_tag=entry.image_tag,
            repeat=p.repeat,
            valid=p.valid,
            partial=p.partial,
            client_bound=p.client_verdict == "client-bound",
            verdict=entry.verdict_of(key),
            values={
                **{m.name: _finite(p.value(m)) for m in TREND_METRICS},
                "achieved_al": _finite(p.achieved_al),
            },
        )


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


@dataclass(frozen=True)
class TrendSeries:
    """One trend line: its key and its latest points, oldest first."""

    key: SeriesKey
    label: str
    points: tuple[TrendPoint, ...]
    runs: int
    """Points of the line in the whole root (``points`` holds the latest ``last``)."""
    regressed: int


@dataclass(frozen=True)
class TrendChoices:
    """The values the trend filters offer."""

    frameworks: tuple[str, ...]
    models: tuple[str, ...]
    ks: tuple[int, ...]
    concurrencies: tuple[int, ...]


@dataclass(frozen=True)
class TrendsPage:
    """The trend lines that pass the filters (at most :data:`MAX_SERIES`)."""

    query: TrendQuery
    series: tuple[TrendSeries, ...]
    matching: int
    choices: TrendChoices

    def to_dict(self) -> dict[str, Any]:
        """The JSON API's answer (``/api/trends``): each line's key as an object, each point's values by name.

        Through orjson, which writes dataclasses itself: ``asdict``'s deep copies of 900 points took 25 ms a request.
        """
        try:
            data: dict[str, Any] = orjson.loads(orjson.dumps(self, option=orjson.OPT_NON_STR_KEYS))
        except TypeError:  # a value orjson does not write (an integer beyond 64 bits): the answer escapes it
            data = asdict(self)
        return data


def trends_page(catalog: Catalog, q: TrendQuery) -> TrendsPage:
    """The trend lines of the catalogue that match ``q``, each with its latest ``q.last`` points."""
    keys = catalog.series_keys()
    wanted = [k for k in keys if q.wants(k)]
    series = []
    for key in wanted[:MAX_SERIES]:
        pairs = catalog.all_points(key)
        points = tuple(TrendPoint.of(e, key, p) for e, p in pairs[-q.last :])
        regressed = sum(1 for p in points if p.verdict == "regressed")
        series.append(TrendSeries(key, key.label(), points, len(pairs), regressed))
    choices = TrendChoices(
        frameworks=tuple(sorted({k.framework for k in keys})),
        models=tuple(sorted({k.model for k in keys})),
        ks=tuple(sorted({k.k for k in keys})),
        concurrencies=tuple(sorted({k.concurrency for k in keys})),
    )
    return TrendsPage(q, tuple(series), len(wanted), choices)
