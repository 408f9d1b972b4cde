"""Kernel receive timestamps on Linux TCP sockets (``SO_TIMESTAMPNS``): when the data of a read arrived.

Why: the client timestamps each SSE event with the arrival of the network read that carried it. Taken with
the process's clock when Python reads, that time is late by however long the process waited to be
scheduled, and several events that queued in the socket meanwhile share one reading (their gaps read 0).
With ``SO_TIMESTAMPNS`` set on a socket, the kernel stamps every received segment when it enters the
network stack (``net_timestamp_check`` in ``netif_rx``/``__netif_receive_skb``; on loopback that is the
sender's write), and ``recvmsg`` returns an ``SCM_TIMESTAMPNS`` control message with it
(``Documentation/networking/timestamping.rst``, "SO_TIMESTAMPNS").

What TCP reports, per read (kernel documentation and measured here on 6.18, ``benchmarks/timing_truth.py``):

- one timestamp per ``recvmsg``: that of the last segment the read consumed (``tcp_recv_timestamp`` in
  ``net/ipv4/tcp.c`` keeps the newest ``skb`` stamp of the read);
- segments that wait in the receive queue are merged (``tcp_try_coalesce`` in ``net/ipv4/tcp_input.c``),
  and a merged segment takes the newest stamp. A reader that is late by 100 ms on a stream of one event
  per 10 ms therefore gets ten events with one stamp, and reading them one event at a time
  (``MSG_PEEK`` to the event boundary, then ``recvmsg`` of exactly that many bytes) returns that same stamp
  for each: measured, so the reads are not split.

So a kernel stamp is exact for the newest data of a read, whatever the process's scheduling delay; events
that arrived in one read with others are known only to have arrived at or before it. The clients record
the source of each request's timestamps (``RequestRecord.stamp_source``: ``kernel`` or ``clock``) and the
statistics use exact gaps only where the source allows (:mod:`alflow.loadgen.timing`).

Cost: one ``recvmsg`` with a control buffer per read instead of the event loop's ``recv``, plus the conversion
below. The fast transport makes that read in C where the optional extension :data:`RECV_STAMPED`
(``alflow/loadgen/_rxread.c``) was built, about 0.5 us more a read than the event loop's own reads, and else
through ``socket.recvmsg_into``, about 1.2 us more; measured by ``benchmarks/client_overhead.py``.

Clocks: the stamp is ``CLOCK_REALTIME``; the records use the client's monotonic clock. Each stamp is converted
at its read as ``clock() - (time_ns() - stamp)``: the age of the data, subtracted from the monotonic reading,
so a step of the wall clock between reads cannot shift a timestamp by more than the read's own age.
"""

from __future__ import annotations

import platform
import socket
import struct
import sys
from collections.abc import Callable, Iterable
from typing import Final

SO_TIMESTAMPNS: Final = 35
"""``SO_TIMESTAMPNS_OLD`` in ``include/uapi/asm-generic/socket.h`` (x86, arm, arm64, riscv, ...): Python's
:mod:`socket` does not export it. ``SCM_TIMESTAMPNS`` is the same number. Its timespec is two ``long``\\s:
64-bit on the 64-bit machines :data:`SUPPORTED` lists."""
SUPPORTED: Final = (
    sys.platform == "linux" and platform.machine() in {"x86_64", "aarch64", "arm64", "riscv64"} and
    struct.calcsize("l") == 8
)  # fmt: skip
"""Where :data:`SO_TIMESTAMPNS` has this number and the timespec layout ``(int64, int64)``."""
ANCILLARY_SIZE: Final = socket.CMSG_SPACE(16) if hasattr(socket, "CMSG_SPACE") else 0
_TIMESPEC: Final = struct.Struct("qq")
"""The ``SCM_TIMESTAMPNS`` payload: ``struct timespec`` (seconds, nanoseconds) on the 64-bit Linux of :data:`SUPPORTED`."""
_unpack_timespec: Final = _TIMESPEC.unpack_from


def _compiled_read() -> Callable[[int, memoryview], tuple[int, int]] | None:
    if not SUPPORTED:
        return None
    try:
        from alflow.loadgen._rxread import recv_stamped
    except ImportError:  # not built (no C compiler at install): the Python path
        return None
    return recv_stamped


RECV_STAMPED: Final = _compiled_read()
"""``recv_stamped(fd, buffer) -> (size, age_ns)`` from the C extension: one ``recvmsg`` into ``buffer`` and the
age of its stamp on the wall clock (``time_ns()`` now minus the stamp; 0 for a stamp from the future, -1 for no
stamp), as :func:`stamp_ns` and :func:`to_clock` would give it; None where it was not built or stamps are not
:data:`SUPPORTED`."""
_SCM_TIMESTAMPNS: Final = SO_TIMESTAMPNS
_SOL_SOCKET: Final = socket.SOL_SOCKET


def enable(sock: socket.socket) -> bool:
    """Ask the kernel to stamp ``sock``'s received data; False where the platform cannot (the caller uses its clock)."""
    if not SUPPORTED:
        return False
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except OSError:
        return False
    return True


def keeper() -> socket.socket | None:
    """A UDP socket holding the option on, opened before any connection and kept until the transport closes.

    The kernel stamps received packets only while some socket asks for it; the first request switches that on
    with a deferred static key (``net_enable_timestamp`` in ``net/core/dev.c``), so without a keeper the first
    reads after an idle spell can come unstamped (seen once in a full unit-test run before the keeper: a
    request whose body reads carried no stamp; the deferred key is the likely cause). None where the platform
    has no stamps.
    """
    if not SUPPORTED:
        return None
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    if not enable(sock):
        sock.close()
        return None
    return sock


def stamp_ns(ancillary: Iterable[tuple[int, int, bytes]]) -> int | None:
    """The ``SCM_TIMESTAMPNS`` time (ns since the epoch) in ``recvmsg``'s control messages, or None.

    A zero stamp (the kernel had no time for the data) and a truncated message count as none. Called once per
    network read, so written for speed (about 150 ns; ``typing.cast`` and a global lookup per call cost 250 ns more).
    """
    for level, kind, data in ancillary:
        if kind == _SCM_TIMESTAMPNS and level == _SOL_SOCKET and len(data) >= 16:
            seconds, nanos = _unpack_timespec(data)
            if seconds <= 0 or not 0 <= nanos < 1_000_000_000:
                return None
            return seconds * 1_000_000_000 + nanos  # type: ignore[no-any-return]
    return None


def to_clock(stamp: int, clock_now: int, wall_now: int) -> int:
    """A kernel stamp on the client's clock: ``clock_now`` minus the data's age (never after ``clock_now``).

    ``wall_now`` is ``time.time_ns()`` read next to ``clock_now``; a stamp from the future (a wall-clock step
    backwards between the two) maps to ``clock_now``.
    """
    age = wall_now - stamp
    return clock_now - age if age > 0 else clock_now
