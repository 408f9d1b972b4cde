"""The fast HTTP/1.1 transport against a raw loopback server that writes scripted bytes."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Sequence

import orjson
import pytest

from alflow.loadgen import fast as fast_module
from alflow.loadgen.client import AiohttpTransport, FatalRequestError, stream_request
from alflow.loadgen.endpoints import CompletionsEndpoint
from alflow.loadgen.fast import FastTransport
from alflow.loadgen.records import RequestRecord

pytestmark = pytest.mark.unit

Reply = Callable[[int], Sequence[bytes]]  # request number -> pieces to write (each its own write)


def sse(*texts: str, usage: int | None = None, done: bool = True) -> bytes:
    out = b"".join(b"data: " + orjson.dumps({"choices": [{"index": 0, "text": t}]}) + b"\n\n" for t in texts)
    if usage is not None:
        out += b"data: " + orjson.dumps(
            {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": usage}}
        )
        out += b"\n\n"
    return out + (b"data: [DONE]\n\n" if done else b"")


def chunked(payload: bytes, sizes: Sequence[int] = (7, 3, 50)) -> bytes:
    out = b""
    i = 0
    k = 0
    while i < len(payload):
        n = sizes[k % len(sizes)]
        part = payload[i : i + n]
        out += b"%x;ext=1\r\n%b\r\n" % (len(part), part)
        i += n
        k += 1
    return out + b"0\r\nX-Trailer: yes\r\n\r\n"


HEAD_CHUNKED = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\nTransfer-Encoding: chunked\r\n\r\n"
)


class RawServer:
    """Answers each request with ``reply(n)``; counts connections; optional close after reply."""

    def __init__(self, reply: Reply, *, close_after: bool = False, delay_s: float = 0.0) -> None:
        self.reply = reply
        self.close_after = close_after
        self.delay_s = delay_s
        self.connections = 0
        self.requests = 0
        self.server: asyncio.Server | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
                n = self.requests
                self.requests += 1
                pieces = self.reply(n)
                if not pieces:  # drop the connection without answering (a stale keep-alive)
                    break
                for piece in pieces:
                    writer.write(piece)
                    await writer.drain()
                    if self.delay_s:
                        await asyncio.sleep(self.delay_s)
                if self.close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/v1/completions"

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()


@pytest.fixture(params=["kernel-stamps", "kernel-stamps-python", "clock"])
def fast(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> FastTransport:
    """The fast transport every way: reading its sockets with kernel receive stamps (Linux) through the C read
    where it was built and through Python's ``recvmsg_into``, and on the clock."""
    if request.param == "kernel-stamps-python":
        monkeypatch.setattr(fast_module, "_recv_stamped", None)
    return FastTransport(kernel_stamps=request.param != "clock")


async def send(transport: object, url: str, timeout_s: float | None = 5.0) -> RequestRecord:
    rec = RequestRecord(request_id=0, session_id="s")
    await stream_request(transport, url, b"{}", CompletionsEndpoint(), rec, timeout_s=timeout_s)  # type: ignore[arg-type]
    return rec


@pytest.mark.parametrize("piece", [1, 2, 5, 13, 10_000])
async def test_chunked_stream_split_at_any_byte(piece: int, fast: FastTransport) -> None:
    wire = HEAD_CHUNKED + chunked(sse("a", "b", "c", usage=3))
    pieces = [wire[i : i + piece] for i in range(0, len(wire), piece)]
    async with RawServer(lambda n: pieces) as url:
        rec = await send(fast, url)
        rec2 = await send(fast, url)  # same connection, after the trailer was consumed
    await fast.close()
    for r in (rec, rec2):
        assert r.ok, r.error
        assert r.text == "abc"
        assert r.output_tokens == 3
        assert len(r.chunk_ns) == 3


async def test_one_chunk_per_read_fast_path(fast: FastTransport) -> None:
    events = [sse("a", done=False), sse("b", done=False), sse(usage=2, done=False), b"data: [DONE]\n\n"]
    pieces = [HEAD_CHUNKED] + [b"%x\r\n%b\r\n" % (len(e), e) for e in events] + [b"0\r\n\r\n"]
    async with RawServer(lambda n: pieces, delay_s=0.005) as url:
        rec = await send(fast, url)
        again = await send(fast, url)
    await fast.close()
    for r in (rec, again):
        assert r.ok, r.error
        assert r.text == "ab"
        assert r.output_tokens == 2
        assert len(r.chunk_ns) == 2
        assert r.chunk_ns[1] - r.chunk_ns[0] >= 4_000_000  # separate reads, 5 ms apart


async def test_keep_alive_reuses_one_connection(fast: FastTransport) -> None:
    srv = RawServer(lambda n: [HEAD_CHUNKED, chunked(sse("x", usage=1))])
    async with srv as url:
        for _ in range(5):
            assert (await send(fast, url)).ok
    await fast.close()
    assert srv.requests == 5
    assert srv.connections == 1


async def test_closed_idle_connections_are_not_reused(fast: FastTransport) -> None:
    srv = RawServer(lambda n: [HEAD_CHUNKED, chunked(sse("x", usage=1))], close_after=True)
    async with srv as url:
        for _ in range(3):
            rec = await send(fast, url)
            await asyncio.sleep(0.02)  # let the close arrive first
            assert rec.ok, rec.error
    await fast.close()
    assert srv.connections == 3


async def test_a_stale_keep_alive_connection_is_retried_once_on_a_new_one(fast: FastTransport) -> None:
    ok = [HEAD_CHUNKED, chunked(sse("x", usage=1))]
    srv = RawServer(lambda n: [] if n == 1 else ok)  # the 2nd request finds its connection dropped
    async with srv as url:
        first = await send(fast, url)
        second = await send(fast, url)
    await fast.close()
    assert first.ok, first.error
    assert second.ok, second.error
    assert srv.requests == 3
    assert srv.connections == 2


async def test_content_length_and_close_delimited_bodies(fast: FastTransport) -> None:
    body = sse("p", "q", usage=2)
    cl = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n%b" % (
        len(body),
        body,
    )
    eof = b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n" + body
    async with RawServer(lambda n: [cl]) as url:
        assert (await send(fast, url)).text == "pq"
    async with RawServer(lambda n: [eof[:20], eof[20:]], close_after=True) as url:
        rec = await send(fast, url)
        assert rec.ok, rec.error
        assert rec.text == "pq"
    await fast.close()


async def test_error_status_bodies_and_fatal_statuses(fast: FastTransport) -> None:
    err = b'{"error": {"message": "bad prompt"}}'
    r400 = b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%b" % (
        len(err),
        err,
    )
    r404 = b"HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: 9\r\n\r\nNot Found"
    async with RawServer(lambda n: [r400] if n == 0 else [r404]) as url:
        rec = await send(fast, url)
        assert rec.error is not None
        assert "HTTP 400" in rec.error
        assert "bad prompt" in rec.error
        with pytest.raises(FatalRequestError, match="HTTP 404"):
            await send(fast, url)
    await fast.close()


async def test_lost_connection_mid_stream_and_timeout_fail_the_request(fast: FastTransport) -> None:
    partial = HEAD_CHUNKED + chunked(sse("a", done=False))[:-5]
    async with RawServer(lambda n: [partial], close_after=True) as url:
        rec = await send(fast, url)
    assert rec.error is not None
    assert "connection lost" in rec.error
    assert rec.chunk_ns  # what arrived before the loss is kept
    async with RawServer(lambda n: [HEAD_CHUNKED, chunked(sse("a")), b""], delay_s=1.0) as url:
        rec = await send(fast, url, timeout_s=0.2)
    assert rec.error == "timed out after 0.2 s"
    await fast.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("kind", ["fast", "aiohttp"])
async def test_unreachable_is_fatal_for_both_transports(kind: str, fast: FastTransport) -> None:
    url = f"http://127.0.0.1:{_free_port()}/v1/completions"
    if kind == "fast":
        with pytest.raises(FatalRequestError, match="cannot reach"):
            await send(fast, url)
        await fast.close()
    else:
        async with AiohttpTransport.new_session() as http:
            with pytest.raises(FatalRequestError, match="cannot reach"):
                await send(AiohttpTransport(http), url)


async def test_aiohttp_transport_reads_the_same_wire() -> None:
    wire = HEAD_CHUNKED + chunked(sse("a", "b", usage=2))
    async with RawServer(lambda n: [wire[:30], wire[30:]]) as url, AiohttpTransport.new_session() as http:
        rec = await send(AiohttpTransport(http), url)
    assert rec.ok, rec.error
    assert rec.text == "ab"
    assert len(rec.chunk_ns) == 2


@pytest.mark.parametrize(
    ("wire", "why"),
    [
        (
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 12x\r\n\r\n",
            "invalid character in content-length",
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 5\r\nContent-Length: 9\r\n\r\n",
            "duplicate content-length",
        ),
        (HEAD_CHUNKED + b"zz\r\n" + sse("a") + b"\r\n0\r\n\r\n", "invalid character in chunk size"),
        (HEAD_CHUNKED + b"3\r\nabcdef\r\n0\r\n\r\n", "expected lf after chunk data"),
        (b"HTP/1.1 200 OK\r\n\r\n", "expected http/"),
        (b"HTTP/1.1 2x0 OK\r\n\r\n", "invalid status code"),
    ],
    ids=["bad-length", "two-lengths", "bad-chunk-size", "chunk-overrun", "bad-protocol", "bad-status"],
)
async def test_a_malformed_response_fails_the_request_naming_it_and_drops_the_connection(
    wire: bytes, why: str, fast: FastTransport
) -> None:
    srv = RawServer(lambda n: [wire] if n == 0 else [HEAD_CHUNKED, chunked(sse("ok", usage=1))])
    async with srv as url:
        bad = await send(fast, url)
        good = await send(fast, url)  # the broken connection is not reused
    await fast.close()
    assert bad.error is not None
    assert bad.error.startswith("MalformedResponseError: malformed HTTP response"), bad.error
    assert why in bad.error.lower(), bad.error
    assert good.ok, good.error
    assert good.text == "ok"
    assert srv.connections == 2


async def test_an_early_close_before_the_head_ends_or_inside_a_length_delimited_body_fails(
    fast: FastTransport,
) -> None:
    async with RawServer(lambda n: [b"HTTP/1.1 200 OK\r\nContent-Type: text/ev"], close_after=True) as url:
        cut_head = await send(fast, url)
    body = sse("a", "b", usage=2)
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n" % len(body)
    async with RawServer(lambda n: [head + body[:20]], close_after=True) as url:
        cut_body = await send(fast, url)
    await fast.close()
    for rec in (cut_head, cut_body):
        assert rec.error is not None
        assert "connection lost" in rec.error
    assert not cut_head.chunk_ns
