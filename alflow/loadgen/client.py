"""The streaming HTTP client: one aiohttp session, incremental SSE parsing on bytes, orjson.

The transport is a seam (:class:`Transport`): the real one is :class:`AiohttpTransport`; tests
drive :func:`stream_request` with a scripted transport and a scripted clock. Per network read the
client takes one clock reading; per SSE ``data:`` line it does one ``orjson.loads``; nothing else
is computed while streaming (metrics come afterwards from the records).

Every SSE event that carries output gets its own entry in ``chunk_ns`` (the arrival time of the
network read that brought it): events that arrive together share a timestamp, as in
``vllm bench serve``, so ``len(chunk_ns)`` counts server chunks (engine steps), not TCP reads.

A request fails (its record gets ``error``) on: an HTTP status other than 200, an error event in
a 200 stream, a stream that ends without ``[DONE]``, a stream with no output (usage only), or a
timeout. An unreachable server, a wrong endpoint (404/405) or a server that does not stream raise
:class:`FatalRequestError`: the run cannot produce anything useful and is aborted.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Final, Protocol

import aiohttp
import orjson

from alflow.errors import AlflowError
from alflow.loadgen.endpoints import Endpoint
from alflow.loadgen.records import RequestRecord

Clock = Callable[[], int]
FATAL_STATUS: Final = frozenset({401, 403, 404, 405})
_JSON_HEADERS: Final = {"Content-Type": "application/json", "Accept": "text/event-stream"}


class FatalRequestError(AlflowError):
    """The server cannot serve this run at all (unreachable, wrong endpoint, not streaming)."""


class StreamResponse(Protocol):
    """What the client needs from an HTTP response."""

    status: int
    content_type: str

    def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives, one item per network read."""
        ...

    async def text(self) -> str:
        """The whole body as text (for error messages)."""
        ...


class Transport(Protocol):
    """Sends one POST and yields its streaming response."""

    def post(
        self, url: str, body: bytes, timeout_s: float | None
    ) -> AbstractAsyncContextManager[StreamResponse]:
        """Open ``url`` with ``body``; the context manager closes the response."""
        ...


class _AiohttpResponse:
    __slots__ = ("_resp", "content_type", "status")

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self._resp = resp
        self.status = resp.status
        self.content_type = resp.content_type

    def chunks(self) -> AsyncIterator[bytes]:
        return self._resp.content.iter_any()

    async def text(self) -> str:
        return await self._resp.text(errors="replace")


class AiohttpTransport:
    """The real transport: one shared ``aiohttp.ClientSession`` with an unlimited connector."""

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self._session = session

    @staticmethod
    def new_session(limit: int = 0) -> aiohttp.ClientSession:
        """A client session suited to many long streams (no connection cap unless ``limit``)."""
        connector = aiohttp.TCPConnector(limit=limit, limit_per_host=0, ttl_dns_cache=300)
        return aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=30),
            auto_decompress=False,
            read_bufsize=2**18,
        )

    @asynccontextmanager
    async def post(self, url: str, body: bytes, timeout_s: float | None) -> AsyncIterator[StreamResponse]:
        """POST ``body`` to ``url`` with a total timeout of ``timeout_s`` seconds."""
        timeout = aiohttp.ClientTimeout(total=timeout_s) if timeout_s else aiohttp.ClientTimeout(total=None)
        async with self._session.post(url, data=body, headers=_JSON_HEADERS, timeout=timeout) as resp:
            yield _AiohttpResponse(resp)


def _error_text(event: dict[str, Any]) -> str:
    err = event.get("error", event)
    if isinstance(err, dict):
        msg = err.get("message") or err.get("msg") or orjson.dumps(err).decode()
        code = err.get("code") or err.get("type")
        return f"error event in stream: {msg}" + (f" (code {code})" if code else "")
    return f"error event in stream: {err}"


async def stream_request(
    transport: Transport,
    url: str,
    body: bytes,
    endpoint: Endpoint,
    record: RequestRecord,
    *,
    clock: Clock = time.perf_counter_ns,
    timeout_s: float | None = None,
    keep_text: bool = True,
) -> RequestRecord:
    """Send one streaming request and fill ``record`` with timestamps, usage, text and error.

    Raises :class:`FatalRequestError` when the server cannot serve the run (see module doc).
    """
    output = endpoint.output
    loads = orjson.loads
    chunk_ns = record.chunk_ns
    pieces: list[str] = []
    done = False
    event_name = b""
    record.start_ns = clock()
    try:
        async with transport.post(url, body, timeout_s) as resp:
            record.http_status = resp.status
            if resp.status != 200:
                detail = (await resp.text())[:300].strip()
                msg = f"POST {url} answered HTTP {resp.status}: {detail}"
                if resp.status in FATAL_STATUS:
                    raise FatalRequestError(msg + " (wrong --base-url, --endpoint or --model?)")
                record.error = msg
                return record
            if resp.content_type != "text/event-stream":
                raise FatalRequestError(
                    f"POST {url} answered {resp.content_type or 'no content type'}, not a text/event-stream: "
                    "the server does not stream"
                )
            buf = b""
            async for received in resp.chunks():
                now = clock()
                data = buf + received if buf else received
                start = 0
                while True:
                    nl = data.find(b"\n", start)
                    if nl < 0:
                        break
                    line = data[start:nl]
                    start = nl + 1
                    if not line.startswith(b"data:"):
                        if line.startswith(b"event:"):
                            event_name = line[6:].strip()
                        continue
                    payload = line[5:].strip()
                    if payload == b"[DONE]":
                        done = True
                        continue
                    event = loads(payload)
                    if event_name == b"error" or "error" in event:
                        record.error = _error_text(event)
                        return record
                    text, has_output = output(event)
                    if has_output:
                        chunk_ns.append(now)
                        if text and keep_text:
                            pieces.append(text)
                    usage = event.get("usage")
                    if usage:
                        record.input_tokens = usage.get("prompt_tokens")
                        record.output_tokens = usage.get("completion_tokens")
                buf = data[start:]
            if not done:
                record.error = "stream ended without [DONE]"
            elif not chunk_ns:
                record.error = "stream carried no output tokens (usage only)"
    except FatalRequestError as exc:
        record.error = str(exc)
        raise
    except aiohttp.ClientConnectorError as exc:
        record.error = f"cannot reach {url}: {exc.os_error or exc}"
        raise FatalRequestError(record.error) from exc
    except TimeoutError:
        record.error = f"timed out after {timeout_s} s"
    except aiohttp.ClientError as exc:
        record.error = f"{type(exc).__name__}: {exc}"
    except orjson.JSONDecodeError as exc:
        record.error = f"malformed stream event: {exc}"
    except asyncio.CancelledError:
        record.error = "cancelled"
        raise
    finally:
        record.done_ns = clock()
        if chunk_ns:
            record.first_token_ns = chunk_ns[0]
            record.end_ns = chunk_ns[-1]
        if keep_text:
            record.text = "".join(pieces)
    return record
