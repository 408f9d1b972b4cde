"""A SIGTERM during a load or while a point is judged is held back, then handed on (:mod:`alflow.util.signals`).

Hostile round F21: ``alflow run m2`` ignored a SIGTERM sent just as its load started. Prefect's SIGTERM bridge
raises ``TerminationSignal`` wherever the main thread is; in the load's event loop that was a finalizer of a
transport (``Exception ignored in: _SelectorTransport.__del__``), and can as well be a loop callback or another
task: each drops the exception, and the load ran to its end. Here a raising handler stands for Prefect's, and
the signal is sent from a loop callback, one of the places that drop it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from alflow.util import signals
from alflow.util.eventloop import run_stoppable

pytestmark = pytest.mark.unit


class _Stop(BaseException):
    """What the raising handler raises (Prefect's bridge: ``TerminationSignal``, a ``BaseException``)."""


def _raise_stop(signum: int, frame: object) -> None:
    raise _Stop(signum)


@contextmanager
def _raising_sigterm_handler() -> Iterator[None]:
    before = signal.signal(signal.SIGTERM, _raise_stop)
    try:
        yield
        assert signal.getsignal(signal.SIGTERM) is _raise_stop  # put back after every run
    finally:
        signal.signal(signal.SIGTERM, before)


async def _load(steps: list[str], long_s: float) -> str:
    """A load that gets SIGTERM from a loop callback, then would stream for ``long_s``."""
    asyncio.get_running_loop().call_soon(os.kill, os.getpid(), signal.SIGTERM)
    try:
        await asyncio.sleep(long_s)
    finally:
        steps.append("cleaned up")
    return "ran to its end"


def test_the_premise_a_signal_raised_in_a_loop_callback_is_lost() -> None:
    steps: list[str] = []
    with _raising_sigterm_handler():
        assert asyncio.run(_load(steps, 0.2)) == "ran to its end"  # asyncio logged _Stop and went on


def test_a_sigterm_in_a_loop_callback_cancels_the_load_then_reaches_its_handler() -> None:
    steps: list[str] = []
    started = time.monotonic()
    with _raising_sigterm_handler(), pytest.raises(_Stop) as stopped:
        run_stoppable(_load(steps, 30.0))
    assert time.monotonic() - started < 5.0
    assert steps == ["cleaned up"]  # its finally blocks ran (client processes stopped, records kept)
    assert isinstance(stopped.value.__context__, asyncio.CancelledError)


def test_a_sigterm_after_the_load_ended_is_handed_on_too() -> None:
    async def ends_as_it_comes() -> str:
        os.kill(os.getpid(), signal.SIGTERM)  # recorded: the task is already past its last step
        return "done"

    with _raising_sigterm_handler(), pytest.raises(_Stop):
        run_stoppable(ends_as_it_comes())


def _deferred_block(steps: list[str], received: list[int]) -> None:
    with signals.deferred() as deferral:
        received_then = deferral.received
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)  # a second one cannot break off what the first starts
        steps.append("the block ran to its end")
        received.extend(received_then)


def test_a_deferred_block_runs_to_its_end_then_the_first_signal_is_handed_on() -> None:
    steps: list[str] = []
    received: list[int] = []
    with _raising_sigterm_handler(), pytest.raises(_Stop):
        _deferred_block(steps, received)
    assert steps == ["the block ran to its end"]
    assert received == [signal.SIGTERM, signal.SIGTERM]


def test_without_a_signal_nothing_changes() -> None:
    with _raising_sigterm_handler():
        assert run_stoppable(asyncio.sleep(0, result="done")) == "done"
        with signals.deferred() as deferral:
            pass
    assert deferral.received == []


def test_a_block_still_running_after_the_hold_gets_the_signal_then(monkeypatch: pytest.MonkeyPatch) -> None:
    """Review: a block stuck past the hold kept ``alflow run``'s stop watchdog from ever starting."""
    import os
    import signal
    import time

    from alflow.util import signals

    monkeypatch.setattr(signals, "HOLD_S", 0.3)
    got: list[float] = []

    def handler(signum: int, frame: object) -> None:
        got.append(time.monotonic())
        raise SystemExit(128 + signum)

    before = signal.signal(signal.SIGTERM, handler)
    try:
        started = time.monotonic()

        def stuck() -> None:  # a block that would run 5 s: the hold's bound ends it at 0.3 s
            with signals.deferred():
                os.kill(os.getpid(), signal.SIGTERM)
                for _ in range(50):
                    time.sleep(0.1)

        with pytest.raises(SystemExit):
            stuck()
        assert got
        assert got[0] - started < 2.0
        assert len(got) == 1  # handed on once, not again when the block ended
    finally:
        signal.signal(signal.SIGTERM, before)


def test_an_ignored_signal_stays_ignored() -> None:
    """Review: a SIGTERM ignored (SIG_IGN) before the block was caught and cancelled the load."""
    import os
    import signal

    from alflow.util import signals

    before = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        with signals.deferred() as held:
            os.kill(os.getpid(), signal.SIGTERM)
        assert held.received == []
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, before)
