"""Schedulers: fixed concurrency, or a request rate under a concurrency cap, with warm-up.

The load is a fixed concurrency, or a request rate (Poisson or constant) under a concurrency cap,
for a number of prompts or a duration, after warm-up sessions that are excluded from results.

A session (one dataset row) holds one concurrency slot for all of its turns; a multi-turn session
sends turn n+1 with turn n's live reply appended to the history. The request rate applies to
session starts. :func:`run_load` returns every record (warm-up ones flagged); when the run is
aborted by a fatal error, :class:`LoadAbortedError` carries the partial result.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace

import orjson

from alflow.datasets.types import Session
from alflow.errors import AlflowError, InvalidInputError
from alflow.loadgen.client import (
    AiohttpTransport,
    Clock,
    FatalRequestError,
    Transport,
    output_cap,
    stream_request,
)
from alflow.loadgen.endpoints import Endpoint, get_endpoint
from alflow.loadgen.fast import FastTransport
from alflow.loadgen.monitor import LoadMonitor
from alflow.loadgen.records import RequestRecord
from alflow.loadgen.spec import (
    MAX_PROCESSES,
    REJECTIONS_BEFORE_ABORT,
    LoadAbortedError,
    LoadCall,
    LoadResult,
    LoadSpec,
    Progress,
    StalledServerError,
    Target,
    arrival_offsets_ns,
)
from alflow.loadgen.timing import ClientLoad, client_bound_reasons

log = logging.getLogger(__name__)


class _Run:
    def __init__(self, call: LoadCall, transport: Transport) -> None:
        self.target = target = call.target
        self.endpoint: Endpoint = get_endpoint(target.endpoint)
        self.url = target.url
        self.spec = spec = call.spec
        self.transport = transport
        self.clock, self.progress = call.clock, call.progress
        self.records: list[RequestRecord] = call.sink if call.sink is not None else []
        self.fatal: AlflowError | None = None
        self.successes = 0
        self.rejections = 0
        self.slots = asyncio.Semaphore(spec.concurrency)
        self.in_flight: dict[int, RequestRecord] = {}  # by id(): records compare by value
        self.tasks: set[asyncio.Task[None]] = set()
        self.monitor: LoadMonitor | None = None
        """Set for the measured phase: sessions opened and closed are counted, the loop's lag probed."""

    async def watch_stalls(self, stall_s: float) -> None:
        """Abort the run when no open stream received anything (or started) for ``stall_s`` seconds."""
        stall_ns = int(stall_s * 1e9)
        while self.fatal is None:
            await asyncio.sleep(min(stall_s / 4, 5.0))
            if not self.in_flight:
                continue
            latest = max(r.chunk_ns[-1] if r.chunk_ns else (r.start_ns or 0) for r in self.in_flight.values())
            if self.clock() - latest < stall_ns:
                continue
            message = (
                f"stalled: the server sent no complete event for {stall_s:g} s on any of {len(self.in_flight)} open "
                "streams (stall timeout)"
            )
            self.fatal = StalledServerError(message)
            for rec in self.in_flight.values():
                rec.error = message
            for task in list(self.tasks):
                task.cancel()
            return

    def _check_rejections(self, rec: RequestRecord) -> None:
        """Abort when the first requests of a run are all rejected (HTTP 4xx): the input is wrong."""
        if self.successes or rec.http_status is None or not 400 <= rec.http_status < 500:
            return
        self.rejections += 1
        if self.rejections >= REJECTIONS_BEFORE_ABORT:
            raise FatalRequestError(
                f"the first {self.rejections} requests were all rejected; the last: {rec.error}"
            )

    async def session(self, session: Session, *, warmup: bool) -> None:
        history: list[Mapping[str, str]] = list(session.prefix_messages)
        monitor = None if warmup else self.monitor
        if monitor is not None:
            monitor.opened()
        try:
            for i, turn in enumerate(session.turns):
                fields = self.endpoint.body(self.target.model, history, turn, self.target.sampling)
                body = orjson.dumps(fields)
                rec = RequestRecord(
                    request_id=len(self.records),
                    session_id=session.session_id,
                    turn=i,
                    category=session.category,
                    warmup=warmup,
                )
                self.records.append(rec)
                self.in_flight[id(rec)] = rec
                try:
                    await stream_request(
                        self.transport,
                        self.url,
                        body,
                        self.endpoint,
                        rec,
                        clock=self.clock,
                        timeout_s=self.spec.timeout_s,
                        keep_text=self.spec.keep_text or session.multiturn,
                        counts=self.target.counts,
                        secrets=(self.target.api_key,) if self.target.api_key else (),
                        max_tokens=output_cap(fields),
                    )
                finally:
                    self.in_flight.pop(id(rec), None)
                if rec.ok:
                    self.successes += 1
                else:
                    self._check_rejections(rec)
                    if i + 1 < len(session.turns):
                        log.warning("session %s: turn %d failed, later turns skipped", session.session_id, i)
                    break
                if i + 1 < len(session.turns):
                    history.append({"role": "user", "content": str(turn.prompt)})
                    history.append({"role": "assistant", "content": rec.text or ""})
        except AlflowError as exc:
            if self.fatal is None:
                self.fatal = exc
        except Exception as exc:  # a bug must stop the run, not vanish in a task
            log.exception("session %s failed unexpectedly", session.session_id)
            if self.fatal is None:
                self.fatal = AlflowError(
                    f"unexpected {type(exc).__name__} in session {session.session_id}: {exc}"
                )
        finally:
            if monitor is not None:
                monitor.closed()
            self.slots.release()
            if self.progress is not None:
                self.progress.advance()

    async def phase(self, sessions: Sequence[Session], count: int | None, *, warmup: bool) -> None:
        spec = self.spec
        tasks = self.tasks
        start_ns = self.clock()
        deadline_ns = None if warmup or spec.duration_s is None else start_ns + int(spec.duration_s * 1e9)
        schedule = None if warmup or spec.request_rate is None else arrival_offsets_ns(spec)
        i = 0
        while count is None or i < count:
            if self.fatal is not None:
                break
            if schedule is not None:
                delay = (start_ns + next(schedule) - self.clock()) / 1e9
                if delay > 0:
                    await asyncio.sleep(delay)
            if deadline_ns is not None and self.clock() >= deadline_ns:
                break
            await self.slots.acquire()
            if self.fatal is not None or (deadline_ns is not None and self.clock() >= deadline_ns):
                self.slots.release()
                break
            task = asyncio.create_task(self.session(sessions[i % len(sessions)], warmup=warmup))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            i += 1
        if self.monitor is not None and not warmup:
            self.monitor.all_started()
        if self.fatal is not None:
            for t in tasks:
                t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


async def run_load(
    sessions: Sequence[Session],
    target: Target,
    spec: LoadSpec,
    *,
    transport: Transport | None = None,
    clock: Clock = time.perf_counter_ns,
    on_measure_start: Callable[[], Awaitable[None]] | None = None,
    progress: Progress | None = None,
    warmup_sessions: Sequence[Session] | None = None,
    sink: list[RequestRecord] | None = None,
) -> LoadResult:
    """Run warm-up, call ``on_measure_start`` (the baseline scrape), then the measured phase.

    Without ``transport`` one is made for the whole run (``spec.transport``: the fast HTTP/1.1
    transport by default, or one aiohttp session), sending ``target.headers``. ``num_prompts``
    defaults to the number of sessions unless a duration is given; sessions are reused in order
    when more prompts than sessions are asked for. Warm-up sends ``spec.warmup`` sessions taken
    from ``warmup_sessions`` (default: the workload itself). Records are appended to ``sink`` as
    requests start, so a caller keeps them even when the run is interrupted.
    """
    spec.check()
    if not sessions:
        raise InvalidInputError("the workload is empty: no sessions to send")
    get_endpoint(target.endpoint)
    call = LoadCall(sessions, target, spec, clock, on_measure_start, progress, warmup_sessions, sink)
    if spec.auto_processes and transport is None:
        return await _run_auto(call)
    if spec.processes > 1 and transport is None:  # split over client processes (this module is theirs to run)
        from alflow.loadgen.multiproc import run_processes

        merged = await run_processes(run_load, call)
        if merged.fatal is not None:
            raise LoadAbortedError(merged.fatal, merged.result)
        return merged.result
    if transport is None:
        headers = target.headers
        if spec.transport == "aiohttp":
            async with AiohttpTransport.new_session() as http:
                return await _run_with(AiohttpTransport(http, headers), call)
        fast = FastTransport(headers)
        try:
            return await _run_with(fast, call)
        finally:
            await fast.close()
    return await _run_with(transport, call)


async def _run_with(transport: Transport, call: LoadCall) -> LoadResult:
    sessions, spec, clock, progress = call.sessions, call.spec, call.clock, call.progress
    run = _Run(call, transport)
    count = spec.num_prompts if spec.num_prompts is not None else (None if spec.duration_s else len(sessions))
    wall_start = time.time()
    start_ns = end_ns = clock()

    load: list[ClientLoad] = []

    def result() -> LoadResult:
        measured = [r.done_ns for r in run.records if not r.warmup and r.done_ns is not None]
        end = max(measured, default=end_ns)
        return LoadResult(run.records, start_ns, end, wall_start, time.time(), load[0] if load else None)

    async def stop_monitor() -> None:
        if run.monitor is not None and not load:
            load.append(await run.monitor.stop())

    watcher = asyncio.create_task(run.watch_stalls(spec.stall_timeout_s)) if spec.stall_timeout_s else None
    try:
        if spec.warmup:
            if progress is not None:
                progress.start(spec.warmup, "warm-up")
            await run.phase(call.warmup_sessions or sessions, spec.warmup, warmup=True)
        if run.fatal is None:
            if call.on_measure_start is not None:
                await call.on_measure_start()
            if progress is not None:
                progress.start(count, "measured")
            start_ns = end_ns = clock()
            wall_start = time.time()
            run.monitor = LoadMonitor(spec.concurrency, closed_loop=spec.request_rate is None)
            run.monitor.start()
            await run.phase(sessions, count, warmup=False)
            end_ns = clock()
            await stop_monitor()
    except Exception as exc:
        await stop_monitor()
        raise LoadAbortedError(f"load run aborted: {exc!r}", result()) from exc
    finally:
        if run.monitor is not None:
            run.monitor.cancel()  # interrupted (cancelled): no probe outlives the run
        # cancelled while sessions were in flight (a stop from the parent of a client process): each open stream is
        # cancelled and awaited, so its record says "cancelled" and never reads as a completed request
        # (a no-op once a phase has awaited them all)
        pending = list(run.tasks)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        if watcher is not None:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
    await stop_monitor()
    if run.fatal is not None:
        raise LoadAbortedError(str(run.fatal), result()) from run.fatal
    return result()


async def _run_auto(call: LoadCall) -> LoadResult:
    """``spec.auto_processes``: the warm-up, watched, in this process; the measured phase in 1 or N processes.

    The warm-up runs as a measured phase of its own (so the monitor watches it) and its records are then flagged
    ``warmup``. A client-bound warm-up splits the measured phase over ``min(cores, concurrency)`` processes
    (:data:`MAX_PROCESSES` at most); else it runs here. The server is warm either way: no second warm-up. Both
    phases run on the default clock.
    """
    sessions, target, spec, progress = call.sessions, call.target, call.spec, call.progress
    records = call.sink if call.sink is not None else []
    warm = list(call.warmup_sessions or sessions)
    probe_spec = replace(
        spec, auto_processes=False, warmup=0, num_prompts=spec.warmup, duration_s=None, request_rate=None
    )  # a warm-up runs closed-loop, as in one process
    first = len(records)
    try:
        probe = await run_load(warm, target, probe_spec, progress=progress, sink=records)
    finally:
        for rec in records[first:]:
            rec.warmup = True
    reasons = [] if probe.client_load is None else client_bound_reasons(probe.client_load)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    processes = min(cores, spec.concurrency, MAX_PROCESSES) if reasons else 1
    if reasons:
        log.warning(
            "the warm-up found the client to be the bottleneck (%s): the measured phase runs in %d processes",
            "; ".join(reasons),
            processes,
        )
    measured = replace(spec, auto_processes=False, warmup=0, processes=processes)
    return await run_load(
        sessions, target, measured, on_measure_start=call.on_measure_start, progress=progress, sink=records
    )
