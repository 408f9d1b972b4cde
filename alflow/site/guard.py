"""What keeps the site read-only, confined to its root and closed to strangers.

- Methods: GET and HEAD only; anything else is 405 (with ``Allow``), before any other check.
- Paths: a request path holding ``..``, a backslash, NUL or a percent-encoded dot, slash, backslash or NUL
  (``%2e``, ``%2f``, ``%5c``, ``%00``) is refused (400) before routing; routes then only accept names that
  look like a flow and a run directory (:data:`alflow.results.catalog.RUN_DIR`) of the catalogue and file
  names the run's manifest lists, and a file whose real path (symlinks resolved) leaves the root, or that is no
  regular file (a FIFO, a device), is refused (404) and never opened (:func:`read_confined`; a report is not
  rendered from a run holding one: :func:`unsafe_file`). No error echoes the path; aiohttp's own log of a request
  it cannot parse keeps the error's kind only (:class:`RequestLineFilter`: its text quotes the query).
- Without a token (loopback only), a request whose ``Host`` is not a loopback name or address is refused (421):
  no page of another site can read this one through DNS rebinding (:func:`loopback_name`).
- The token: with one configured (required when the host is not loopback: :func:`check_bind`), every request
  carries it as ``Authorization: Bearer``, as a cookie set on the first visit, or once as ``?token=`` (then it
  is moved into an ``HttpOnly; SameSite=Strict`` cookie, ``Secure`` too when the browser came over HTTPS, and
  the URL without it). Compared with
  :func:`hmac.compare_digest`; never logged (the access log leaves the query string out) nor echoed.
- Headers on every answer, errors included: a Content-Security-Policy that allows inline styles and
  ``data:`` images only (no script, no external resource), ``nosniff``, ``no-referrer``; an HTML file a run
  stored is shown sandboxed besides (no form, meta refresh, ``<base>`` or framing).
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Final
from urllib.parse import parse_qsl, urlencode

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger
from aiohttp.http_exceptions import HttpProcessingError

from alflow.errors import InvalidInputError
from alflow.util.names import check_host

MIN_TOKEN_CHARS: Final = 16
"""The shortest token the site takes: 16 random hex characters are 64 bits, beyond guessing over HTTP. There is no
lockout after wrong tries: behind a team's proxy every browser has one address, and a lockout would let anyone who
can reach the site shut the team out by sending wrong tokens."""
TOKEN_COOKIE: Final = "alflow_site_token"  # noqa: S105 - the cookie's name, not a secret
TOKEN_PARAM: Final = "token"  # noqa: S105 - the query parameter's name
HEADERS: Final = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src data:",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
ALLOWED_METHODS: Final = ("GET", "HEAD")
_BAD_RAW: Final = re.compile(r"%(2e|2f|5c|00)|\\|\x00", re.IGNORECASE)
TOKEN_KEY: web.AppKey[str | None] = web.AppKey("token", str | None)  # type: ignore[arg-type]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def is_loopback(host: str) -> bool:
    """Whether ``host`` binds to loopback only: ``localhost``, 127.0.0.0/8 or ``::1``."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def loopback_name(host_header: str | None) -> bool:
    """Whether a request's ``Host`` (``name[:port]``) names loopback; a request without one counts as such.

    A site without a token answers such requests only: a page elsewhere cannot read it through DNS rebinding
    (``evil.example`` re-pointed at 127.0.0.1 is still ``Host: evil.example``).
    """
    if host_header is None:
        return True  # no browser sends a request without Host
    name = host_header.strip()
    if name.startswith("["):
        name = name[: name.find("]") + 1]
    elif name.count(":") == 1:
        name = name.partition(":")[0]
    if name.lower() == "localhost.":  # the fully qualified form of the same name
        name = name[:-1]
    return is_loopback(name)


def check_bind(host: str, token_env: str | None) -> str | None:
    """The token to require: the value of ``token_env``; refused when a non-loopback host has none.

    Raises :class:`InvalidInputError` (one line naming the option and what is allowed) before anything binds; a host
    that is no address or host name (``a..b``, a control character) too, token or not (round 17: a traceback).
    """
    try:
        check_host(host, what="--host")
    except ValueError as exc:
        raise InvalidInputError(str(exc)) from None
    if token_env is None:
        if is_loopback(host):
            return None
        raise InvalidInputError(
            f"--host {host!r} is not loopback (127.0.0.0/8, ::1, localhost): give --token-env NAME, the "
            "environment variable that holds the access token every request must carry"
        )
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", token_env):
        raise InvalidInputError(f"--token-env {token_env!r}: must be an environment variable name")
    value = os.environ.get(token_env, "")
    if not value.strip():
        raise InvalidInputError(
            f"--token-env {token_env}: the environment variable is not set or empty; set it to the access token"
        )
    if len(value) < MIN_TOKEN_CHARS:  # the length only: the value is never shown
        raise InvalidInputError(
            f"--token-env {token_env}: the token has {len(value)} characters; at least {MIN_TOKEN_CHARS} are "
            "needed (a random one: openssl rand -hex 16)"
        )
    return value


def _same(given: str, token: str) -> bool:
    """Whether ``given`` is the token, in constant time; a header's undecodable bytes (surrogates) compare as bytes."""
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), token.encode())


def _without_token(request: web.Request) -> str:
    """The request's path and query with the token parameter removed (from the raw query: no re-encoding)."""
    pairs = [(k, v) for k, v in parse_qsl(request.query_string, keep_blank_values=True) if k != TOKEN_PARAM]
    path = "/" + request.raw_path.split("?", 1)[0].lstrip("/")  # never //host: no redirect off the site
    return path + ("?" + urlencode(pairs) if pairs else "")


def _authorized(request: web.Request, token: str) -> bool:
    scheme, _, given = request.headers.get("Authorization", "").strip().partition(" ")
    # the scheme's case does not matter (RFC 7235)
    if scheme.lower() == "bearer" and _same(given.strip(), token):
        return True
    cookie = request.cookies.get(TOKEN_COOKIE)
    return cookie is not None and _same(cookie, token)


def _plain(status: int, text: str, **headers: str) -> web.Response:
    """A short text answer (``text`` is a fixed message: it never holds a request's path or value)."""
    return web.Response(status=status, text=text + "\n", content_type="text/plain", headers=headers)


@web.middleware
async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Methods, raw path and token checks, in that order (see the module doc)."""
    if request.method not in ALLOWED_METHODS:
        return _plain(405, "405 method not allowed: this site is read-only", Allow=", ".join(ALLOWED_METHODS))
    raw = request.raw_path.split("?", 1)[0]
    if (
        _BAD_RAW.search(raw)
        or ".." in raw.split("/")
        or "\x00" in request.path
        or ".." in request.path.split("/")
    ):
        return _plain(400, "400 bad request: the path holds a forbidden sequence")
    token = request.app[TOKEN_KEY]
    if token is None:
        if not loopback_name(request.headers.get("Host")):
            return _plain(
                421,
                "421 misdirected request: without a token this site answers to a loopback address only "
                "(http://127.0.0.1:PORT/, http://localhost:PORT/)",
            )
        return await handler(request)
    given = request.query.get(TOKEN_PARAM)
    if given is not None:
        if not _same(given, token):
            return _plain(401, "401 unauthorized: wrong token", **{"WWW-Authenticate": "Bearer"})
        response = web.Response(status=303, headers={"Location": _without_token(request)})
        response.set_cookie(
            TOKEN_COOKIE, token, httponly=True, samesite="Strict", path="/", secure=_over_https(request)
        )
        return response
    if not _authorized(request, token):
        return _plain(
            401, "401 unauthorized: give the token (Authorization: Bearer)", **{"WWW-Authenticate": "Bearer"}
        )
    return await handler(request)


def _over_https(request: web.Request) -> bool:
    """True when the browser reached the site over HTTPS: directly, or through a proxy that says so.

    ``X-Forwarded-Proto: https`` is taken as it comes: it can only make the cookie ``Secure`` (sent back over HTTPS
    only), so a client that sends it falsely over plain HTTP loses its own cookie and gains nothing.
    """
    forwarded = request.headers.get("X-Forwarded-Proto", "").split(",")[0].strip().lower()
    return request.secure or forwarded == "https"


async def add_headers(_request: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare``: the security headers on every answer."""
    for name, value in HEADERS.items():
        response.headers.setdefault(name, value)


class PathOnlyAccessLogger(AbstractAccessLogger):
    """One access-log line per request: method, path (never the query: it may hold the token), status, time."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        # the path percent-encoded as received: no control character in the log
        path = request.raw_path.split("?", 1)[0]
        self.logger.info("%s %s %s %.1fms", request.method, path, response.status, time * 1000)


class RequestLineFilter(logging.Filter):
    """Keeps a request aiohttp cannot parse out of its log.

    The error's text quotes the request line, and so its query (``?token=``): the record keeps the error's kind
    and status only. Other records pass as they are.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError):
            record.msg = f"{record.getMessage()}: {type(exc).__name__} ({exc.code})"
            record.args = ()
            record.exc_info = None
            record.exc_text = None
        return True


SERVER_LOGGER: Final = "aiohttp.server"


async def quiet_request_lines(_app: web.Application) -> AsyncIterator[None]:
    """``cleanup_ctx``: :class:`RequestLineFilter` on aiohttp's server log while the site runs."""
    flt = RequestLineFilter()
    logger = logging.getLogger(SERVER_LOGGER)
    logger.addFilter(flt)
    try:
        yield
    finally:
        logger.removeFilter(flt)
