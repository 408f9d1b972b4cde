"""Termination signals of a CLI command that runs an event loop in the foreground (``bench``, ``eval gsm8k``).

:func:`sigterm_as_exit`: SIGTERM (or SIGHUP: a closed terminal, a dropped ssh session) cancels the command's main
task like Ctrl-C does, so its ``finally`` blocks keep what was measured; it then exits ``128 + signal``.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

from alflow.util.signals import TERMINATION

T = TypeVar("T")


class _Sigterm:
    """SIGTERM (or SIGHUP) ends a benchmark like Ctrl-C does, with exit code 143 (129) and no traceback.

    The streams are cancelled, the records so far written to ``--out``, the client processes stopped (without it
    the command died at once, its records lost and its client processes left to stop by themselves, up to half a
    minute later).
    """

    def __init__(self) -> None:
        self.task: asyncio.Task[Any] | None = None
        self.signals: list[int] = []

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` as the task a SIGTERM cancels."""
        self.task = asyncio.current_task()
        return await coro

    def handle(self, signum: int, frame: object) -> None:
        del frame
        self.signals.append(signum)
        task = self.task
        if task is None or task.done() or len(self.signals) > 1:
            raise SystemExit(128 + signum)
        loop = task.get_loop()
        if asyncio.current_task(loop) is task:  # its own code runs (drawing prompts): stop it right here
            raise SystemExit(128 + signum)
        loop.call_soon_threadsafe(task.cancel)  # between steps: cancelled like Ctrl-C, never inside a library

    def code(self) -> int:
        return 128 + self.signals[0]


@contextlib.contextmanager
def sigterm_as_exit() -> Iterator[_Sigterm]:
    """Install :class:`_Sigterm` for the block (main thread only); a SIGTERM ends it with ``SystemExit(143)``.

    SIGHUP (a closed terminal, a dropped ssh session) likewise, with ``SystemExit(129)``: the records so far are
    kept (hostile round 18, F4: it died at once and wrote nothing). A SIGHUP ignored (``nohup``) stays ignored.
    """
    watch = _Sigterm()
    if threading.current_thread() is not threading.main_thread():
        yield watch
        return
    handled = [sig for sig in TERMINATION if signal.getsignal(sig) != signal.SIG_IGN]  # nohup: stays ignored
    before = {sig: signal.signal(sig, watch.handle) for sig in handled}
    try:
        yield watch
    except BaseException:  # cancelled by the signal, or failing as it came: a terminated run either way
        if watch.signals:
            raise SystemExit(watch.code()) from None
        raise
    finally:
        for sig, handler in before.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
    if watch.signals:  # the run ended on its own as the signal came: still a terminated run
        raise SystemExit(watch.code())
