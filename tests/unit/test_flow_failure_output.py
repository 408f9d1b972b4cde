"""A failed ``alflow run``: alflow's own errors are logged without a traceback, the failure is one ``error:`` line.

Found by benchmarks/fault_suite.py (start-failure, crash-mid-point, stalled-stream): Prefect's engine
logged every failed task and flow run with its traceback, twice per failure, and the server's log
tail in the message printed further lines starting with ``error:``.
"""

from __future__ import annotations

import logging
import sys

import pytest

from alflow.cli.run import _AlflowErrorsWithoutTraceback, print_flow_failure, quiet_expected_tracebacks
from alflow_infra.errors import ServerStartError

pytestmark = pytest.mark.unit


def _record(exc: BaseException) -> logging.LogRecord:
    try:
        raise exc
    except BaseException:
        return logging.LogRecord(
            "prefect.flow_runs", logging.ERROR, __file__, 1, "failed: %r", (exc,), sys.exc_info()
        )


def test_an_alflow_error_loses_its_traceback_and_keeps_its_message() -> None:
    record = _record(ServerStartError("vllm server died before it was ready"))
    assert _AlflowErrorsWithoutTraceback().filter(record)
    assert record.exc_info is None
    assert "died before it was ready" in logging.Formatter().format(record)
    assert "Traceback" not in logging.Formatter().format(record)


def test_any_other_exception_keeps_its_traceback() -> None:
    record = _record(KeyError("a bug"))
    assert _AlflowErrorsWithoutTraceback().filter(record)
    assert "Traceback (most recent call last)" in logging.Formatter().format(record)


def test_the_filter_is_installed_once_on_prefects_run_loggers() -> None:
    quiet_expected_tracebacks()
    quiet_expected_tracebacks()
    for name in ("prefect.flow_runs", "prefect.task_runs"):
        filters = logging.getLogger(name).filters
        assert sum(isinstance(f, _AlflowErrorsWithoutTraceback) for f in filters) == 1


def test_a_failure_message_with_a_log_tail_has_one_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    message = (
        "server died before it was ready: exit 1\n--- last log lines ---\nerror: simulated startup failure"
    )
    print_flow_failure("flow m2", message)
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "error: flow m2 failed: server died before it was ready: exit 1",
        "  | --- last log lines ---",
        "  | error: simulated startup failure",
    ]


def test_a_termination_signal_behind_another_error_still_sets_the_exit_code() -> None:
    """Prefect 3.9 can report a SIGTERM that lands while it sets up a task run as "Task run is not set"."""
    from prefect.exceptions import TerminationSignal

    from alflow.cli.run import _termination_signal

    class State:
        def __init__(self, exc: BaseException) -> None:
            self.exc = exc

        def result(self, raise_on_failure: bool = True) -> BaseException:
            assert raise_on_failure is False
            return self.exc

    try:
        try:
            raise TerminationSignal(signal=15)
        except TerminationSignal:
            raise ValueError("Task run is not set")  # noqa: B904 - as Prefect raises it
    except ValueError as exc:
        wrapped = exc
    assert _termination_signal(State(wrapped)) == 15
    assert _termination_signal(State(ValueError("a plain failure"))) is None
