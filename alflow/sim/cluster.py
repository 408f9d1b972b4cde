"""The simulated engine across nodes: a head (rank 0) and workers that join it over TCP.

The same contract as the real frameworks' multi-node launch (``--nnodes``, ``--node-rank``, the
head's address): every node runs ``alflow sim serve`` with the same ``--nnodes``, ``--port`` and
``--dist-port``, its own ``--node-rank``, and (workers) ``--head-addr``. Node ``R`` listens for
HTTP on ``--port + R`` (on one host the nodes share an address); the head also listens on
``--dist-port`` for its workers.

Join protocol: newline-delimited JSON objects over one TCP connection per worker.

1. the worker connects (retrying until ``--join-timeout``) and sends
   ``{"type": "hello", "version": 1, "rank": R, "nnodes": N}``;
2. the head answers ``{"type": "welcome", "rank": R}``, or ``{"type": "reject", "reason": ...}``
   and closes (wrong version or node count, rank out of range or already joined);
3. both sides send ``{"type": "heartbeat"}`` every ``--heartbeat-interval`` seconds; a peer silent
   for ``--peer-timeout`` seconds, or a closed connection, is gone;
4. ``--node-parallel dp`` only: a worker asks ``{"type": "stats_request", "id": I}`` when its
   metrics endpoint is scraped and the head answers ``{"type": "stats", "id": I, "stats": {...}}``
   with the counters of that rank's engine (the head runs one engine per rank, requests go to the
   ranks in turn), so each node's endpoint shows its own rank and only the sum over every
   endpoint is the whole server.

Failure rules: the head answers ``/health`` with 503 (and refuses requests) until all ``N - 1``
workers joined, and fails (exits with an error naming the rank) when a joined worker goes away or
when not every worker joined within ``--join-timeout``; a worker exits with an error when the head
goes away or rejects it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import orjson

from alflow.errors import AlflowError
from alflow.sim.config import SimConfig
from alflow.sim.stats import EngineStats, Histogram

log = logging.getLogger(__name__)

PROTOCOL_VERSION = 1
MAX_LINE_BYTES = 16 * 1024 * 1024
"""Longest protocol line accepted (a stats message with TensorRT-LLM iteration records)."""


class ClusterError(AlflowError):
    """The multi-node group broke: a worker left, the head went away, or a join was refused."""


def encode(message: dict[str, Any]) -> bytes:
    """One protocol line."""
    return orjson.dumps(message) + b"\n"


async def read_message(reader: asyncio.StreamReader, timeout_s: float) -> dict[str, Any]:
    """The next protocol line as a dict; raises ClusterError on a closed connection, silence or garbage."""
    try:
        line = await asyncio.wait_for(reader.readline(), timeout_s)
    except TimeoutError:
        raise ClusterError(f"no message for {timeout_s:g} s (heartbeat timeout)") from None
    except (ConnectionError, asyncio.LimitOverrunError, ValueError) as exc:
        raise ClusterError(f"connection broken: {exc}") from None
    if not line:
        raise ClusterError("connection closed")
    try:
        message = orjson.loads(line)
    except orjson.JSONDecodeError:
        raise ClusterError(f"not a protocol message: {line[:80]!r}") from None
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        raise ClusterError(f"not a protocol message: {line[:80]!r}")
    return message


def stats_to_dict(stats: EngineStats) -> dict[str, Any]:
    """An engine's counters and gauges as JSON-ready data (histograms as bounds, counts, sum, count)."""
    out: dict[str, Any] = {}
    for f in fields(stats):
        value = getattr(stats, f.name)
        if isinstance(value, Histogram):
            out[f.name] = {"bounds": list(value.bounds), "counts": value.counts, "sum": value.sum}
        elif isinstance(value, collections.deque):
            out[f.name] = list(value)
        else:
            out[f.name] = value
    return out


def stats_from_dict(data: dict[str, Any]) -> EngineStats:
    """The inverse of :func:`stats_to_dict`."""
    values: dict[str, Any] = {}
    for f in fields(EngineStats):
        if f.name not in data:
            continue
        value = data[f.name]
        if f.name in ("ttft", "itl", "e2e"):
            hist = Histogram(tuple(float(b) for b in value["bounds"]))
            hist.counts = [int(c) for c in value["counts"]]
            hist.sum = float(value["sum"])
            hist.count = sum(hist.counts)
            values[f.name] = hist
        elif f.name == "iterations":
            values[f.name] = collections.deque(value, maxlen=1000)
        else:
            values[f.name] = value
    return EngineStats(**values)


@dataclass
class _Peer:
    rank: int
    address: str
    writer: asyncio.StreamWriter


class HeadCluster:
    """The head's side: accepts workers on ``--dist-port``, watches them, answers their stats requests.

    ``stats_of(rank)`` gives the engine stats a worker of that rank exposes (``dp`` mode); None when
    workers expose no metrics (``tp`` mode).
    """

    def __init__(self, config: SimConfig, stats_of: Callable[[int], EngineStats] | None = None) -> None:
        self.config = config
        self.stats_of = stats_of
        self.joined: dict[int, _Peer] = {}
        self.failed: str | None = None
        self.broken = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._join_deadline: asyncio.TimerHandle | None = None
        self._closing = False

    @property
    def expected(self) -> int:
        """Workers the head waits for: ``nnodes - 1``."""
        return self.config.nnodes - 1

    @property
    def complete(self) -> bool:
        """True once every worker has joined (and none has left)."""
        return self.failed is None and len(self.joined) == self.expected

    def status(self) -> str:
        """Why the head is not ready (or that it is), for /health and logs."""
        if self.failed is not None:
            return f"multi-node group broken: {self.failed}"
        missing = [r for r in range(1, self.config.nnodes) if r not in self.joined]
        if missing:
            return (
                f"waiting for workers: {len(self.joined)} of {self.expected} joined "
                f"(missing rank{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))})"
            )
        return f"all {self.expected} workers joined"

    def fail(self, reason: str) -> None:
        """Mark the group broken (the serving loop then exits with ``reason``)."""
        if self.failed is None and not self._closing:
            self.failed = reason
            log.error("%s", reason)
            self.broken.set()

    async def start(self) -> None:
        """Listen on ``--dist-port`` (the HTTP ``--host``); raises ClusterError when it cannot bind."""
        cfg = self.config
        assert cfg.dist_port is not None  # validated: multi-node configs have one
        host = None if cfg.host in ("0.0.0.0", "::", "") else cfg.host  # noqa: S104 - all addresses
        try:
            self._server = await asyncio.start_server(
                self._handle, host, cfg.dist_port, limit=MAX_LINE_BYTES, reuse_address=True
            )
        except OSError as exc:
            raise ClusterError(f"the head cannot listen on --dist-port {cfg.dist_port}: {exc}") from None
        log.info(
            "head of %d nodes: waiting for %d worker(s) on port %d", cfg.nnodes, self.expected, cfg.dist_port
        )
        self._join_deadline = asyncio.get_running_loop().call_later(cfg.join_timeout_s, self._join_expired)

    def _join_expired(self) -> None:
        if not self.complete and self.failed is None:
            self.fail(f"not every worker joined within {self.config.join_timeout_s:g} s: {self.status()}")

    async def close(self) -> None:
        """Stop listening and drop every worker connection."""
        self._closing = True
        if self._join_deadline is not None:
            self._join_deadline.cancel()
        if self._server is not None:
            self._server.close()
        for peer in list(self.joined.values()):
            peer.writer.close()
        await _cancel(*self._tasks)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    def _refusal(self, hello: dict[str, Any]) -> str | None:
        cfg = self.config
        if hello.get("type") != "hello":
            return f"expected a hello, got {hello.get('type')!r}"
        if hello.get("version") != PROTOCOL_VERSION:
            return f"protocol version {hello.get('version')!r}, the head speaks {PROTOCOL_VERSION}"
        if hello.get("nnodes") != cfg.nnodes:
            return f"worker says --nnodes {hello.get('nnodes')!r}, the head has --nnodes {cfg.nnodes}"
        rank = hello.get("rank")
        if isinstance(rank, bool) or not isinstance(rank, int) or not 1 <= rank < cfg.nnodes:
            return f"worker rank {rank!r} is not in 1..{cfg.nnodes - 1}"
        if rank in self.joined:
            return f"worker rank {rank} has already joined (from {self.joined[rank].address})"
        if self.failed is not None:
            return f"the group is broken: {self.failed}"
        return None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        address = str(writer.get_extra_info("peername"))
        rank: int | None = None
        try:
            try:
                hello = await read_message(reader, self.config.peer_timeout_s)
            except ClusterError as exc:
                log.warning("a connection from %s sent no hello: %s", address, exc)
                return
            refusal = self._refusal(hello)
            if refusal is not None:
                log.error("refused a worker from %s: %s", address, refusal)
                writer.write(encode({"type": "reject", "reason": refusal}))
                with contextlib.suppress(ConnectionError):
                    await writer.drain()
                return
            rank = int(hello["rank"])
            writer.write(encode({"type": "welcome", "rank": rank}))
            await writer.drain()
            self.joined[rank] = _Peer(rank, address, writer)
            log.info("worker rank %d joined from %s (%s)", rank, address, self.status())
            if self.complete and self._join_deadline is not None:
                self._join_deadline.cancel()
            await self._serve_peer(rank, reader, writer)
        except ClusterError as exc:
            if rank is not None and self.joined.get(rank) is not None:
                self.fail(f"worker rank {rank} left: {exc}")
        except (ConnectionError, OSError) as exc:
            if rank is not None:
                self.fail(f"worker rank {rank} left: {exc}")
        except asyncio.CancelledError:
            # only close() cancels a connection's task; ending quietly keeps asyncio's server callback
            # from logging the cancellation as an error
            return
        finally:
            writer.close()
            if task is not None:
                self._tasks.discard(task)

    async def _serve_peer(
        self, rank: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        cfg = self.config
        beat = asyncio.get_running_loop().create_task(_heartbeats(writer, cfg.heartbeat_s))
        try:
            while True:
                message = await read_message(reader, cfg.peer_timeout_s)
                if message["type"] == "stats_request":
                    stats = None if self.stats_of is None else stats_to_dict(self.stats_of(rank))
                    writer.write(encode({"type": "stats", "id": message.get("id"), "stats": stats}))
                    await writer.drain()
        finally:
            await _cancel(beat)


async def _cancel(*tasks: asyncio.Task[None]) -> None:
    """Cancel ``tasks`` and wait for each to end (whatever it raises)."""
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


async def _heartbeats(writer: asyncio.StreamWriter, interval_s: float) -> None:
    """Send a heartbeat every ``interval_s`` until the connection closes (or the task is cancelled)."""
    line = encode({"type": "heartbeat"})
    while not writer.is_closing():
        writer.write(line)
        try:
            await writer.drain()
        except ConnectionError:
            return
        await asyncio.sleep(interval_s)


class WorkerLink:
    """A worker's side: joins the head, keeps the heartbeat, fetches its rank's stats (``dp`` mode)."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.lost: str | None = None
        self.broken = asyncio.Event()
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._pending: dict[int, asyncio.Future[dict[str, Any] | None]] = {}
        self._next_id = 0

    @property
    def head(self) -> str:
        """``HOST:PORT`` of the head's join port."""
        return f"{self.config.head_addr}:{self.config.dist_port}"

    async def join(self) -> None:
        """Connect (retrying until ``--join-timeout``), say hello, and wait for the welcome."""
        cfg = self.config
        loop = asyncio.get_running_loop()
        deadline = loop.time() + cfg.join_timeout_s
        last_error = ""
        while True:
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(cfg.head_addr, cfg.dist_port, limit=MAX_LINE_BYTES),
                    max(0.1, min(5.0, deadline - loop.time())),
                )
                break
            except (OSError, TimeoutError) as exc:
                last_error = str(exc) or type(exc).__name__
            if loop.time() >= deadline:
                raise ClusterError(
                    f"worker rank {cfg.node_rank} could not reach the head at {self.head} within "
                    f"{cfg.join_timeout_s:g} s: {last_error}"
                )
            await asyncio.sleep(0.2)
        writer.write(
            encode(
                {"type": "hello", "version": PROTOCOL_VERSION, "rank": cfg.node_rank, "nnodes": cfg.nnodes}
            )
        )
        await writer.drain()
        try:
            reply = await read_message(reader, cfg.peer_timeout_s)
        except ClusterError as exc:
            writer.close()
            raise ClusterError(
                f"the head at {self.head} did not welcome rank {cfg.node_rank}: {exc}"
            ) from None
        if reply["type"] != "welcome":
            writer.close()
            reason = reply.get("reason", reply["type"])
            raise ClusterError(f"the head at {self.head} refused rank {cfg.node_rank}: {reason}")
        self._reader, self._writer = reader, writer
        log.info("worker rank %d of %d joined the head at %s", cfg.node_rank, cfg.nnodes, self.head)
        self._tasks = [
            loop.create_task(_heartbeats(writer, cfg.heartbeat_s)),
            loop.create_task(self._listen(reader)),
        ]

    def _lose(self, reason: str) -> None:
        if self.lost is None:
            self.lost = f"the head at {self.head} went away: {reason}"
            log.error("%s", self.lost)
            self.broken.set()
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ClusterError(self.lost))
        self._pending.clear()

    async def _listen(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                message = await read_message(reader, self.config.peer_timeout_s)
                if message["type"] == "stats":
                    future = self._pending.pop(int(message.get("id", -1)), None)
                    if future is not None and not future.done():
                        future.set_result(message.get("stats"))
                elif message["type"] == "reject":
                    raise ClusterError(f"rejected: {message.get('reason')}")
        except ClusterError as exc:
            self._lose(str(exc))

    async def fetch_stats(self) -> EngineStats | None:
        """Fetch this rank's engine stats from the head (None when the head keeps no per-rank stats)."""
        if self.lost is not None:
            raise ClusterError(self.lost)
        assert self._writer is not None, "join() first"
        self._next_id += 1
        request_id = self._next_id
        future: asyncio.Future[dict[str, Any] | None] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        self._writer.write(encode({"type": "stats_request", "id": request_id}))
        await self._writer.drain()
        try:
            data = await asyncio.wait_for(future, self.config.peer_timeout_s)
        except TimeoutError:
            self._pending.pop(request_id, None)
            raise ClusterError(f"the head at {self.head} did not answer a stats request") from None
        return None if data is None else stats_from_dict(data)

    async def close(self) -> None:
        """Leave the group (close the connection)."""
        await _cancel(*self._tasks)
        if self._writer is not None:
            self._writer.close()
