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
import time
from collections.abc import Callable, Iterator, Sequence
from types import FrameType
from typing import Any, Final

TERMINATION: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGHUP)
"""The signals held back by default (Ctrl-C's SIGINT is asyncio's own: its runner cancels the main task).

SIGHUP (a closed terminal, a dropped ssh session) ends a command as SIGTERM does: what was measured is kept
(hostile round 18, F4: it died at once, every measurement lost)."""


def stop_signals() -> tuple[signal.Signals, ...]:
    """The signals a server stops on: SIGINT, SIGTERM, and SIGHUP unless it is ignored (``nohup``)."""
    hangup = () if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN else (signal.SIGHUP,)
    return (signal.SIGINT, signal.SIGTERM, *hangup)


def as_termination(signum: int, frame: FrameType | None) -> None:
    """A SIGHUP handler: the signal goes to whatever handles SIGTERM now, as SIGTERM would (it may raise).

    During a flow run that is Prefect's bridge (``TerminationSignal(signal=1)``: the run stored as stopped by
    SIGHUP), elsewhere ``alflow run``'s own handler (``SystemExit(129)``).
    """
    _hand_on(signum, signal.getsignal(signal.SIGTERM), frame)


def hangup_as_termination() -> None:
    """Install :func:`as_termination` for SIGHUP (main thread only; a SIGHUP ignored, ``nohup``, stays ignored)."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGHUP) != signal.SIG_IGN:
        signal.signal(signal.SIGHUP, as_termination)


HOLD_S: Final = 5.0
"""The longest a signal is held back: a block still running then gets it as it would have without the deferral
(``alflow run``'s handler starts its stop watchdog then, so a stuck block cannot keep the process alive)."""


class Deferral:
    """The signals a :func:`deferred` block received, in order (the first one is handed on)."""

    def __init__(self, on_signal: Callable[[int], None] | None) -> None:
        self.received: list[int] = []
        self._on_signal = on_signal
        self.before: dict[signal.Signals, Any] = {}
        self.expired = False
        """The hold ran out (:data:`HOLD_S`): the signal went to the replaced handler while the block still ran."""

    def handle(self, signum: int, frame: FrameType | None) -> None:
        """The stand-in handler: record a signal (the first: ``on_signal``, the hold's bound), or hand it on.

        Once the hold ran out, the signal goes to the handler it replaced (which may raise).
        """
        if self.expired:
            _hand_on(signum, self.before.get(signal.Signals(signum)), frame)
            return
        self.received.append(signum)
        if len(self.received) == 1:
            threading.Thread(
                target=self._bound, args=(signum,), name="alflow-signal-hold", daemon=True
            ).start()
            if self._on_signal is not None:
                with contextlib.suppress(Exception):  # a handler that raises is what this module avoids
                    self._on_signal(signum)

    def _bound(self, signum: int) -> None:
        """After :data:`HOLD_S`, a block still holding the signal gets it again, through the replaced handler."""
        time.sleep(HOLD_S)
        if self.before and not self.expired and signal.getsignal(signum) == self.handle:
            self.expired = True
            os.kill(os.getpid(), signum)  # the main thread runs handle() again, now handing it on


def _hand_on(signum: int, handler: Any, frame: FrameType | None = None) -> None:
    """Deliver ``signum`` to ``handler``, as the signal would have reached it (it may raise, or end the process)."""
    if callable(handler):
        handler(signum, frame)
    elif handler == signal.SIG_DFL:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)  # the default action happens now
    # SIG_IGN, or a handler not installed from Python: the signal is dropped, as it would have been


@contextlib.contextmanager
def deferred(
    signals: Sequence[signal.Signals] = TERMINATION, on_signal: Callable[[int], None] | None = None
) -> Iterator[Deferral]:
    """Hold ``signals`` back during the block, then hand the first one received to the handler it replaced.

    The block ends first (its ``finally`` blocks run, its result is kept); what the handler raises then
    replaces what the block raised. A block that has not ended :data:`HOLD_S` after the signal gets it then. A
    signal ignored (``SIG_IGN``) stays ignored. Outside the main thread the block runs with the handlers as they are.
    """
    deferral = Deferral(on_signal)
    if threading.current_thread() is not threading.main_thread():
        yield deferral
        return
    held = [sig for sig in signals if signal.getsignal(sig) != signal.SIG_IGN]
    deferral.before = {sig: signal.signal(sig, deferral.handle) for sig in held}
    try:
        yield deferral
    finally:
        for sig, handler in deferral.before.items():  # None: a handler not set from Python, not put back
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        if deferral.received and not deferral.expired:
            first = deferral.received[0]
            _hand_on(first, deferral.before[signal.Signals(first)])
