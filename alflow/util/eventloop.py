"""The one event loop factory of alflow's clients and servers: uvloop's when installed, else asyncio's.

uvloop costs about 1.5x less CPU per streamed chunk than asyncio's default loop
(``benchmarks/client_overhead.py --loop asyncio`` measures the difference).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from alflow.util import signals

T = TypeVar("T")


def new_event_loop() -> asyncio.AbstractEventLoop:
    """An event loop: uvloop's when it is installed, else asyncio's default."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion on a new loop from :func:`new_event_loop` (closed afterwards)."""
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(coro)


def run_stoppable(
    coro: Coroutine[Any, Any, T],
    *,
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None,
) -> T:
    """Run ``coro`` on a new loop (``loop_factory``; None: asyncio's default); SIGTERM cancels it, then goes on.

    A SIGTERM while it runs is held back (:func:`alflow.util.signals.deferred`): it cancels ``coro``'s task, so
    its ``finally`` blocks run (client processes stopped, the records so far kept), and once the loop is closed
    it reaches the handler it replaced, which raises (Prefect's ``TerminationSignal``, ``alflow run``'s
    ``SystemExit``) in place of the ``CancelledError``. Without this the handler raised inside the loop, where a
    finalizer, a callback or another task could drop the exception: the signal was lost and the load ran on.
    A SIGTERM after ``coro`` ended is handed on too: its result is not returned.
    """
    task: list[asyncio.Task[T]] = []

    def cancel(signum: int) -> None:
        del signum
        if task and not task[0].done():
            task[0].get_loop().call_soon_threadsafe(task[0].cancel)  # between steps, never inside a library

    async def main() -> T:
        current = asyncio.current_task()
        assert current is not None
        task.append(current)
        if stop.received:  # it came before the loop ran this: cancelled before it begins
            coro.close()
            raise asyncio.CancelledError
        return await coro

    with signals.deferred(on_signal=cancel) as stop, asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(main())
