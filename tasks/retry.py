"""When a task may retry: transient failures only (network, timeouts, HTTP 5xx), never bad input.

Every task with ``retries`` passes :func:`retry_transient` as its ``retry_condition_fn``: a config,
recipe or input error (``InvalidInputError``, a pydantic ``ValidationError``), a server that refused
its launch, or malformed metrics gives the same answer on every try, so retrying only delays the
one-line error by the retry delays.
"""

from __future__ import annotations

import subprocess
import urllib.error
from typing import Any

import aiohttp
import requests
from prefect.client.schemas.objects import State
from pydantic import ValidationError

from alflow.errors import InvalidInputError
from alflow.metrics.prometheus import MalformedMetricsError
from alflow.reference.table import ReferenceNotFoundError, ReferenceTableError
from alflow_infra.errors import ServerRefusedError, ServerStartError
from alflow_tasks.redaction import redact_exception

PERMANENT: tuple[type[BaseException], ...] = (
    InvalidInputError,  # also RecipeError, FrameworkInstallError, SyntheticAcceptanceError
    ValidationError,
    ServerRefusedError,
    MalformedMetricsError,
    ReferenceTableError,
    ReferenceNotFoundError,
)
"""Failures that a second try cannot change."""

TRANSIENT: tuple[type[BaseException], ...] = (
    TimeoutError,
    ConnectionError,
    aiohttp.ClientConnectionError,
    aiohttp.ClientPayloadError,
    urllib.error.URLError,
    requests.ConnectionError,  # the Docker SDK's transport
    requests.Timeout,
    subprocess.TimeoutExpired,
    ServerStartError,  # a start that timed out or whose process was killed (a refusal is PERMANENT)
)
"""Failures that may pass on a second try."""


def is_transient(exc: BaseException) -> bool:
    """True when ``exc`` (or what caused it) is a network failure, a timeout or an HTTP 5xx answer.

    The chain of causes is followed from the outside in; the first permanent or transient error
    decides. An HTTP status (``status`` attribute, as on aiohttp's and alflow's scrape errors) is
    transient when it is 5xx, 408 or 429. Anything else is not retried.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, PERMANENT):
            return False
        status = getattr(current, "status", None)
        if isinstance(status, int) and not isinstance(status, bool):
            return status >= 500 or status in (408, 429)
        if isinstance(current, TRANSIENT):
            return True
        current = current.__cause__ or current.__context__
    return False


def retry_transient(task: Any, task_run: Any, state: State[Any]) -> bool:
    """Prefect ``retry_condition_fn``: retry only when the failure is transient (:func:`is_transient`).

    The exception is redacted in place first (:func:`alflow_tasks.redaction.redact_exception`): when the retry is
    declined, Prefect makes the task's failed state from it next, without logging it first.
    """
    del task, task_run
    data: Any = state.data
    exc: object = data if isinstance(data, BaseException) else state.result(raise_on_failure=False)
    if isinstance(exc, BaseException):
        redact_exception(exc)
    return isinstance(exc, BaseException) and is_transient(exc)
