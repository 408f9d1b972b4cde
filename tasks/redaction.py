"""What alflow hands Prefect's loggers and states passes the one redactor first (:mod:`alflow.util.redact`).

Configuration refuses credentials in URLs (:func:`alflow.config.base.check_no_url_credentials`); this is
the defence behind it. :class:`RedactingFilter` rewrites a log record's message and traceback text with
:func:`alflow.util.redact.redact_urls_in_text` (``user:pass@`` and credential-named URL parameters become
``***``) before any handler formats it: Prefect's API log handler (the logs stored in its database and
shown in the UI) and its console handler (the lines printed on a terminal).

An exception's text becomes a Prefect state message (``Failed('... ConnectionError: ...')``, stored, sent
as an event) and the exception itself a stored result. Prefect's engines log a failing flow's or task's
exception on the run logger (``Encountered exception during execution``, ``Task run failed with
exception``) before they make its state, so the filter also redacts the exceptions a record carries in
place (:func:`redact_exception`); :func:`alflow_tasks.retry.retry_transient` does the same for a task whose retry
it declines (Prefect logs nothing first there). An exception whose text does not come from its arguments
(or ``OSError``'s fields) keeps its text: alflow's own errors redact URLs where they are raised.

:func:`install_log_redaction` puts it, as Prefect puts its own API-key filter, on the loggers of flow and
task runs (``get_run_logger()``, the engines' state lines such as ``Finished in state Failed('...')``), and
on the API and console handlers attached to them, to ``prefect.extra`` (``PREFECT_LOGGING_EXTRA_LOGGERS``)
and to the root logger, so records that propagate there from other loggers are redacted as well. Every flow
module installs it when imported (:mod:`alflow_flows.common`); installing again changes nothing.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Mapping

from alflow.util.redact import redact_urls_in_text

RUN_LOGGERS = ("prefect.flow_runs", "prefect.task_runs")
"""The loggers of ``get_run_logger()`` and of Prefect's flow and task engines."""
HANDLER_LOGGERS = (*RUN_LOGGERS, "prefect.extra", "prefect", "")
"""Loggers whose API and console handlers get the filter too ("" is the root logger)."""


def _clean(value: object) -> object:
    return redact_urls_in_text(value) if isinstance(value, str) else value


def redact_exception(exc: BaseException) -> None:
    """Redact ``exc`` in place: its string arguments (and ``OSError``'s text fields), its causes and groups.

    So ``str(exc)``, which Prefect puts in a state message, and the exception Prefect stores as a failed
    run's result hold no URL credentials. Arguments without any are left as they are (same objects).
    """
    pending: list[BaseException] = [exc]
    seen: set[int] = set()
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        args = tuple(_clean(a) for a in current.args)
        if any(a is not b for a, b in zip(args, current.args, strict=True)):
            current.args = args
        if isinstance(current, OSError):
            for name in ("strerror", "filename", "filename2"):
                value = getattr(current, name, None)
                if isinstance(value, str) and _clean(value) != value:
                    setattr(current, name, _clean(value))
        pending += [e for e in (current.__cause__, current.__context__) if e is not None]
        if isinstance(current, BaseExceptionGroup):
            pending += list(current.exceptions)


def _exceptions_in(record: logging.LogRecord) -> list[BaseException]:
    args = record.args
    values = args.values() if isinstance(args, Mapping) else args or ()
    found = [v for v in values if isinstance(v, BaseException)]
    if record.exc_info and record.exc_info[1] is not None:
        found.append(record.exc_info[1])
    return found


class RedactingFilter(logging.Filter):
    """Rewrite a record's message and traceback text through :func:`alflow.util.redact.redact_urls_in_text`.

    The exceptions the record carries (``exc_info``, arguments) are redacted in place first
    (:func:`redact_exception`). The message is rendered once (``msg % args``) and kept only when redaction
    changed it (then ``args`` is empty); a traceback is rendered into ``exc_text`` only when its text holds
    something to redact, so the handler's own formatting is untouched otherwise. Never drops a record.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Redact ``record`` in place; always True (the record is kept)."""
        for exc in _exceptions_in(record):
            redact_exception(exc)
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: the handler reports it as it would
            return True
        redacted = redact_urls_in_text(message)
        if redacted != message:
            record.msg, record.args = redacted, ()
        if record.exc_text:
            record.exc_text = redact_urls_in_text(record.exc_text)
        elif record.exc_info and record.exc_info[1] is not None:
            text = "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
            clean = redact_urls_in_text(text)
            if clean != text:
                record.exc_text = clean
        return True


def _has_filter(target: logging.Logger | logging.Handler) -> bool:
    return any(isinstance(f, RedactingFilter) for f in target.filters)


def install_log_redaction() -> None:
    """Put :class:`RedactingFilter` on the run loggers and on Prefect's API and console handlers (once each)."""
    from prefect.logging.handlers import APILogHandler, PrefectConsoleHandler

    for name in RUN_LOGGERS:
        logger = logging.getLogger(name)
        if not _has_filter(logger):
            logger.addFilter(RedactingFilter())
    for name in HANDLER_LOGGERS:
        for handler in logging.getLogger(name).handlers:
            if isinstance(handler, APILogHandler | PrefectConsoleHandler) and not _has_filter(handler):
                handler.addFilter(RedactingFilter())
