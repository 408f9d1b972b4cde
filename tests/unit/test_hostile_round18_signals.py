"""Hostile round 18 (#49), F4: SIGHUP (a closed terminal, a dropped ssh session) is handled as SIGTERM.

It went to the default action: the process died at once, every measurement of ``bench --out`` and ``alflow run``
lost. Now :func:`alflow.util.signals.as_termination` hands it to whatever handles SIGTERM (Prefect's bridge in a
flow, ``alflow run``'s own handler), held back like SIGTERM while a load runs; ``nohup``'s ignore is kept.
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
    """What the SIGTERM handler raises (as Prefect's ``TerminationSignal``), with the signal's number."""


def _raise_stop(signum: int, frame: object) -> None:
    raise _Stop(signum)


@contextmanager
def _handlers(hangup: object) -> Iterator[None]:
    term, hup = signal.signal(signal.SIGTERM, _raise_stop), signal.signal(signal.SIGHUP, hangup)  # type: ignore[arg-type]
    try:
        signals.hangup_as_termination()
        yield
    finally:
        signal.signal(signal.SIGTERM, term)
        signal.signal(signal.SIGHUP, hup)


async def _load(steps: list[str]) -> str:
    asyncio.get_running_loop().call_soon(os.kill, os.getpid(), signal.SIGHUP)
    try:
        await asyncio.sleep(30.0)
    finally:
        steps.append("cleaned up")
    return "ran to its end"


def test_a_sighup_during_a_load_cancels_it_then_reaches_the_sigterm_handler_as_sighup() -> None:
    steps: list[str] = []
    started = time.monotonic()
    with _handlers(signal.SIG_DFL), pytest.raises(_Stop) as stopped:
        run_stoppable(_load(steps))
    assert time.monotonic() - started < 5.0
    assert steps == ["cleaned up"]  # the records so far kept
    assert stopped.value.args == (signal.SIGHUP,)  # the run says "stopped by SIGHUP"


def test_a_sighup_outside_a_load_goes_to_the_sigterm_handler() -> None:
    with _handlers(signal.SIG_DFL), pytest.raises(_Stop) as stopped:
        signal.raise_signal(signal.SIGHUP)  # its handler runs before this call returns
    assert stopped.value.args == (signal.SIGHUP,)


def test_nohup_keeps_sighup_ignored() -> None:
    with _handlers(signal.SIG_IGN):
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
        assert signal.SIGHUP not in signals.stop_signals()
    with _handlers(signal.SIG_DFL):
        assert signal.SIGHUP in signals.stop_signals()
