"""An in-process HTTP server whose every answer is endless (a flood) or never comes (silent), for bounded-read tests.

``flood``: headers, then a ``text/plain`` body of Prometheus-looking lines as fast as the socket takes them, for ever
(round 15's ``gen/flood.py``). ``silent``: the request is taken and never answered. The ``questions-*`` modes answer
``GET /v1/models``, 404 to any other GET (``eval``'s probe moves on) and every POST (a question) as named: ``silent``,
``drip`` (headers, then a space a second), ``reject`` (HTTP 400) or ``refuse`` (HTTP 400 with a long message
holding a URL's password), as round 15's ``gen/hostile.py``. Loopback, port 0, its own event
loop in a thread, so a command line that runs its own loop can be pointed at it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator

from aiohttp import web

_LINE = b'vllm:num_requests_running{model_name="m"} 1\n' * 1024


async def _flood(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
    await resp.prepare(request)
    with contextlib.suppress(ConnectionError, asyncio.CancelledError):
        while True:
            await resp.write(_LINE)
    return resp


async def _silent(_request: web.Request) -> web.StreamResponse:
    await asyncio.sleep(3600)
    return web.Response()


async def _drip(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "application/json"})
    await resp.prepare(request)
    with contextlib.suppress(ConnectionError, asyncio.CancelledError):
        while True:
            await resp.write(b" ")
            await asyncio.sleep(1)
    return resp


async def _reject(_request: web.Request) -> web.Response:
    return web.json_response({"error": {"message": "no"}}, status=400)


REFUSAL = "temperature must be >= 0; see http://admin:hunter2@docs.example/x " + "y" * 1000
"""``questions-refuse``'s error message: a credential in a URL (redacted in any line) and far over 200 characters."""


async def _refuse(_request: web.Request) -> web.Response:
    return web.json_response({"error": {"message": REFUSAL}}, status=400)


async def _models(_request: web.Request) -> web.Response:
    return web.json_response({"object": "list", "data": [{"id": "m", "object": "model"}]})


async def _not_found(_request: web.Request) -> web.Response:
    return web.Response(status=404)


def _app(mode: str) -> web.Application:
    app = web.Application()
    if mode.startswith("questions-"):
        app.router.add_get("/v1/models", _models)
        app.router.add_get("/{tail:.*}", _not_found)
        post = {"silent": _silent, "drip": _drip, "reject": _reject, "refuse": _refuse}[
            mode.removeprefix("questions-")
        ]
        app.router.add_post("/{tail:.*}", post)
    else:
        app.router.add_route("*", "/{tail:.*}", _flood if mode == "flood" else _silent)
    return app


@contextlib.contextmanager
def threaded_server(mode: str) -> Iterator[str]:
    """The base URL of a server answering as ``mode`` says (``flood``, ``silent``, ``questions-*``)."""
    app = _app(mode)
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
    started = threading.Event()
    port: list[int] = []

    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        loop.run_until_complete(site.start())
        port.append(runner.addresses[0][1])
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    started.wait(10)
    try:
        yield f"http://127.0.0.1:{port[0]}"
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
