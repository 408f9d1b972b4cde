"""The results site's aiohttp application: pages, raw files and the JSON API over one catalogue, read-only.

Routes (GET and HEAD only; :mod:`alflow.site.guard` checks methods, paths and the token first):

- ``/`` and ``/api/runs``: the runs index (:func:`alflow.site.pages.index_page`), filtered, sorted, paged.
- ``/runs/<flow>/<run>/``: the run's ``report.html`` (rendered by :func:`alflow.reports.render_run` when the run
  has none); ``/runs/<flow>/<run>/files/<name>``: a file the run's manifest lists, or ``manifest.json`` itself,
  text passed through alflow's URL redaction again; ``/api/runs/<flow>/<run>``: the run's catalogue entry.
- ``/compare?run=<rel>&run=<rel>`` and ``/api/compare``: :func:`alflow.reports.render_comparison`'s report.
- ``/reference`` and ``/api/reference``: :mod:`alflow.site.reference`.
- ``/trends`` and ``/api/trends``: :func:`alflow.site.pages.trends_page` with :mod:`alflow.site.charts`.

A run is found through the catalogue only (its ``<flow>/<run dir>`` must be one the root's listing produced), so a
request can name nothing the catalogue did not list. Every page and JSON answer leaves through :func:`_private`:
credentials in URLs redacted (whatever wrote the run's manifest), a run's directory named by its
``<flow>/<run dir>``, never by the server's path. The catalogue refreshes in the background every
``refresh_s`` seconds (in a worker thread); rendering a report runs in a worker thread too.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import io
import json
import logging
import os
import re
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, Final, TypeVar
from urllib.parse import quote

import orjson
import polars as pl
from aiohttp import web
from markupsafe import Markup, escape

from alflow.errors import AlflowError, InvalidInputError
from alflow.reports.content import Report, build_comparison
from alflow.reports.markdown import escape_controls
from alflow.reports.render import environment, render, render_run
from alflow.results.catalog import REGRESSION, Catalog, CatalogEntry
from alflow.results.store import MANIFEST, StoreError, open_run
from alflow.site import guard
from alflow.site.charts import TrendMark, trend_chart
from alflow.site.pages import (
    METRICS,
    ChoiceCache,
    IndexQuery,
    TrendQuery,
    TrendSeries,
    entry_dict,
    index_page,
    trends_page,
)
from alflow.site.reference import reference_page
from alflow.site.threads import (
    PAGE_SECONDS,
    PageTooSlowError,
    add_slots,
    bounded,
    file_io,
    in_thread,
    off_loop,
)
from alflow.util.fsutil import open_confined, unsafe_file
from alflow.util.names import BIDI_CONTROLS
from alflow.util.redact import (
    RedactionError,
    may_hold_credentials,
    redact_document,
    redact_text_stream,
    redact_url,
    redact_urls_in_text,
    unescape_json,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

CATALOG: Final = web.AppKey("catalog", Catalog)
CHOICES: Final = web.AppKey("choices", ChoiceCache)
ROOT_LABEL: Final = web.AppKey("root_label", str)
REFRESH_S: Final = web.AppKey("refresh_s", float)
PAGES: Final = web.AppKey("pages", dict[str, tuple[CatalogEntry, str]])
"""Run pages rendered lately, by run, with the catalogue entry they were rendered from."""
MAX_PAGES: Final = 64
MAX_COMPARE: Final = 8
CHUNK_BYTES: Final = 1 << 20
"""A raw file is read and sent in parts of this size (1 MiB)."""
MAX_JSON_SHOWN: Final = 32 << 20
"""A JSON file up to this size (32 MiB) is parsed and re-dumped through redaction; a larger one is not shown."""
TEXT_TYPES: Final = {
    ".json": "application/json",
    ".md": "text/markdown",
    ".html": "text/html",
    ".txt": "text/plain",
    ".log": "text/plain",
    ".yaml": "text/plain",
    ".yml": "text/plain",
    ".csv": "text/csv",
}
"""Raw files shown in the browser (redacted again on the way out); any other file is a download."""
STORED_HTML_CSP: Final = (
    guard.HEADERS["Content-Security-Policy"]
    + "; sandbox; form-action 'none'; base-uri 'none'; frame-ancestors 'none'"
)
"""The policy of an HTML file a run stored, shown as it is: sandboxed (no script, form, meta refresh or popup)."""
_PLAIN_NAME: Final = re.compile(r"[^A-Za-z0-9._-]")


def _printed(value: object) -> object:
    """What a page prints of ``value`` (every ``{{ ... }}`` of a template): :func:`_private`, no control character.

    The pages' own markup is ours; what a run holds, a query asks or the root is named arrives here, value by value,
    before escaping. A short text (a model id, a framework, a date: the same few hundred on every index page) is
    judged once (:func:`_printed_text`): the whole 97 kB index page through the redaction cost more than building it.
    """
    if type(value) is str:  # most values: a plain text, most of them short
        return _printed_text(value) if len(value) <= _CACHED_CHARS else escape_controls(_private(value))
    if type(value) is _Printed:
        return value
    if not isinstance(value, str):
        return value
    text = str(value)  # a Markup (a chart) as plain text: its methods would escape what redaction puts back
    shown = _printed_text(text) if len(text) <= _CACHED_CHARS else escape_controls(_private(text))
    return Markup(shown) if isinstance(value, Markup) else shown  # noqa: S704 - a chart escaped its texts


_CACHED_CHARS: Final = 256


class _Printed(Markup):
    """Markup made only of texts that went through :func:`_printed` (a trend chart): printed as it is."""

    __slots__ = ()


@functools.lru_cache(maxsize=1 << 16)
def _printed_text(text: str) -> str:
    """:func:`_printed` of a text of at most :data:`_CACHED_CHARS` characters (at most 64 Ki of them kept, ~16 MB)."""
    # no control or format character (RLO, ESC) reorders or hides what a page shows: each as visible \uNNNN text
    return escape_controls(_private_text(text))


@functools.lru_cache(maxsize=1 << 16)
def _private_text(text: str) -> str:
    """:func:`_private` of a short text without run directories (a JSON answer's strings: the same few hundred)."""
    return _private(text)


_ENV: Final = environment("alflow.site", keep_trailing_newline=False, finalize=_printed)


def _private(text: str, entries: Iterable[CatalogEntry] = ()) -> str:
    """``text`` as it may leave the server: no run directory's server path, no credential in a URL.

    Each run's directory (the server's own path) is named by its ``<flow>/<run dir>`` instead, plain or
    HTML-escaped; credentials in every URL are redacted.

    The store redacts what it writes, but a page is built from whatever the root holds (a manifest written by
    another tool or by hand): every page and answer goes through this on its way out.
    """
    for e in sorted(entries, key=lambda e: len(e.run_dir), reverse=True):  # a longer path before its prefix
        if e.run_dir and e.run_dir != e.rel:
            text = text.replace(e.run_dir, e.rel)
            text = text.replace(str(escape(e.run_dir)), str(escape(e.rel)))
    return redact_urls_in_text(text)  # ?token=, HF_TOKEN=, Bearer, "api_key": "..." outside a URL too


def _each_value(data: object, fn: Callable[[object], object]) -> object:
    """JSON-ready ``data`` with ``fn`` applied to every value in it that is no dict or list (keys included)."""
    if isinstance(data, dict):
        return {_each_value(k, fn): _each_value(v, fn) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [_each_value(v, fn) for v in data]
    return fn(data)


def _private_data(data: object, entries: tuple[CatalogEntry, ...]) -> object:
    """JSON-ready ``data`` with :func:`_private` applied to every string in it (keys included)."""

    def private(v: object) -> object:
        if not isinstance(v, str):
            return v
        return _private_text(v) if not entries and len(v) <= _CACHED_CHARS else _private(v, entries)

    return _each_value(data, private)


def _html(request: web.Request, template: str, title: str, status: int = 200, **data: Any) -> web.Response:
    text = _ENV.get_template(template).render(title=title, root_label=request.app[ROOT_LABEL], **data)
    return web.Response(
        text=text, content_type="text/html", status=status
    )  # each value went through _printed


def _json_ready(value: object) -> object:
    """A value as JSON can carry it: an integer beyond 64 bits as its decimal text, a lone surrogate as U+FFFD.

    A stored run may hold either (a manifest written by another tool, a surrogate's JSON escape): the answer goes.
    """
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**64:
        return str(value)
    return _SURROGATE.sub("\ufffd", value) if isinstance(value, str) else value


_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def _json(data: object, status: int = 200, entries: Iterable[CatalogEntry] = ()) -> web.Response:
    try:
        body = orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:  # an integer beyond 64 bits or a lone surrogate in a stored run
        data = _each_value(data, _json_ready)
        body = orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS)
    runs = tuple(entries)
    text = body.decode()
    if may_hold_credentials(text, ('\\"', "'")) or any(e.run_dir in text for e in runs if e.run_dir != e.rel):
        body = orjson.dumps(_private_data(data, runs), option=orjson.OPT_NON_STR_KEYS)
    for char in BIDI_CONTROLS:  # only inside JSON strings, where \uXXXX means the same: no raw reordering
        body = body.replace(char.encode(), f"\\u{ord(char):04x}".encode())
    return web.Response(body=body, content_type="application/json", status=status)


def _is_api(request: web.Request) -> bool:
    return request.path.startswith("/api/")


def _problem(request: web.Request, status: int, message: str) -> web.Response:
    """An error answer: JSON for the API, an HTML page (``message`` escaped) otherwise."""
    if _is_api(request):
        return _json({"error": message}, status)
    return _html(request, "message.html.j2", f"{status}", status=status, message=message)


@web.middleware
async def errors(request: web.Request, handler: guard.Handler) -> web.StreamResponse:
    """Bad input -> 400 with its one line; anything unforeseen -> 500 without details (logged)."""
    try:
        return await handler(request)
    except InvalidInputError as exc:
        return _problem(request, 400, " ".join(str(exc).split()))
    except web.HTTPException:
        raise
    except PageTooSlowError as exc:
        log.warning("%s", exc)
        return _problem(
            request, 503, f"this page took longer than {PAGE_SECONDS:g} s to build: try again later"
        )
    except Exception:
        log.exception("the site failed to answer %s %s", request.method, request.path)
        return _problem(request, 500, "internal error: see the site's log")


def _entry(request: web.Request) -> CatalogEntry:
    """The run the route names, from the catalogue only (404 when it lists none)."""
    rel = f"{request.match_info['flow']}/{request.match_info['run']}"
    entry = request.app[CATALOG].get(rel)
    if entry is None:
        raise web.HTTPNotFound(text="404 not found: no such run in this root\n")
    return entry


# --------------------------------------------------------------------------------------------
# Handlers


@off_loop
def index(request: web.Request) -> web.Response:
    """``/``: the runs index (``/api/runs``: as JSON)."""
    page = index_page(request.app[CATALOG], IndexQuery.parse(request.query), request.app[CHOICES])
    return _json(page.to_dict()) if _is_api(request) else _html(request, "index.html.j2", "Runs", page=page)


@off_loop
def api_run(request: web.Request) -> web.Response:
    """``/api/runs/<flow>/<run>``: one run's catalogue entry."""
    entry = _entry(request)
    return _json(entry_dict(entry), entries=(entry,))


def _check_files(catalog: Catalog, entry: CatalogEntry) -> None:
    """A StoreError unless the manifest, regression.json and listed files of ``entry`` are regular files in the root."""
    bad = unsafe_file(catalog.root, entry.run_dir, (MANIFEST, REGRESSION, *entry.files))
    if bad is not None:
        raise StoreError(f"{entry.rel}/{bad} is not a regular file inside the results root")


def _checked_render(catalog: Catalog, entry: CatalogEntry) -> str:
    """:func:`render_run` of a run whose files are all regular files inside the root (else a StoreError), private."""
    _check_files(catalog, entry)
    return _private(render_run(entry.run_dir), [entry])


async def run_page(request: web.Request) -> web.StreamResponse:
    """``/runs/<flow>/<run>/``: the run's report, rendered from what the run stores now.

    Not the run's own ``report.html``: a flow writes that before it closes (its status "running"), and a run's
    later files (its regression verdicts) are not in it. The page is kept while the catalogue's entry is the same.
    """
    entry = _entry(request)
    if entry.status == "unreadable":
        return _problem(request, 404, _private(f"run {entry.rel} cannot be read: {entry.problem}", [entry]))
    pages: dict[str, tuple[CatalogEntry, str]] = request.app[PAGES]
    kept = pages.get(entry.rel)
    if kept is not None and kept[0] is entry:
        return web.Response(text=kept[1], content_type="text/html")
    try:
        text = await bounded(request, _checked_render, request.app[CATALOG], entry)
    except AlflowError as exc:
        message = f"run {entry.rel} cannot be rendered: {' '.join(str(exc).split())}"
        return _problem(request, 404, _private(message, [entry]))
    except (pl.exceptions.PolarsError, TypeError, ValueError, KeyError) as exc:  # not as alflow wrote it
        log.warning("run %s cannot be rendered", entry.rel, exc_info=True)
        why = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        message = f"run {entry.rel} cannot be rendered: a file is not as alflow writes it ({why})"
        return _problem(request, 422, _private(message, [entry]))
    if len(pages) >= MAX_PAGES:
        pages.pop(next(iter(pages)))
    pages[entry.rel] = (entry, text)
    return web.Response(text=text, content_type="text/html")


async def run_redirect(request: web.Request) -> web.StreamResponse:
    """``/runs/<flow>/<run>``: to the page with the trailing slash."""
    entry = _entry(request)
    raise web.HTTPFound(location=f"/runs/{quote(entry.rel)}/")  # a folder's name may hold any character


def _open_file(catalog: Catalog, entry: CatalogEntry, name: str) -> BinaryIO | None:
    """A run's file opened for reading; None when it is missing or (locally) not a regular file inside the root."""
    if "://" not in catalog.root:
        return open_confined(Path(catalog.root), Path(entry.run_dir) / name)
    run = open_run(entry.run_dir)
    try:
        return run.storage.open_read(run.storage.join(run.dir, name))
    except OSError:
        return None


def _size(f: BinaryIO) -> int | None:
    """The size of an opened file (a local one's ``fstat``, an fsspec one's ``size``), None when unknown."""
    try:
        return os.fstat(f.fileno()).st_size
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        size = getattr(f, "size", None)
        return size if isinstance(size, int) else None


def _chunks(f: BinaryIO, limit: int | None = None) -> Iterator[bytes]:
    """``f``'s bytes in parts of :data:`CHUNK_BYTES`: to its end, or exactly ``limit`` bytes.

    A file that ends before ``limit`` (it shrank after its size was taken) is an :class:`OSError`: the answer's
    Content-Length promised more, so the connection must be cut rather than the body ended short.
    """
    left = limit
    while left is None or left > 0:
        data = f.read(CHUNK_BYTES if left is None else min(CHUNK_BYTES, left))
        if not data:
            if left is not None:
                raise OSError(f"the file ended {left:,} bytes before the size it had when it was opened")
            return
        if left is not None:
            left -= len(data)
        yield data


def _shown(name: str, data: bytes) -> bytes | None:
    r"""A JSON file's bytes re-dumped through redaction (:func:`redact_document`: keys, secret-named values, strings).

    Other text, or JSON that does not parse (cut short), has its escapes undone (``\/`` cannot hide a URL) and is
    redacted as text. None for JSON nested deeper than the parser goes: its URLs could not all be found, so it is not
    shown.
    """
    if not name.lower().endswith(".json"):
        return redact_urls_in_text(unescape_json(data.decode("utf-8", errors="replace"))).encode()
    text = data.decode(json.detect_encoding(data), errors="replace")  # UTF-16 and -32 JSON too
    try:  # an integer Python will not convert (over 4,300 digits) is shown as its digits
        return json.dumps(redact_document(json.loads(text, parse_int=_json_int)), indent=2).encode()
    except ValueError:  # not JSON after all (cut short)
        return redact_urls_in_text(unescape_json(text)).encode()
    except RecursionError:
        return None


def _json_int(digits: str) -> int | str:
    return int(digits) if len(digits) <= 4000 else digits


async def _stream(
    request: web.Request, response: web.StreamResponse, parts: Iterator[bytes]
) -> web.StreamResponse:
    """Send ``parts`` (each made in a thread) as the body of ``response``; a part that fails cuts the connection.

    The status and headers are out by then, so a failure cannot become an error page (the ``errors`` middleware
    would write a second answer into the body): whatever makes the next part fail (a read error, a file that shrank,
    an fsspec back-end's own error, a text that cannot be redacted in parts) is logged and the connection closed
    before the body ends, which a client sees as a broken download, never a whole short file. The documented cases
    (a read error, a file that shrank, a text that cannot be cut, no file-read slot free) are one warning line with
    the reason; another error's traceback is logged too. A client that leaves part-way is no error of the site's.
    """
    await response.prepare(request)
    if request.method == "HEAD":  # aiohttp sends what a stream writes even then
        await response.write_eof()
        return response
    while True:
        try:
            part = await file_io(request, next, parts, None)
        except Exception as exc:  # the documented cases: one line; any other: its traceback, to mend it
            known = isinstance(exc, OSError | RedactionError | PageTooSlowError)
            why = f" ({' '.join(str(exc).split())[:500]})" if known else ""
            message = "sending %s failed part-way%s: the connection is cut"
            log.warning(message, request.path, why, exc_info=not known)
            if request.transport is not None:
                request.transport.close()
            return response
        if part is None:
            break
        try:
            await response.write(part)
        except ConnectionError:
            log.debug("the client of %s left part-way", request.path)
            return response
    await response.write_eof()
    return response


async def run_file(request: web.Request) -> web.StreamResponse:
    """``/runs/<flow>/<run>/files/<name>``: a file the manifest lists (or manifest.json), nothing else.

    Sent in parts of :data:`CHUNK_BYTES`, never read whole (a day's server log can be gigabytes): a download as
    it is stored, text redacted part by part (:func:`~alflow.util.redact.redact_text_stream`). A JSON file is
    parsed and re-dumped through redaction instead, so that a URL written with JSON's escapes (a slash escaped) is
    redacted too; one over :data:`MAX_JSON_SHOWN` is refused (413) rather than sent half-redacted.
    """
    entry = _entry(request)
    name = request.match_info["name"]
    if name != MANIFEST and name not in entry.files:
        raise web.HTTPNotFound(text="404 not found: the run's manifest lists no such file\n")
    f = await file_io(request, _open_file, request.app[CATALOG], entry, name)
    if f is None:
        raise web.HTTPNotFound(text="404 not found: the file is missing or outside the results root\n")
    try:
        return await _send(request, name, f)
    finally:
        f.close()


async def _send(request: web.Request, name: str, f: BinaryIO) -> web.StreamResponse:
    suffix = Path(name).suffix.lower()
    size = _size(f)
    if suffix not in TEXT_TYPES:
        kind = "application/vnd.apache.parquet" if suffix == ".parquet" else "application/octet-stream"
        response = web.StreamResponse(headers={"Content-Disposition": _disposition(name)})
        response.content_type = kind
        if size is not None:
            response.content_length = size
        return await _stream(request, response, _chunks(f, size))
    csp = {"Content-Security-Policy": STORED_HTML_CSP} if TEXT_TYPES[suffix] == "text/html" else {}
    if suffix == ".json":
        data = await file_io(request, f.read, MAX_JSON_SHOWN + 1)
        if len(data) > MAX_JSON_SHOWN:
            message = (
                f"{name} is a JSON file of more than {MAX_JSON_SHOWN:,} bytes: not shown, since its URLs "
                "(which JSON may write with escapes) are redacted only by parsing it whole"
            )
            return _problem(request, 413, message)
        body = await bounded(request, _shown, name, data)
        if body is None:
            return _problem(request, 413, f"{name} is JSON nested deeper than can be parsed: not shown")
        return web.Response(body=body, content_type=TEXT_TYPES[suffix], charset="utf-8", headers=csp)
    response = web.StreamResponse(headers=csp)
    response.content_type = TEXT_TYPES[suffix]
    response.charset = "utf-8"
    return await _stream(request, response, redact_text_stream(_chunks(f)))


def _disposition(name: str) -> str:
    """``attachment`` with the file's name, which can never break the header.

    A plain ASCII name as is; in any other (a quote, CR/LF, non-ASCII) each such character is a ``_`` in
    ``filename`` and the whole name is percent-encoded in ``filename*`` (RFC 6266).
    """
    plain = _PLAIN_NAME.sub("_", name)
    if plain == name:
        return f'attachment; filename="{name}"'
    return f"attachment; filename=\"{plain}\"; filename*=UTF-8''{quote(name, safe='')}"


def _compare_runs(request: web.Request) -> list[CatalogEntry]:
    rels = request.query.getall("run", [])
    if not 1 <= len(rels) <= MAX_COMPARE:
        raise InvalidInputError(
            f"query parameter run: give 1 to {MAX_COMPARE} runs (<flow>/<run dir>), got {len(rels)}"
        )
    out = []
    for rel in rels:
        entry = request.app[CATALOG].get(rel)
        if entry is None or entry.status == "unreadable":
            raise InvalidInputError(f"query parameter run {rel[:80]!r}: not a readable run of this root")
        out.append(entry)
    return out


def _compared(request: web.Request, entries: list[CatalogEntry]) -> Report | web.Response:
    """The comparison of ``entries``, or a 404 naming the run that cannot be read (not by the server's path)."""
    try:
        for e in entries:
            _check_files(request.app[CATALOG], e)
        return build_comparison([open_run(e.run_dir) for e in entries])
    except AlflowError as exc:
        return _problem(request, 404, _private(f"cannot compare: {' '.join(str(exc).split())}", entries))


def report_dict(report: Report) -> dict[str, Any]:
    """A report's data for the JSON API: facts, verdict, sections with their tables (charts left out)."""
    return {
        "title": report.title,
        "simulated": report.simulated,
        "facts": [list(f) for f in report.facts],
        "verdict": report.verdict,
        "warnings": report.warnings,
        "sections": [
            {
                "title": s.title,
                "status": s.status,
                "paragraphs": s.paragraphs,
                "notes": s.notes,
                "tables": [
                    {"title": t.title, "columns": list(t.columns), "rows": [list(r) for r in t.rows]}
                    for t in s.tables
                ],
            }
            for s in report.sections
        ],
    }


@off_loop
def compare(request: web.Request) -> web.Response:
    """``/compare?run=..&run=..``: the runs side by side (``/api/compare``: the comparison's data)."""
    entries = _compare_runs(request)
    report = _compared(request, entries)
    if isinstance(report, web.Response):
        return report
    if _is_api(request):
        return _json({"runs": [e.rel for e in entries], "report": report_dict(report)}, entries=entries)
    return web.Response(text=_private(render(report), entries), content_type="text/html")


@off_loop
def reference(request: web.Request) -> web.Response:
    """``/reference``: reference tables and their history (``/api/reference``: as JSON)."""
    page = reference_page(request.app[CATALOG])
    if _is_api(request):
        return _json(page.to_dict())
    return _html(request, "reference.html.j2", "Reference", page=page)


def _charts(s: TrendSeries) -> list[_Printed]:
    """The line's charts, one per metric, each text of a run in them through :func:`_printed` (the charts are not)."""
    shown = [
        tuple(str(_printed(v or "")) for v in (p.started[:16], p.image_tag, p.rel, p.verdict))
        for p in s.points
    ]
    charts = []
    for field, title, unit in METRICS:
        marks = [
            TrendMark(
                value=p.values[field],
                date=started[:10],
                tag=tag,
                tooltip=f"{started} {tag} {rel}: {p.values[field]}" + (f" ({verdict})" if verdict else ""),
                regressed=p.verdict == "regressed",
                good=p.valid and not p.partial and not p.client_bound,
            )
            for p, (started, tag, rel, verdict) in zip(s.points, shown, strict=True)
        ]
        charts.append(_Printed(trend_chart(title, unit, marks)))
    return charts


@off_loop
def trends(request: web.Request) -> web.Response:
    """``/trends``: one block of four charts per trend line (``/api/trends``: the trend lines' data)."""
    page = trends_page(request.app[CATALOG], TrendQuery.parse(request.query))
    if _is_api(request):
        return _json(page.to_dict())
    drawn = [(s, _charts(s)) for s in page.series]
    return _html(request, "trends.html.j2", "Trends", page=page, drawn=drawn)


# --------------------------------------------------------------------------------------------
# The application


async def _refresher(app: web.Application) -> AsyncIterator[None]:
    """Keep the catalogue fresh in a worker thread while the site runs (stops with it).

    Every ``refresh_s`` seconds, or less often where a refresh takes long (the pause is at least nine times the
    last refresh's duration, so a root of 10,000 runs costs at most a tenth of one core).
    """

    async def loop() -> None:
        pause = app[REFRESH_S]
        while True:
            await asyncio.sleep(pause)
            started = time.monotonic()
            try:
                await in_thread(app[CATALOG].refresh)
            except Exception:
                log.exception("catalogue refresh failed")
            # a large root: at most a tenth of the time goes to listing it
            pause = max(app[REFRESH_S], 9 * (time.monotonic() - started))

    task = asyncio.create_task(loop()) if app[REFRESH_S] > 0 else None
    yield
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def _root_label(root: str) -> str:
    """The root as the page header names it: its last folder name (the server's full path stays private).

    A URL's credentials are redacted first (``http://user:PASSWORD@host`` once named the password in every header).
    """
    shown = redact_url(root)
    return shown.rstrip("/").rsplit("/", 1)[-1] or shown


def make_app(catalog: Catalog, *, token: str | None = None, refresh_s: float = 2.0) -> web.Application:
    """The site over ``catalog``; ``token`` required on every request when given; ``refresh_s`` 0: no refresh."""
    app = web.Application(middlewares=[guard.guard, errors])
    app[CATALOG] = catalog
    app[CHOICES] = ChoiceCache()
    app[PAGES] = {}
    add_slots(app)
    app[guard.TOKEN_KEY] = token
    app[ROOT_LABEL] = _root_label(catalog.root)
    app[REFRESH_S] = refresh_s
    app.on_response_prepare.append(guard.add_headers)
    app.cleanup_ctx.append(guard.quiet_request_lines)
    app.cleanup_ctx.append(_refresher)
    r = app.router
    for path, handler in (
        ("/", index),
        ("/compare", compare),
        ("/reference", reference),
        ("/trends", trends),
    ):
        r.add_get(path, handler)
        r.add_get(f"/api{path if path != '/' else '/runs'}", handler)
    r.add_get("/api/runs/{flow}/{run}", api_run)
    r.add_get("/runs/{flow}/{run}", run_redirect)
    r.add_get("/runs/{flow}/{run}/", run_page)
    r.add_get("/runs/{flow}/{run}/files/{name}", run_file)
    return app
