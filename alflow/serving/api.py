"""OpenAI-style errors and the API key check of alflow's own servers (the sim and the tiny engine).

:class:`ApiError` is an error answered as an OpenAI-style JSON body ``{"error": {"message", "type",
"param", "code"}}`` with an HTTP status; :func:`check_api_key` guards ``/v1/*`` as vLLM's ``--api-key``
does.
"""

from __future__ import annotations

import hmac

import orjson

ERROR_TYPES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    404: "NotFoundError",
    405: "MethodNotAllowed",
    503: "ServiceUnavailableError",
}
"""OpenAI error ``type`` per HTTP status (anything else: InternalServerError)."""
FINISH_REASONS = ("stop", "length", "abort")
"""The ``finished_reason`` label values of the request-success counters (vLLM, TensorRT-LLM)."""


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


def usage(prompt: int, completion: int) -> dict[str, int]:
    """The OpenAI ``usage`` object."""
    return {"prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion}
