"""A small OpenAI-style streaming server for client tests (aiohttp, loopback, port 0).

It answers ``/v1/chat/completions`` and ``/v1/completions`` with ``max_tokens`` chunks of one token,
``delay_s`` apart, a usage chunk and ``[DONE]``; it remembers request bodies and the peak number of
concurrent streams. Behaviour switches by model name: ``error-event``, ``no-done``, ``json``, ``lying-usage``
(the usage chunk claims 100,000 completion tokens).
Every request's path, ``Authorization`` and ``Host`` headers are kept in ``state.seen``.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web


@dataclass
class ServerState:
    """What the server saw."""

    delay_s: float = 0.0
    bodies: list[dict[str, Any]] = field(default_factory=list)
    in_flight: int = 0
    peak: int = 0
    starts: list[float] = field(default_factory=list)
    metrics_text: str = ""
    reject: bool = False
    seen: list[tuple[str, str | None, str | None]] = field(default_factory=list)
    """(path, Authorization header, Host header) of every request."""


STATE: web.AppKey[ServerState] = web.AppKey("state", ServerState)


async def _stream(request: web.Request) -> web.StreamResponse:
    state: ServerState = request.app[STATE]
    body = orjson.loads(await request.read())
    state.bodies.append(body)
    state.starts.append(asyncio.get_running_loop().time())
    model = body.get("model", "")
    if state.reject:
        return web.json_response(
            {"error": {"message": "token id out of vocabulary", "code": 400}}, status=400
        )
    if model == "json":
        return web.json_response({"choices": [{"message": {"content": "hi"}}]})
    chat = request.path.endswith("chat/completions")
    state.in_flight += 1
    state.peak = max(state.peak, state.in_flight)
    try:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        n = int(body.get("max_tokens", 16))
        if chat:
            last = body["messages"][-1]["content"]
            turn = sum(1 for m in body["messages"] if m["role"] == "user")
        for i in range(n):
            if state.delay_s:
                await asyncio.sleep(state.delay_s)
            if model == "error-event" and i == 1:
                await resp.write(b'data: {"error": {"message": "boom", "code": 500}}\n\n')
                return resp
            text = f"[{turn}:{last[:8]}]" if chat and i == 0 else f" t{i}"
            choice = {"index": 0, "delta": {"content": text}} if chat else {"index": 0, "text": text}
            await resp.write(b"data: " + orjson.dumps({"choices": [choice]}) + b"\n\n")
        claimed = 100_000 if model == "lying-usage" else n
        usage = {"prompt_tokens": 7, "completion_tokens": claimed, "total_tokens": claimed + 7}
        await resp.write(b"data: " + orjson.dumps({"choices": [], "usage": usage}) + b"\n\n")
        if model != "no-done":
            await resp.write(b"data: [DONE]\n\n")
        return resp
    finally:
        state.in_flight -= 1


async def _metrics(request: web.Request) -> web.Response:
    state: ServerState = request.app[STATE]
    return web.Response(text=state.metrics_text, content_type="text/plain")


async def _json_metrics(request: web.Request) -> web.Response:
    return web.json_response([{"iter": 1}])


async def _models(_request: web.Request) -> web.Response:
    return web.json_response({"object": "list", "data": [{"id": "served-model", "object": "model"}]})


@web.middleware
async def _record(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    request.app[STATE].seen.append(
        (request.path, request.headers.get("Authorization"), request.headers.get("Host"))
    )
    return await handler(request)


async def _detokenize(request: web.Request) -> web.Response:
    body = orjson.loads(await request.read())
    return web.json_response({"prompt": " ".join(f"w{t}" for t in body["tokens"])})


class SseServer:
    """Async context manager: ``async with SseServer() as srv: srv.base_url``."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.state = ServerState(delay_s=delay_s)
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> SseServer:
        app = web.Application(middlewares=[_record])
        app[STATE] = self.state
        app.router.add_get("/v1/models", _models)
        app.router.add_post("/v1/chat/completions", _stream)
        app.router.add_post("/v1/completions", _stream)
        app.router.add_get("/metrics", _metrics)
        app.router.add_get("/json-metrics", _json_metrics)
        app.router.add_post("/detokenize", _detokenize)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()


@contextlib.contextmanager
def threaded_sse_server() -> Iterator[SseServer]:
    """An :class:`SseServer` on its own event loop in a thread (for a CLI that runs its own loop)."""
    loop = asyncio.new_event_loop()
    server = SseServer()
    started = threading.Event()

    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(server.__aenter__())
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert started.wait(10)
    try:
        yield server
    finally:
        asyncio.run_coroutine_threadsafe(server.__aexit__(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
