"""The fast transport: HTTP/1.1 on plain ``asyncio`` protocols, with kernel receive stamps on Linux.

:class:`FastTransport` keeps a keep-alive connection pool. Each network read is parsed by ``httptools``
(llhttp, the parser of Node.js and uvicorn: status line, headers, Content-Length and chunked framing) inside the
connection's read callback, so a streamed chunk costs no task switch; the waiting coroutine wakes once, when the
response ends. A response llhttp rejects fails the request with :class:`MalformedResponseError`.

Plain-HTTP connections on Linux read their socket themselves (:class:`_StampedConnection`) to date each read with
the kernel's receive stamp (:mod:`alflow.loadgen.rxstamp`); TLS connections and other platforms use the clock.
"""

from __future__ import annotations

import asyncio
import base64
import socket
import ssl
import time
from collections.abc import Mapping
from typing import Final, cast
from urllib.parse import unquote, urlsplit

import httptools

from alflow.loadgen import rxstamp
from alflow.loadgen.client import _ERROR_BODY_LIMIT, SSE_TYPE, Clock, FatalRequestError, ResponseInfo, Sink
from alflow.util.redact import redact_url


class MalformedResponseError(ConnectionError):
    """The server's bytes are not a valid HTTP/1.1 response (the parser's reason is in the message)."""


class _Exchange:
    """State of one request/response on a connection."""

    __slots__ = ("body", "clock", "close_after", "content_type", "done", "error_body", "future", "got_bytes",
                 "has_length", "sink", "status", "streaming", "unstamped_reads")  # fmt: skip

    def __init__(self, sink: Sink, clock: Clock, future: asyncio.Future[ResponseInfo]) -> None:
        self.sink = sink
        self.clock = clock
        self.future = future
        self.status = 0
        self.content_type = ""
        self.has_length = False
        """The body is delimited (Content-Length or chunked); else it ends with the connection."""
        self.close_after = False
        self.streaming = False
        self.error_body = bytearray()
        self.body: list[bytes] = []
        """Body bytes of the current network read (de-chunked), handed to the sink once per read."""
        self.done = False
        self.got_bytes = False
        self.unstamped_reads = 0
        """Reads of this response timed by the process's clock (no kernel stamp)."""


class _Connection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection; ``httptools`` (llhttp) parses each read in ``data_received``.

    The parser's callbacks only collect: the status and headers, and the body pieces of one network
    read (de-chunked), which reach the sink together with the read's one clock reading, so events that
    arrive together share a timestamp. A response the parser rejects (a bad status line, Content-Length
    or chunk size) fails the request with :class:`MalformedResponseError` and closes the connection.
    """

    def __init__(self, pool: FastTransport, key: tuple[str, int, bool]) -> None:
        self.pool = pool
        self.key = key
        self.transport: asyncio.Transport | None = None
        self.ex: _Exchange | None = None
        self.closed = False
        self.reused = False
        self.stamped = False
        """Reads come with kernel receive stamps (:class:`_StampedConnection`)."""
        self.parser = httptools.HttpResponseParser(self)

    # -- parser callbacks -------------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        ex = self.ex
        if ex is None:
            return
        name = name.lower()
        if name == b"content-type":
            ex.content_type = value.split(b";", 1)[0].strip().decode("latin-1").lower()
        elif name in (b"transfer-encoding", b"content-length"):
            ex.has_length = True

    def on_headers_complete(self) -> None:
        ex = self.ex
        if ex is None:
            return
        ex.status = self.parser.get_status_code()
        ex.close_after = not self.parser.should_keep_alive()
        ex.streaming = ex.status == 200 and ex.content_type == SSE_TYPE

    def on_body(self, body: bytes) -> None:
        if self.ex is not None:
            self.ex.body.append(body)

    def on_message_complete(self) -> None:
        if self.ex is not None:
            self.ex.done = True

    # -- asyncio protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pool.forget(self)
        ex = self.ex
        if ex is None or ex.future.done():
            return
        if ex.status and not ex.has_length:
            self._complete(keep=False)  # body delimited by the end of the connection
            return
        lost = ConnectionResetError(f"connection lost{f': {exc}' if exc else ''}")
        lost.reused_idle = self.reused and not ex.got_bytes  # type: ignore[attr-defined]
        ex.future.set_exception(lost)

    def send(self, request: bytes, ex: _Exchange) -> None:
        self.ex = ex
        assert self.transport is not None
        self.transport.write(request)

    def _complete(self, *, keep: bool) -> None:
        ex = self.ex
        assert ex is not None
        self.ex = None
        if not ex.future.done():
            source = "kernel" if self.stamped and ex.unstamped_reads == 0 else "clock"
            body = bytes(ex.error_body).decode(errors="replace")
            ex.future.set_result(ResponseInfo(ex.status, ex.content_type, body, source))
        if keep and not ex.close_after and not self.closed:
            self.pool.release(self)
        else:
            self.abort()

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        ex = self.ex
        if ex is None:  # unsolicited bytes on an idle connection: drop it
            self.abort()
            return
        self.feed(ex, data, ex.clock(), False)

    def feed(self, ex: _Exchange, data: bytes | memoryview, now: int, stamped: bool) -> None:
        """Parse one network read of ``ex``'s response that arrived at ``now`` (dated by a kernel stamp or not)."""
        ex.got_bytes = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.ex = None
            self.abort()
            if not ex.future.done():
                ex.future.set_exception(MalformedResponseError(f"malformed HTTP response: {exc}"))
            return
        if ex.body:
            payload = ex.body[0] if len(ex.body) == 1 else b"".join(ex.body)
            ex.body.clear()
            if ex.streaming:
                if not stamped:
                    ex.unstamped_reads += 1  # a body read dated by the clock: the request's source is "clock"
                if ex.sink(payload, now):
                    ex.close_after = True
                    self._complete(keep=False)
                    return
            elif len(ex.error_body) < _ERROR_BODY_LIMIT:
                ex.error_body += payload[: _ERROR_BODY_LIMIT - len(ex.error_body)]
        if ex.done:
            self._complete(keep=True)


class _StampedConnection(_Connection):
    """A plain-TCP connection that reads its socket itself with ``recvmsg`` to get kernel receive stamps.

    The event loop only reports readiness (``add_reader``); each ready socket gets one ``recvmsg`` whose
    ``SCM_TIMESTAMPNS`` dates the read (:mod:`alflow.loadgen.rxstamp`). Writes go out directly, the rest
    (a request larger than the socket's send buffer) when the socket is writable.
    """

    def __init__(self, pool: FastTransport, key: tuple[str, int, bool], sock: socket.socket) -> None:
        super().__init__(pool, key)
        self.sock = sock
        self.fd = sock.fileno()
        self._recvmsg_into = sock.recvmsg_into
        self._buffers = (pool.rx_view,)  # one buffer per transport: reads are handled one at a time
        self.loop = asyncio.get_running_loop()
        self.pending = b""
        self.stamped = True
        self._view = pool.rx_view
        self.loop.add_reader(self.fd, self._readable if _recv_stamped is None else self._readable_c)

    def send(self, request: bytes, ex: _Exchange) -> None:
        self.ex = ex
        self.pending += request
        self._flush()

    def _flush(self) -> None:
        try:
            sent = self.sock.send(self.pending)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as exc:
            self._lost(exc)
            return
        self.pending = self.pending[sent:]
        if self.pending:
            self.loop.add_writer(self.fd, self._flush)
        else:
            self.loop.remove_writer(self.fd)

    def _readable(self) -> None:
        """One ``recvmsg`` of the ready socket, dated by its kernel stamp (the Python path, where the C read was not built)."""
        try:
            size, ancillary, _flags, _addr = self._recvmsg_into(self._buffers, _ANCILLARY_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lost(exc)
            return
        if not size:
            self._lost(None)
            return
        ex = self.ex
        if ex is None:  # unsolicited bytes on an idle connection: drop it
            self.abort()
            return
        now = ex.clock()
        stamp = _stamp_ns(ancillary)
        if stamp is not None:
            now = _to_clock(stamp, now, _time_ns())
        # the parser copies what it hands on (status, headers, body pieces), so the buffer is free again after
        self.feed(ex, self._view[:size], now, stamp is not None)

    def _readable_c(self) -> None:
        """:meth:`_readable` through the C extension (:data:`rxstamp.RECV_STAMPED`): the read and its stamp's age."""
        try:
            size, age = _recv_stamped(self.fd, self._view)  # type: ignore[misc]  # set where this reader is used
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lost(exc)
            return
        if not size:
            self._lost(None)
            return
        ex = self.ex
        if ex is None:  # unsolicited bytes on an idle connection: drop it
            self.abort()
            return
        now = ex.clock()
        if age > 0:
            now -= age
        self.feed(ex, self._view[:size], now, age >= 0)

    def _lost(self, exc: Exception | None) -> None:
        if not self.closed:
            self._close_socket()
            self.connection_lost(exc)

    def _close_socket(self) -> None:
        self.closed = True
        if self.fd >= 0:
            self.loop.remove_reader(self.fd)
            self.loop.remove_writer(self.fd)
            self.fd = -1
        self.sock.close()

    def abort(self) -> None:
        self._lost(None)


_READ_SIZE: Final = 2**18
_time_ns: Final = time.time_ns
_ANCILLARY_SIZE: Final = rxstamp.ANCILLARY_SIZE
_stamp_ns: Final = rxstamp.stamp_ns
_to_clock: Final = rxstamp.to_clock
_recv_stamped = rxstamp.RECV_STAMPED
"""The C read where it was built (None: :meth:`_StampedConnection._readable`, the Python path; tests set None)."""


class FastTransport:
    """HTTP/1.1 client on asyncio protocols with a keep-alive pool (see module doc).

    ``headers`` (e.g. :func:`auth_headers`) go with every request; a URL with ``user:password@``
    sends them as HTTP basic authentication unless ``headers`` has an ``Authorization`` of its own.
    """

    def __init__(self, headers: Mapping[str, str] | None = None, *, kernel_stamps: bool = True) -> None:
        self.kernel_stamps = kernel_stamps and rxstamp.SUPPORTED
        """Plain-HTTP connections read with kernel receive stamps (False: the clock at each read; always for TLS)."""
        self._stamp_keeper = rxstamp.keeper() if self.kernel_stamps else None
        self.rx_view = memoryview(bytearray(_READ_SIZE)) if self.kernel_stamps else memoryview(b"")
        """The stamped connections' read buffer: preallocated, as the event loop's own (a fresh 256 KiB object per
        read cost up to 12 us more, measured)."""
        self._idle: dict[tuple[str, int, bool], list[_Connection]] = {}
        self._all: set[_Connection] = set()
        self._ssl: ssl.SSLContext | None = None
        self._headers = dict(headers or {})
        self._has_auth = any(name.lower() == "authorization" for name in self._headers)
        self._extra = b"".join(
            f"{name}: {value}\r\n".encode("latin-1") for name, value in self._headers.items()
        )

    def forget(self, conn: _Connection) -> None:
        """Drop a closed connection from the bookkeeping."""
        self._all.discard(conn)

    def release(self, conn: _Connection) -> None:
        """Return a connection whose response ended cleanly to the idle pool."""
        conn.reused = True
        self._idle.setdefault(conn.key, []).append(conn)

    async def _connect(self, key: tuple[str, int, bool], url: str) -> _Connection:
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()
            if not conn.closed:
                return conn
        loop = asyncio.get_running_loop()
        host, port, tls = key
        if tls and self._ssl is None:
            self._ssl = ssl.create_default_context()
        if not tls and self.kernel_stamps:
            stamped = await self._connect_stamped(key, url)
            if stamped is not None:
                return stamped
        try:
            _, proto = await loop.create_connection(
                lambda: _Connection(self, key), host, port, ssl=self._ssl if tls else None
            )
        except OSError as exc:
            raise FatalRequestError(f"cannot reach {redact_url(url)}: {exc}") from None
        self._all.add(proto)
        return proto

    async def _connect_stamped(self, key: tuple[str, int, bool], url: str) -> _Connection | None:
        """A :class:`_StampedConnection`, or None where the socket refuses the stamp option."""
        loop = asyncio.get_running_loop()
        host, port, _ = key
        try:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
        except OSError as exc:
            raise FatalRequestError(f"cannot reach {redact_url(url)}: {exc}") from None
        last: OSError | None = None
        for family, kind, proto, _name, address in infos:
            sock = socket.socket(family, kind, proto)
            try:
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if not rxstamp.enable(sock):
                    sock.close()
                    self.kernel_stamps = False
                    return None
                await loop.sock_connect(sock, address)
            except OSError as exc:
                sock.close()
                last = exc
                continue
            except BaseException:
                sock.close()
                raise
            conn = _StampedConnection(self, key, sock)
            self._all.add(conn)
            return conn
        raise FatalRequestError(f"cannot reach {redact_url(url)}: {last}") from None

    async def stream(
        self, url: str, body: bytes, timeout_s: float | None, sink: Sink, clock: Clock
    ) -> ResponseInfo:
        """POST ``body`` to ``url`` (http or https) and feed the event stream to ``sink``."""
        parts = urlsplit(url)
        tls = parts.scheme == "https"
        port = parts.port or (443 if tls else 80)
        host = parts.hostname or "127.0.0.1"
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        extra = self._extra
        if parts.username is not None and not self._has_auth:
            user_pass = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
            extra += b"Authorization: Basic %b\r\n" % base64.b64encode(user_pass)
        request = (
            b"POST %b HTTP/1.1\r\nHost: %b\r\nUser-Agent: alflow\r\nContent-Type: application/json\r\n"
            b"Accept: text/event-stream\r\n%bContent-Length: %d\r\n\r\n%b"
            % (path.encode(), parts.netloc.rpartition("@")[2].encode(), extra, len(body), body)
        )
        key = (host, port, tls)
        for attempt in (0, 1):
            conn = await self._connect(key, url)
            future: asyncio.Future[ResponseInfo] = asyncio.get_running_loop().create_future()
            conn.send(request, _Exchange(sink, clock, future))
            try:
                return await asyncio.wait_for(future, timeout_s) if timeout_s else await future
            except ConnectionResetError as exc:
                if attempt == 0 and getattr(exc, "reused_idle", False):
                    continue  # the server closed an idle keep-alive connection: retry on a new one
                raise
            except BaseException:
                conn.abort()
                raise
        raise AssertionError("unreachable")

    async def close(self) -> None:
        """Close every connection."""
        for conn in list(self._all):
            conn.abort()
        self._all.clear()
        self._idle.clear()
        if self._stamp_keeper is not None:
            self._stamp_keeper.close()
            self._stamp_keeper = None
        await asyncio.sleep(0)
