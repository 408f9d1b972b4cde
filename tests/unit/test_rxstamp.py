"""Kernel receive stamps: the control-message parsing, the clock conversion, and a late reader on real sockets."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time

import orjson
import pytest

from alflow.loadgen import rxstamp
from alflow.loadgen.client import stream_request
from alflow.loadgen.endpoints import CompletionsEndpoint
from alflow.loadgen.fast import FastTransport
from alflow.loadgen.records import RequestRecord

pytestmark = [pytest.mark.unit, pytest.mark.timing]

NS = 1_000_000_000


def _cmsg(seconds: int, nanos: int) -> tuple[int, int, bytes]:
    return socket.SOL_SOCKET, rxstamp.SO_TIMESTAMPNS, struct.pack("qq", seconds, nanos)


def test_the_stamp_is_read_from_its_control_message_and_nothing_else() -> None:
    assert rxstamp.stamp_ns([_cmsg(1_796_400_000, 123)]) == 1_796_400_000 * NS + 123
    other = (socket.SOL_SOCKET, rxstamp.SO_TIMESTAMPNS + 1, struct.pack("qq", 5, 5))
    assert rxstamp.stamp_ns([other, _cmsg(7, 8)]) == 7 * NS + 8
    assert rxstamp.stamp_ns([]) is None
    assert rxstamp.stamp_ns([other]) is None
    assert rxstamp.stamp_ns([(socket.SOL_SOCKET, rxstamp.SO_TIMESTAMPNS, b"\x01\x02")]) is None  # truncated
    assert rxstamp.stamp_ns([_cmsg(0, 0)]) is None  # the kernel had no time for the data
    assert rxstamp.stamp_ns([_cmsg(3, NS)]) is None  # not a timespec


def test_a_stamp_maps_to_the_clock_by_its_age() -> None:
    wall = 1_796_400_000 * NS
    assert rxstamp.to_clock(wall - 7_000_000, clock_now=50 * NS, wall_now=wall) == 50 * NS - 7_000_000
    assert rxstamp.to_clock(wall + 1_000, clock_now=50 * NS, wall_now=wall) == 50 * NS  # from the future: now


def _late_reader_server(ready: threading.Event, port: list[int], gap_s: float) -> None:
    """One response: a head, then four events ``gap_s`` apart, each its own write, then [DONE]."""
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        port.append(srv.getsockname()[1])
        ready.set()
        conn, _ = srv.accept()
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
            for i in range(4):
                event = {"choices": [{"index": 0, "text": str(i)}]}
                conn.sendall(b"data: " + orjson.dumps(event) + b"\n\n")
                time.sleep(gap_s)
            conn.sendall(b"data: [DONE]\n\n")


async def _late_read(kernel_stamps: bool, block_s: float, gap_s: float) -> RequestRecord:
    ready = threading.Event()
    port: list[int] = []
    server = threading.Thread(target=_late_reader_server, args=(ready, port, gap_s), daemon=True)
    server.start()
    ready.wait(5)
    fast = FastTransport(kernel_stamps=kernel_stamps)
    rec = RequestRecord(request_id=0, session_id="s")
    loop = asyncio.get_running_loop()
    loop.call_later(0.02, time.sleep, block_s)  # the client is not scheduled while the events arrive
    await stream_request(fast, f"http://127.0.0.1:{port[0]}/v1/completions", b"{}", CompletionsEndpoint(), rec,
                         timeout_s=10)  # fmt: skip
    await fast.close()
    server.join(5)
    return rec


@pytest.mark.alone  # the reader's lateness is the test's own 0.3 s block: no other test's load beside it
@pytest.mark.skipif(not rxstamp.SUPPORTED, reason="kernel receive stamps: Linux on a 64-bit machine")
async def test_a_late_reader_dates_the_read_by_its_arrival_with_kernel_stamps_and_by_its_reading_without() -> (
    None
):
    block_s, gap_s = 0.3, 0.04  # the last event is written at about 0.12 s, read at about 0.32 s
    kernel = await _late_read(True, block_s, gap_s)
    clock = await _late_read(False, block_s, gap_s)
    for rec in (kernel, clock):
        assert rec.ok, rec.error
        assert len(rec.chunk_ns) == 4
    assert kernel.stamp_source == "kernel"
    assert clock.stamp_source == "clock"
    kernel_span = (kernel.chunk_ns[-1] - kernel.start_ns) / NS
    clock_span = (clock.chunk_ns[-1] - clock.start_ns) / NS
    assert kernel_span < 0.25, (
        kernel_span
    )  # when the newest data arrived (about 0.12 s), not when it was read
    assert clock_span >= block_s, clock_span
    assert kernel.chunk_ns[-1] <= kernel.done_ns  # on the client's clock, never after the read


def _connected_pair(stamped: bool) -> tuple[socket.socket, socket.socket]:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        writer = socket.create_connection(listener.getsockname())
        reader, _ = listener.accept()
    if stamped:
        assert rxstamp.enable(reader)
    reader.setblocking(False)
    return writer, reader


needs_c_read = pytest.mark.skipif(
    rxstamp.RECV_STAMPED is None, reason="the C read (alflow/loadgen/_rxread.c) was not built here"
)


@needs_c_read
def test_the_c_read_gives_the_bytes_and_the_age_of_their_kernel_stamp_as_the_python_path_does() -> None:
    recv_stamped = rxstamp.RECV_STAMPED
    assert recv_stamped is not None
    keeper = rxstamp.keeper()  # stamping on before the data arrives (as the transport holds it)
    writer, reader = _connected_pair(stamped=True)
    buffer = memoryview(bytearray(4096))
    try:
        with pytest.raises(BlockingIOError):  # nothing queued: EAGAIN, as socket.recvmsg_into raises it
            recv_stamped(reader.fileno(), buffer)
        # the kernel switches stamping on through a deferred static key (net_enable_timestamp): wait for it
        deadline = time.monotonic() + 5
        while True:
            writer.sendall(b".")
            time.sleep(0.005)
            if recv_stamped(reader.fileno(), buffer)[1] >= 0 or time.monotonic() > deadline:
                break
        writer.sendall(b"data: one\n\n")
        time.sleep(0.05)  # the data waits 50 ms in the socket: that is its age at the read
        size, age = recv_stamped(reader.fileno(), buffer)
        assert bytes(buffer[:size]) == b"data: one\n\n"
        assert 0.045 * NS <= age < 2 * NS, age
        # the Python path on the same kind of read: the same age within the time between the two reads
        writer.sendall(b"data: two\n\n")
        time.sleep(0.05)
        wall_before = time.time_ns()
        py_size, ancillary, _flags, _addr = reader.recvmsg_into([buffer], rxstamp.ANCILLARY_SIZE)
        stamp = rxstamp.stamp_ns(ancillary)
        assert stamp is not None
        assert py_size == size
        assert abs((wall_before - stamp) - age) < 0.02 * NS
        writer.close()
        assert recv_stamped(reader.fileno(), buffer) == (0, -1)  # end of stream: no bytes, no stamp
    finally:
        writer.close()
        reader.close()
        if keeper is not None:
            keeper.close()


@needs_c_read
def test_the_c_read_says_no_stamp_where_none_was_asked_for_and_refuses_bad_arguments() -> None:
    recv_stamped = rxstamp.RECV_STAMPED
    assert recv_stamped is not None
    writer, reader = _connected_pair(stamped=False)
    buffer = memoryview(bytearray(64))
    try:
        writer.sendall(b"x" * 100)
        time.sleep(0.02)
        assert recv_stamped(reader.fileno(), buffer) == (64, -1)  # the buffer's size at most, no stamp
        assert recv_stamped(reader.fileno(), buffer)[0] == 36
        with pytest.raises(BufferError):
            recv_stamped(reader.fileno(), memoryview(b"read-only"))
        with pytest.raises(ValueError, match="fd must be"):
            recv_stamped(-1, buffer)
        with pytest.raises(TypeError, match="2 arguments"):
            recv_stamped(reader.fileno())  # type: ignore[call-arg]
    finally:
        writer.close()
        reader.close()
    with pytest.raises(OSError, match="Bad file descriptor"):
        recv_stamped(reader.fileno() if reader.fileno() >= 0 else 10_000, buffer)


@pytest.mark.skipif(not rxstamp.SUPPORTED, reason="kernel receive stamps: Linux on a 64-bit machine")
def test_the_c_read_is_built_where_the_install_had_a_compiler() -> None:
    # scripts/setup.sh builds it (pyproject.toml, optional); a CI machine always has gcc, so losing it is a bug
    import shutil

    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler here: the optional extension is skipped by design")
    assert rxstamp.RECV_STAMPED is not None
