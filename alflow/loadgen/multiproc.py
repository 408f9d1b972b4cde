"""One point's load over several client processes (:attr:`LoadSpec.processes` > 1; Linux only).

One Python process streaming about a thousand sessions is CPU-bound and reads late (:mod:`alflow.loadgen.monitor`).
:func:`run_processes` splits the load over N worker processes, each running the ordinary
:func:`~alflow.loadgen.runner.run_load` on its own event loop (:func:`alflow.util.eventloop.run`) with its own fast
transport:

- **the split**: the measured sessions go round-robin to the workers (worker ``w`` sends sessions ``w``,
  ``w + N``, ... of the single-process order), and so do the warm-up sessions; ``concurrency`` is split as evenly
  as possible (each worker at least 1: more processes than ``concurrency`` is refused), ``num_prompts`` and
  ``warmup`` follow the round-robin, ``request_rate`` is divided by N (Poisson: worker ``w`` draws with seed
  ``seed + w``, so the sum of the N streams is Poisson at the full rate; constant: worker ``w`` starts ``w / rate``
  late, so the N streams interleave evenly), so the total offered load is the single-process one.
  ``duration_s`` applies to each worker. A run of fewer prompts than processes uses one process per prompt.
- **warm-up**: every worker finishes its warm-up and waits; then the parent calls ``on_measure_start`` once (the
  baseline metrics scrape) and tells every worker to start its measured phase.
- **records** stream back to the parent in batches as they complete (every :data:`FLUSH_INTERVAL_S`) and are
  appended to ``sink``, so an interrupted run keeps what was measured; ``request_id`` is renumbered to be unique
  across workers (at the end, in start order: warm-up first, as one process numbers them). ``progress``
  advances in the parent as the workers' sessions finish.
- **one clock**: ``time.perf_counter_ns`` is ``clock_gettime(CLOCK_MONOTONIC)`` on Linux, one clock base for every
  process of the machine, so the workers' timestamps are compared and merged as they are, unconverted. Other
  platforms do not promise that: :meth:`LoadSpec.check` refuses ``processes > 1`` there, and a custom ``clock``
  (which cannot cross processes) is refused here.
- **the result**: the union of the records; the measured window from the earliest worker's start to the latest
  worker's end; the workers' client loads merged (:meth:`ClientLoad.merge`).
- **failures**: a fatal error in any worker (a load it aborted, a worker that died, a worker silent, not even its
  beat every :data:`HEARTBEAT_S`, for its stall or request timeout: stopped with SIGSTOP or frozen,
  :func:`silence_limit`) stops every worker and comes back as :attr:`MergedRun.fatal` with the records so far (``run_load`` raises it as ``LoadAbortedError``).
  Cancelling the parent (Ctrl-C) stops every worker: they get :data:`STOP_GRACE_S` to end, then are terminated,
  then killed; a worker whose parent died (its control pipe closed) stops by itself. No worker outlives the call.
  What the stopping workers send (their records, in flight ones included, as one process keeps them) still
  reaches ``sink``.

Workers are started with the ``spawn`` context: the parent has an event loop and threads, which ``fork`` would
copy half-alive (and ``forkserver`` leaves a server process behind). They ignore SIGINT (a Ctrl-C reaches the
whole process group): the parent decides when they stop.

This module does not import :mod:`alflow.loadgen.runner` at run time (runner imports this module, and the house
rules forbid an import cycle): ``run_load`` passes itself in, and turns the :class:`MergedRun` into its
``LoadResult``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import multiprocessing
import queue
import signal
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import TYPE_CHECKING, Any, Final

from alflow.datasets.types import Session
from alflow.errors import AlflowError, InvalidInputError
from alflow.loadgen.records import RequestRecord
from alflow.loadgen.spec import LoadResult
from alflow.loadgen.timing import ClientLoad
from alflow.util import eventloop

if TYPE_CHECKING:
    from alflow.loadgen.spec import LoadCall, LoadSpec, Target

FLUSH_INTERVAL_S: Final = 0.1
"""How often a worker sends its completed records (and finished sessions) to the parent."""
STOP_GRACE_S: Final = 10.0
"""After a fatal error, how long the other workers get to stop and send what they recorded."""
HEARTBEAT_S: Final = 1.0
"""A worker says it is alive this often (a ``beat``), whatever it has to send."""
START_GRACE_S: Final = 30.0
"""Added to a worker's silence limit until its first message: spawning it and importing alflow take seconds."""
EXIT_GRACE_S: Final = 2.0
"""How long a stopping worker gets to exit before it is terminated (then killed)."""
_FIELDS: Final = tuple(f.name for f in dataclasses.fields(RequestRecord))


def split_evenly(total: int, parts: int) -> list[int]:
    """``total`` as ``parts`` integers that differ by at most one, the larger first."""
    base, extra = divmod(total, parts)
    return [base + (i < extra) for i in range(parts)]


@dataclass(frozen=True)
class WorkerShare:
    """What one worker sends: its sessions and warm-up sessions, its part of the load, its start offset."""

    sessions: list[Session]
    warmup_sessions: list[Session] | None
    spec: LoadSpec
    stagger_s: float = 0.0
    """Seconds the worker waits after the common start (constant arrivals: the workers' streams interleave)."""


def split_load(
    sessions: Sequence[Session], spec: LoadSpec, warmup_sessions: Sequence[Session] | None = None
) -> list[WorkerShare]:
    """The load of ``spec`` split over ``spec.processes`` workers (see the module docstring); validated."""
    spec.check()
    if not sessions:
        raise InvalidInputError("the workload is empty: no sessions to send")
    n = spec.processes
    count = spec.num_prompts if spec.num_prompts is not None else (None if spec.duration_s else len(sessions))
    if count is not None:
        n = min(n, count)
    concurrency = split_evenly(spec.concurrency, n)
    pool = list(warmup_sessions or sessions)
    size = len(sessions)
    shares = []
    for w in range(n):
        if count is not None:  # exactly the sessions one process would send, dealt round-robin
            mine = [sessions[i % size] for i in range(w, count, n)]
        elif size >= n:
            mine = list(sessions[w::n])
        else:  # a timed run over fewer sessions than workers: each cycles them all, from its own one
            mine = [*sessions[w % size :], *sessions[: w % size]]
        warm = [pool[i % len(pool)] for i in range(w, spec.warmup, n)]
        rate = spec.request_rate
        part = replace(
            spec,
            processes=1,
            concurrency=concurrency[w],
            num_prompts=None if count is None else len(mine),
            warmup=len(warm),
            request_rate=None if rate is None else rate / n,
            seed=spec.seed + w,
        )
        stagger = w / rate if rate is not None and spec.arrival == "constant" else 0.0
        shares.append(WorkerShare(mine, warm or None, part, stagger))
    return shares


@dataclass(frozen=True)
class MergedRun:
    """The workers' results as one ``LoadResult`` and the first fatal error (None: none)."""

    result: LoadResult
    fatal: str | None


async def run_processes(run: Callable[..., Coroutine[Any, Any, LoadResult]], call: LoadCall) -> MergedRun:
    """Run ``call.spec``'s load over its ``processes`` workers, each calling ``run`` (``run_load``); merge the results.

    Raises :class:`InvalidInputError` before starting anything for a bad split or a custom ``call.clock``.
    """
    if call.clock is not time.perf_counter_ns:
        raise InvalidInputError(
            f"processes={call.spec.processes}: a custom clock cannot cross processes; use the default clock "
            "(time.perf_counter_ns) or processes=1"
        )
    parent = _Parent(run, call)
    try:
        parent.start_all()
        await parent.serve()
    finally:
        parent.shutdown()
    return parent.merge()


@dataclass(frozen=True)
class _Job:
    run: Callable[..., Coroutine[Any, Any, LoadResult]]
    share: WorkerShare
    target: Target


@dataclass
class _Worker:
    index: int
    process: BaseProcess
    data: Connection
    control: Connection
    reader: threading.Thread | None = None
    started: bool = False
    ended: bool = False
    meta: LoadResult | None = None
    """Its measured window and client load (its records came in batches)."""
    heard: float = 0.0
    """When the parent last heard from it (loop time)."""


def silence_limit(spec: LoadSpec) -> float:
    """How long a worker may send nothing before it counts as frozen: the stall timeout, else the request timeout.

    A worker beats every :data:`HEARTBEAT_S`, so silence means its process stopped (SIGSTOP, a debugger) or its
    loop is stuck; its requests could not have ended within their timeout anyway.
    """
    given = [t for t in (spec.stall_timeout_s, spec.timeout_s) if t]
    return max(5 * HEARTBEAT_S, min(given) if given else 600.0)


class _Parent:
    def __init__(self, run: Callable[..., Coroutine[Any, Any, LoadResult]], call: LoadCall) -> None:
        self.run = run
        self.shares = shares = split_load(call.sessions, call.spec, call.warmup_sessions)
        self.count = (
            None if shares[0].spec.num_prompts is None else sum(s.spec.num_prompts or 0 for s in shares)
        )
        self.target, self.on_measure_start, self.progress = call.target, call.on_measure_start, call.progress
        self.records = call.sink if call.sink is not None else []
        self.base = self.next_id = len(self.records)
        self.loop = asyncio.get_running_loop()
        self.mailbox: queue.SimpleQueue[tuple[int, tuple[Any, ...] | None]] = queue.SimpleQueue()
        """The workers' messages, put by the reader threads: read by :meth:`serve`, and after a stop by
        :meth:`shutdown` (a cancelled parent still takes the records its workers sent while stopping)."""
        self.wakeup = asyncio.Event()
        self.workers: list[_Worker] = []
        self.fatal: str | None = None

    def start_all(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        n = len(self.shares)
        warmup = sum(s.spec.warmup for s in self.shares)
        if warmup and self.progress is not None:
            self.progress.start(warmup, "warm-up")
        for w, share in enumerate(self.shares):
            data_in, data_out = ctx.Pipe(duplex=False)
            control_in, control_out = ctx.Pipe(duplex=False)
            process = ctx.Process(
                target=_worker_main,
                args=(_Job(self.run, share, self.target), data_out, control_in),
                name=f"alflow-client-{w}of{n}",
                daemon=True,
            )
            worker = _Worker(w, process, data_in, control_out)
            self.workers.append(worker)
            try:
                process.start()
                worker.started = True
            finally:
                data_out.close()  # the worker holds the other ends: end of file here when it exits
                control_in.close()
            worker.reader = threading.Thread(
                target=self._read_all, args=(worker,), name=f"alflow-client-{w}-reader", daemon=True
            )
            worker.reader.start()

    def _read_all(self, worker: _Worker) -> None:
        """A reader thread: whole messages, read blocking, handed to the event loop.

        Not the loop's own reader: uvloop makes a watched pipe non-blocking, and a large message then arrives in
        parts that ``Connection.recv`` cannot take.
        """
        message: tuple[Any, ...] | None
        while True:
            try:
                message = worker.data.recv()
            except (EOFError, OSError):
                message = None
            self.mailbox.put((worker.index, message))
            with contextlib.suppress(RuntimeError):  # a closed loop: shutdown() reads the mailbox itself
                self.loop.call_soon_threadsafe(self.wakeup.set)
            if message is None:
                return

    def _fail(self, message: str) -> None:
        if self.fatal is None:
            self.fatal = message
            self._tell_all("stop")

    def _tell_all(self, message: str) -> None:
        for worker in self.workers:
            if not worker.ended:
                with contextlib.suppress(OSError):
                    worker.control.send(message)

    async def serve(self) -> None:
        """Handle the workers' messages until every worker has ended (or the grace after a fatal error ran out)."""
        n = len(self.workers)
        not_warm = set(range(n))
        live = n
        deadline: float | None = None
        silence = silence_limit(self.shares[0].spec)
        for worker in self.workers:
            worker.heard = self.loop.time() + START_GRACE_S  # as if heard later: its start-up is no silence
        while live:
            if self.fatal is not None and deadline is None:
                deadline = self.loop.time() + STOP_GRACE_S
            try:
                index, message = self.mailbox.get_nowait()
            except queue.Empty:
                self.wakeup.clear()
                if not self.mailbox.empty():  # put between the two reads: its wake-up may be spent
                    continue
                if deadline is not None and self.loop.time() >= deadline:
                    return  # shutdown() terminates (or kills) the workers that did not end in time
                self._check_silence(silence)
                with contextlib.suppress(TimeoutError):
                    wait = HEARTBEAT_S if deadline is None else min(HEARTBEAT_S, deadline - self.loop.time())
                    await asyncio.wait_for(self.wakeup.wait(), max(0.0, wait))
                continue
            worker = self.workers[index]
            worker.heard = self.loop.time()
            if message is None:  # end of file: the worker exited
                if not worker.ended:
                    worker.ended = True
                    live -= 1
                    worker.process.join(EXIT_GRACE_S)
                    self._fail(
                        f"client process {index + 1} of {n} exited without a result "
                        f"(exit code {worker.process.exitcode})"
                    )
                continue
            kind = message[0]
            if kind == "records":
                self._take(message[1], message[2])
            elif kind == "warm":
                not_warm.discard(index)
                if not not_warm and self.fatal is None:
                    await self._begin_measured()
            elif kind == "end":
                _, status, why, worker.meta = message
                worker.ended = True
                live -= 1
                if status == "failed":
                    self._fail(f"client process {index + 1} of {n}: {why}")

    def _check_silence(self, limit: float) -> None:
        """Fail the load when a live worker has sent nothing (not even a beat) for ``limit`` seconds."""
        now = self.loop.time()
        for worker in self.workers:
            if not worker.ended and now - worker.heard > limit:
                self._fail(
                    f"client process {worker.index + 1} of {len(self.workers)} sent nothing for {limit:g} s "
                    f"(stopped or frozen: pid {worker.process.pid}): the load is stopped and its sessions failed"
                )
                return

    async def _begin_measured(self) -> None:
        try:
            if self.on_measure_start is not None:
                await self.on_measure_start()
        except Exception as exc:
            self._fail(f"load run aborted: {exc!r}")
            return
        if self.progress is not None:
            self.progress.start(self.count, "measured")
        self._tell_all("go")

    def _take(self, rows: list[tuple[Any, ...]], finished: int) -> None:
        for row in rows:
            record = RequestRecord(*row)
            record.request_id = self.next_id
            self.next_id += 1
            self.records.append(record)
        if self.progress is not None:
            for _ in range(finished):
                self.progress.advance()

    def shutdown(self) -> None:
        """Stop every worker: ask, wait a little, terminate, kill; then close the pipes."""
        self._tell_all("stop")
        started = [w.process for w in self.workers if w.started]
        deadline = time.monotonic() + EXIT_GRACE_S
        for process in started:
            process.join(max(0.0, deadline - time.monotonic()))
        for process in started:
            if process.is_alive():
                process.terminate()
                process.join(EXIT_GRACE_S)
            if process.is_alive():
                process.kill()
                process.join()
            process.close()
        for worker in self.workers:  # each worker is gone, so each reader got its end of file
            if worker.reader is not None:
                worker.reader.join(EXIT_GRACE_S)
        self._take_the_rest()
        for worker in self.workers:
            worker.data.close()
            worker.control.close()

    def _take_the_rest(self) -> None:
        """Keep what the workers sent that :meth:`serve` did not read (it was cancelled, or its grace ran out).

        That is the records each stopping worker flushed, in flight ones included, and the workers' windows.
        """
        while True:
            try:
                index, message = self.mailbox.get_nowait()
            except queue.Empty:
                return
            if message is None:
                continue
            if message[0] == "records":
                self._take(message[1], message[2])
            elif message[0] == "end":
                self.workers[index].meta = message[3]

    def merge(self) -> MergedRun:
        """The merged result; the records renumbered in start order (warm-up first), as one process numbers them."""
        tail = self.records[self.base :]
        tail.sort(key=lambda r: (not r.warmup, r.start_ns))
        self.records[self.base :] = tail
        for i, record in enumerate(tail, start=self.base):
            record.request_id = i
        metas = [w.meta for w in self.workers if w.meta is not None]
        start = min((m.measure_start_ns for m in metas), default=time.perf_counter_ns())
        loads = [m.client_load for m in metas if m.client_load is not None]
        result = LoadResult(
            self.records,
            start,
            max((m.measure_end_ns for m in metas), default=start),
            min((m.wall_start_s for m in metas), default=time.time()),
            max((m.wall_end_s for m in metas), default=time.time()),
            ClientLoad.merge(loads) if loads else None,
        )
        return MergedRun(result, self.fatal)


def _worker_main(job: _Job, data: Connection, control: Connection) -> None:
    """A worker process: run its share on alflow's event loop; the parent stops it (SIGINT, SIGHUP ignored).

    A closed terminal sends SIGHUP to the whole group: the parent stops the workers and keeps their records.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    eventloop.run(_WorkerRun(job, data, control).main())


def _send_all(data: Connection, outbox: queue.SimpleQueue[tuple[Any, ...] | None]) -> None:
    """The worker's sender thread: pickling and a full pipe never block the event loop."""
    while (message := outbox.get()) is not None:
        try:
            data.send(message)
        except OSError:  # the parent is gone: the control pipe's end of file stops the run
            return


class _WorkerRun:
    """One worker's run; also its ``Progress`` (finished sessions are counted for the parent)."""

    def __init__(self, job: _Job, data: Connection, control: Connection) -> None:
        self.job = job
        self.data = data
        self.control = control
        self.sink: list[RequestRecord] = []
        self.seen = 0
        self.pending: list[RequestRecord] = []
        self.finished = 0
        self.outbox: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()
        self.go = asyncio.Event()
        self.task: asyncio.Task[LoadResult] | None = None

    def start(self, total: int | None, description: str) -> None:
        """A phase begins (the parent shows its own)."""

    def advance(self) -> None:
        """A session finished."""
        self.finished += 1

    def flush(self, *, everything: bool = False) -> None:
        """Queue the completed records (with ``everything``, all not yet sent) and the finished sessions."""
        self.pending.extend(self.sink[self.seen :])
        self.seen = len(self.sink)
        if everything:
            ready, self.pending = self.pending, []
        else:
            ready = [r for r in self.pending if r.done_ns is not None]
            self.pending = [r for r in self.pending if r.done_ns is None]
        if ready or self.finished:
            rows = [tuple(getattr(r, name) for name in _FIELDS) for r in ready]
            self.outbox.put(("records", rows, self.finished))
            self.finished = 0

    async def _flusher(self) -> None:
        beats = round(HEARTBEAT_S / FLUSH_INTERVAL_S)
        for tick in itertools.count(1):
            await asyncio.sleep(FLUSH_INTERVAL_S)
            self.flush()
            if tick % beats == 0:
                self.outbox.put(("beat",))  # alive, with or without records: the parent watches for silence

    async def _ready(self) -> None:
        """``on_measure_start``: report the warm-up done, wait for the common start."""
        self.flush()
        self.outbox.put(("warm",))
        await self.go.wait()
        if self.job.share.stagger_s:
            await asyncio.sleep(self.job.share.stagger_s)

    def _listen(self, loop: asyncio.AbstractEventLoop) -> None:
        """The control thread: ``go``, then ``stop`` (or the end of file of a parent that is gone)."""
        message = ""
        while message != "stop":
            try:
                message = self.control.recv()
            except (EOFError, OSError):
                message = "stop"
            try:
                loop.call_soon_threadsafe(self._control, message)
            except RuntimeError:  # the run is over
                return

    def _control(self, message: str) -> None:
        if message == "go":
            self.go.set()
        elif self.task is not None:
            self.task.cancel()

    async def main(self) -> None:
        loop = asyncio.get_running_loop()
        sender = threading.Thread(
            target=_send_all, args=(self.data, self.outbox), name="alflow-sender", daemon=True
        )
        sender.start()
        self.outbox.put(("beat",))  # started: the parent counts silence from here
        job, share = self.job, self.job.share
        self.task = asyncio.create_task(
            job.run(
                share.sessions,
                job.target,
                share.spec,
                on_measure_start=self._ready,
                progress=self,
                warmup_sessions=share.warmup_sessions,
                sink=self.sink,
            )
        )
        threading.Thread(target=self._listen, args=(loop,), name="alflow-control", daemon=True).start()
        flusher = asyncio.create_task(self._flusher())
        status, why, meta = "done", None, None
        try:
            meta = replace(await self.task, records=[])  # the window: the records went in batches
        except asyncio.CancelledError:
            status = "stopped"
        except AlflowError as exc:  # LoadAbortedError carries the partial result
            status, why = "failed", str(exc)
            partial = getattr(exc, "result", None)
            meta = None if partial is None else replace(partial, records=[])
        except Exception as exc:
            status, why = "failed", f"unexpected {type(exc).__name__}: {exc}"
        finally:
            flusher.cancel()
        self.flush(everything=True)
        self.outbox.put(("end", status, why, meta))
        self.outbox.put(None)
        await asyncio.to_thread(sender.join)
