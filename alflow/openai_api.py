"""What alflow's own OpenAI-compatible servers (the sim and the tiny engine) share: errors and field checks.

:class:`ApiError` is an error answered as an OpenAI-style JSON body with an HTTP status; the
``get_*`` helpers read one optional field of a request body and raise a 400 that names it.
"""

from __future__ import annotations

import hmac
import math
from collections.abc import Mapping

import orjson

ERROR_TYPES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    404: "NotFoundError",
    405: "MethodNotAllowed",
    503: "ServiceUnavailableError",
}
"""OpenAI error ``type`` per HTTP status (anything else: InternalServerError)."""


class ApiError(Exception):
    """An error answered as an OpenAI-style JSON body with an HTTP status."""

    def __init__(
        self, status: int, message: str, param: str | None = None, err_type: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.err_type = err_type or ERROR_TYPES.get(status, "InternalServerError")

    def payload(self) -> dict[str, object]:
        """The ``{"error": ...}`` object."""
        return {
            "error": {
                "message": self.message,
                "type": self.err_type,
                "param": self.param,
                "code": self.status,
            }
        }

    def body(self) -> bytes:
        """The JSON error body."""
        return orjson.dumps(self.payload())


API_KEY_GUARDED_PREFIX = "/v1"
"""Paths a server started with an API key guards, as vLLM's ``--api-key`` does (health, metrics, version,
tokenize and detokenize stay open)."""


def check_api_key(path: str, authorization: str | None, api_key: str | None) -> None:
    """Raise a 401 :class:`ApiError` when ``path`` is guarded and ``authorization`` is not ``Bearer <api_key>``.

    No key configured: every request passes. The comparison takes constant time.
    """
    if not api_key or not path.startswith(API_KEY_GUARDED_PREFIX):
        return
    expected = f"Bearer {api_key}".encode()
    if not hmac.compare_digest((authorization or "").encode(), expected):
        raise ApiError(401, "Unauthorized")


def get_int(body: Mapping[str, object], name: str, *, low: int, default: int | None) -> int | None:
    """``body[name]`` as an integer >= ``low`` (``default`` when absent or null)."""
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError(400, f"{name} must be an integer, got {value!r}", name)
    if value < low:
        raise ApiError(400, f"{name} must be at least {low}, got {value}", name)
    return value


def get_bool(body: Mapping[str, object], name: str, default: bool) -> bool:
    """``body[name]`` as a boolean (``default`` when absent or null)."""
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ApiError(400, f"{name} must be a boolean, got {value!r}", name)
    return value


def get_float(body: Mapping[str, object], name: str, default: float, low: float, high: float) -> float:
    """``body[name]`` as a finite number in ``[low, high]`` (``default`` when absent or null)."""
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ApiError(400, f"{name} must be a number, got {value!r}", name)
    if not low <= value <= high:
        raise ApiError(400, f"{name} must be in [{low}, {high}], got {value}", name)
    return float(value)
