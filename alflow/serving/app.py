"""The kit of an OpenAI-compatible engine server: shared routes, middleware, serving, a thread, the CLI glue.

An engine (the simulator, the tiny CPU engine) implements :class:`ServingEngine`; :class:`OpenAIServer` gives it

- ``GET /health``, ``GET /version``, ``GET /v1/models``, ``GET <metrics path>``,
  ``POST /v1/completions`` and ``POST /v1/chat/completions``, ``POST /tokenize`` and ``POST /detokenize``
  (vLLM style), plus the engine's own routes;
- request bodies validated by :mod:`alflow.serving.requests` (a bad field: HTTP 400 naming it), an
  unknown model a 404, every error an OpenAI-style JSON body, an unexpected exception a 500 (logged)
  while the server keeps serving;
- vLLM's ``--api-key`` behaviour (``/v1/*`` needs ``Authorization: Bearer <key>``);
- the engine's marker header on every response.

:func:`run_app` binds and serves until stopped, :class:`ServerThread` runs a server on its own event
loop in a daemon thread (tests, notebooks), :func:`run_until_signalled` is the ``serve`` command's
main loop (SIGTERM and SIGINT stop it; the listening line goes to stdout once bound).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, Self

import orjson
from aiohttp import web

from alflow.errors import AlflowError, InvalidInputError
from alflow.serving.api import ApiError, check_api_key
from alflow.serving.requests import (
    MAX_BODY_BYTES,
    ChatRequest,
    CompletionRequest,
    DetokenizeRequest,
    TokenizeRequest,
    loads,
    parse,
)
from alflow.util.eventloop import new_event_loop
from alflow.util.signals import stop_signals

if TYPE_CHECKING:
    import typer

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
OnReady = Callable[[str, int], None]
Serve = Callable[[asyncio.Event, OnReady], Awaitable[None]]
"""``serve(stop, on_ready)``: serve until ``stop`` is set, calling ``on_ready(host, port)`` once bound."""

JSON = "application/json"


class ServingEngine(Protocol):
    """What an engine gives the kit (:class:`OpenAIServer`)."""

    header: tuple[str, str]
    """The marker header every response carries (``x-alflow-simulated: 1``)."""
    served_names: tuple[str, ...]
    """Model names a request may give (the first is the one ``/v1/models`` lists)."""
    metrics_path: str
    max_model_len: int
    api_key: str | None

    async def startup(self) -> None:
        """The application starts (engine loops begin)."""

    async def shutdown(self) -> None:
        """The application stops (engine loops end)."""

    def unhealthy(self) -> str | None:
        """Why the server cannot serve (``/health`` answers 503 with it), or None."""

    def version(self) -> dict[str, Any]:
        """``GET /version``."""

    def model_card(self) -> dict[str, Any]:
        """The engine's fields of its ``/v1/models`` entry (``owned_by``, ``root``, ...)."""

    def metrics(self) -> bytes:
        """Prometheus text of ``GET <metrics_path>``."""

    def tokenize(self, body: TokenizeRequest) -> list[int]:
        """Token ids of the prompt or the rendered messages."""

    def detokenize(self, ids: list[int]) -> str:
        """Text of token ids (:class:`InvalidInputError` for an id outside the vocabulary)."""

    async def generate(
        self, request: web.Request, body: CompletionRequest | ChatRequest
    ) -> web.StreamResponse:
        """Answer a validated completion or chat request (streaming or not)."""

    def routes(self) -> Sequence[tuple[str, str, Handler]]:
        """Extra ``(method, path, handler)`` routes of this engine (a dialect's endpoints)."""


def error_response(err: ApiError) -> web.Response:
    """The OpenAI-style JSON answer of ``err``."""
    return web.Response(status=err.status, body=err.body(), content_type=JSON)


async def open_stream(request: web.Request) -> web.StreamResponse:
    """A prepared ``text/event-stream`` answer (chunked on HTTP/1.1)."""
    resp = web.StreamResponse(
        status=200, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    if request.version >= (1, 1):
        resp.enable_chunked_encoding()
    await resp.prepare(request)
    return resp


async def read_json(request: web.Request) -> object:
    """The JSON value of the request body (invalid JSON: a 400)."""
    return loads(await request.read())


class OpenAIServer:
    """The OpenAI-compatible routes around one :class:`ServingEngine`."""

    def __init__(self, engine: ServingEngine) -> None:
        self.engine = engine
        self.created = int(time.time())
        self.requests = 0
        """Generation requests so far (the number in the last :meth:`request_id`)."""
        self._boot = os.urandom(4).hex()

    def request_id(self, chat: bool) -> str:
        """The next response id: ``chatcmpl-`` or ``cmpl-``, this server's boot tag and a counter."""
        self.requests += 1
        return f"{'chatcmpl' if chat else 'cmpl'}-{self._boot}{self.requests:06d}"

    def make_app(self) -> web.Application:
        """The aiohttp application with the shared routes and the engine's own."""
        app = web.Application(middlewares=[self._errors, self._auth], client_max_size=MAX_BODY_BYTES)
        app.on_response_prepare.append(self._mark)
        app.on_startup.append(lambda _app: self.engine.startup())
        app.on_shutdown.append(lambda _app: self.engine.shutdown())
        r = app.router
        r.add_get("/health", self._health)
        r.add_get("/version", self._version)
        r.add_get("/v1/models", self._models)
        r.add_post("/v1/chat/completions", self._generation(ChatRequest))
        r.add_post("/v1/completions", self._generation(CompletionRequest))
        r.add_post("/tokenize", self._tokenize)
        r.add_post("/detokenize", self._detokenize)
        r.add_get(self.engine.metrics_path, self._metrics)
        for method, path, handler in self.engine.routes():
            r.add_route(method, path, handler)
        return app

    async def _mark(self, _request: web.Request, response: web.StreamResponse) -> None:
        name, value = self.engine.header
        response.headers[name] = value

    @web.middleware
    async def _errors(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except ApiError as err:
            return error_response(err)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            return error_response(ApiError(exc.status, exc.reason or "error"))
        except (asyncio.CancelledError, ConnectionResetError):
            raise
        except Exception as exc:
            log.exception("unexpected error in %s %s", request.method, request.path)
            return error_response(ApiError(500, f"internal error: {exc}"))

    @web.middleware
    async def _auth(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """VLLM's ``--api-key``: /v1/* answers 401 without ``Authorization: Bearer <key>``."""
        check_api_key(request.path, request.headers.get("Authorization"), self.engine.api_key)
        return await handler(request)

    async def _health(self, _request: web.Request) -> web.Response:
        why = self.engine.unhealthy()
        return web.Response(status=200) if why is None else web.Response(status=503, text=why)

    async def _version(self, _request: web.Request) -> web.Response:
        return web.Response(body=orjson.dumps(self.engine.version()), content_type=JSON)

    async def _models(self, _request: web.Request) -> web.Response:
        name = self.engine.served_names[0]
        card = {"id": name, "object": "model", "created": self.created, "root": name, "parent": None}
        card.update(max_model_len=self.engine.max_model_len, **self.engine.model_card())
        return web.Response(body=orjson.dumps({"object": "list", "data": [card]}), content_type=JSON)

    async def _metrics(self, _request: web.Request) -> web.Response:
        return web.Response(body=self.engine.metrics(), content_type="text/plain", charset="utf-8")

    async def _tokenize(self, request: web.Request) -> web.Response:
        body = parse(TokenizeRequest, await read_json(request))
        ids = self.engine.tokenize(body)
        out = {"count": len(ids), "max_model_len": self.engine.max_model_len, "tokens": ids}
        return web.Response(body=orjson.dumps(out), content_type=JSON)

    async def _detokenize(self, request: web.Request) -> web.Response:
        body = parse(DetokenizeRequest, await read_json(request))
        try:
            text = self.engine.detokenize(body.tokens)
        except InvalidInputError as exc:
            raise ApiError(400, f"tokens: {exc}", "tokens") from None
        return web.Response(body=orjson.dumps({"prompt": text}), content_type=JSON)

    def _generation(self, kind: type[ChatRequest] | type[CompletionRequest]) -> Handler:
        """The handler of one generation endpoint: validate, check the model name, hand over to the engine."""

        async def generate(request: web.Request) -> web.StreamResponse:
            body = parse(kind, await read_json(request))
            names = self.engine.served_names
            if body.model is not None and body.model not in names:
                message = f"The model `{body.model}` does not exist; this server serves {names[0]!r}."
                raise ApiError(404, message, "model")
            return await self.engine.generate(request, body)

        return generate


# ------------------------------------------------------------------------------------ running


LISTEN_BACKLOG = 4096
"""Pending connections the socket queues (aiohttp's default, 128, overflowed when a thousand client streams
connect at once: each dropped SYN cost its request about 1 s of TTFT). The kernel caps it at somaxconn."""


async def listen(runner: web.AppRunner, host: str, port: int, error: type[AlflowError] = AlflowError) -> int:
    """Start listening on ``host:port``; the bound port (``port`` 0 picks one). A bind failure raises ``error``."""
    site = web.TCPSite(runner, host, port, backlog=LISTEN_BACKLOG)
    try:
        await site.start()
    except OSError as exc:
        raise error(f"cannot listen on {host}:{port}: {exc}") from None
    for addr in runner.addresses:
        if isinstance(addr, tuple) and len(addr) >= 2:
            return int(addr[1])
    return port


async def until_stopped(stop: asyncio.Event, broken: asyncio.Event | None = None) -> None:
    """Wait until ``stop`` is set or ``broken`` is (a multi-node group that lost a member)."""
    if broken is None:
        await stop.wait()
        return
    waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(broken.wait())]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waits:
            waiter.cancel()


async def run_app(
    app: web.Application,
    host: str,
    port: int,
    *,
    stop: asyncio.Event,
    on_ready: OnReady | None = None,
    error: type[AlflowError] = AlflowError,
    describe: Callable[[int], str] | None = None,
    broken: asyncio.Event | None = None,
) -> None:
    """Serve ``app`` on ``host:port`` until ``stop`` (or ``broken``) is set; ``on_ready(host, port)`` once bound.

    ``describe(port)`` is logged once bound (what is served, where).
    """
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    try:
        bound = await listen(runner, host, port, error)
        if describe is not None:
            log.info("%s", describe(bound))
        if on_ready is not None:
            on_ready(host, bound)
        await until_stopped(stop, broken)
    finally:
        await runner.cleanup()


def listening_line(prefix: str, host: str, port: int) -> str:
    """The one line a server prints on stdout once bound (``PREFIX http://HOST:PORT``)."""
    shown = f"[{host}]" if ":" in host else host
    return f"{prefix}http://{shown}:{port}"


def run_until_signalled(serve: Serve, prefix: str) -> None:
    """Serve until SIGTERM or SIGINT on a new event loop; print :func:`listening_line` on stdout once bound."""
    loop = new_event_loop()
    asyncio.set_event_loop(loop)
    stop = asyncio.Event()

    def ready(host: str, port: int) -> None:
        sys.stdout.write(listening_line(prefix, host, port) + "\n")
        sys.stdout.flush()

    for sig in stop_signals():  # SIGHUP too (a closed terminal), unless nohup ignores it
        loop.add_signal_handler(sig, stop.set)
    try:
        loop.run_until_complete(serve(stop, ready))
    finally:
        loop.close()


def serve_group(
    command: Callable[..., None],
    help_text: str,
    *,
    standalone: bool = False,
    context_settings: dict[str, Any] | None = None,
) -> typer.Typer:
    """A typer group whose one command is ``serve`` (``standalone``: ``python -m alflow.sim`` or ``.tiny``)."""
    import typer  # the command line only: servers in threads do without it

    group = typer.Typer(help=help_text, no_args_is_help=True, add_completion=not standalone)
    if standalone:
        group.callback()(lambda: None)  # a group, not the one command, even with one command
    group.command("serve", context_settings=context_settings)(command)
    return group


class ServerThread:
    """A server on its own event loop in a daemon thread: ``start()`` waits until it listens, ``stop()`` ends it."""

    def __init__(self, serve: Serve, host: str, *, name: str, error: type[AlflowError] = AlflowError) -> None:
        self.host = host
        self.port = 0
        self._serve_fn = serve
        self._error_type = error
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)

    @property
    def base_url(self) -> str:
        """``http://HOST:PORT``."""
        return f"http://{self.host}:{self.port}"

    def _main(self) -> None:
        loop = new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._serve())
        except BaseException as exc:  # reported to the starting thread
            self._error = exc
        finally:
            self._ready.set()
            loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()

        def ready(_host: str, port: int) -> None:
            self.port = port
            self._ready.set()

        await self._serve_fn(self._stop, ready)

    def request_stop(self) -> None:
        """Ask the server to stop (from any thread; also from the server's own loop)."""
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stop.set)

    def start(self, timeout_s: float = 30.0) -> Self:
        """Start the thread and wait until the server listens (its start error is raised here)."""
        self._thread.start()
        if not self._ready.wait(timeout_s):
            raise self._error_type(f"{self._thread.name} did not start within {timeout_s} s")
        if self._error is not None or self.port == 0:
            raise self._error_type(f"{self._thread.name} failed to start: {self._error}") from self._error
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the server and join the thread."""
        self.request_stop()
        self._thread.join(timeout_s)

    def __enter__(self) -> Self:
        """The handle (started by :meth:`start`, stopped when the block ends)."""
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()
