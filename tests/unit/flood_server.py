"""An in-process HTTP server whose every answer is endless (a flood) or never comes (silent), for bounded-read tests.

``flood``: headers, then a ``text/plain`` body of Prometheus-looking lines as fast as the socket takes them, for ever
(round 15's ``gen/flood.py``). ``silent``: the request is taken and never answered. Loopback, port 0, its own event
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


@contextlib.contextmanager
def threaded_server(mode: str) -> Iterator[str]:
    """The base URL of a server answering every GET and POST in ``mode`` (``flood`` or ``silent``)."""
    handler = _flood if mode == "flood" else _silent
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
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
