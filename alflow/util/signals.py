"""Termination signals held back while a piece of work must not be broken off, then handed on.

A Python signal handler that raises (Prefect's SIGTERM bridge raises ``TerminationSignal`` during a flow run,
``alflow run``'s own handler ``SystemExit``) raises wherever the main thread happens to be. In an event loop that
is often a place that drops the exception: a finalizer (``__del__`` of a transport the garbage collector just
freed), a loop callback (asyncio logs it and goes on), or a task other than the main one (its exception is kept
in the task, or gathered as a result). The signal is then lost and the run goes on as if it never came. In plain
code it breaks off whatever runs, a point half judged and never collected among them.

:func:`deferred` replaces the handlers of the signals for a block with one that only records them (and, when
given, calls ``on_signal``: :func:`alflow.util.eventloop.run_stoppable` cancels its coroutine there); when the
block ends, however it ends, the handlers are put back and the first signal recorded is handed to the handler it
replaced, from one known place. A second signal meanwhile is recorded and dropped: it cannot break off the
unwinding the first one starts. Signal handlers belong to the main thread: elsewhere :func:`deferred` changes
nothing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from types import FrameType
from typing import Any

TERMINATION: tuple[signal.Signals, ...] = (signal.SIGTERM,)
"""The signals held back by default (Ctrl-C's SIGINT is asyncio's own: its runner cancels the main task)."""


class Deferral:
    """The signals a :func:`deferred` block received, in order (the first one is handed on)."""

    def __init__(self, on_signal: Callable[[int], None] | None) -> None:
        self.received: list[int] = []
        self._on_signal = on_signal

    def handle(self, signum: int, frame: FrameType | None) -> None:
        """The stand-in handler: record the signal; the first one also calls ``on_signal``. Never raises."""
        del frame
        self.received.append(signum)
        if len(self.received) == 1 and self._on_signal is not None:
            with contextlib.suppress(Exception):  # a handler that raises is what this module avoids
                self._on_signal(signum)


def _hand_on(signum: int, handler: Any) -> None:
    """Deliver ``signum`` to ``handler``, as the signal would have reached it (it may raise, or end the process)."""
    if callable(handler):
        handler(signum, None)
    elif handler == signal.SIG_DFL:
        os.kill(os.getpid(), signum)  # the handler is back in place: the default action happens now
    # SIG_IGN, or a handler not installed from Python: the signal is dropped, as it would have been


@contextlib.contextmanager
def deferred(
    signals: Sequence[signal.Signals] = TERMINATION, on_signal: Callable[[int], None] | None = None
) -> Iterator[Deferral]:
    """Hold ``signals`` back during the block, then hand the first one received to the handler it replaced.

    The block ends first (its ``finally`` blocks run, its result is kept); what the handler raises then
    replaces what the block raised. Outside the main thread the block runs with the handlers as they are.
    """
    deferral = Deferral(on_signal)
    if threading.current_thread() is not threading.main_thread():
        yield deferral
        return
    before = {sig: signal.signal(sig, deferral.handle) for sig in signals}
    try:
        yield deferral
    finally:
        for sig, handler in before.items():  # None: a handler not set from Python, which cannot be put back
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        if deferral.received:
            first = deferral.received[0]
            _hand_on(first, before[signal.Signals(first)])
