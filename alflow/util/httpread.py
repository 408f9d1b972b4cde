"""Bounded reads of HTTP answers: every answer alflow reads whole goes through :func:`read_bounded`.

A server that answered ``/detokenize``, ``/v1/models``, ``/version`` or a metrics page with an endless fast body was
read into memory until the total timeout: ``bench`` reached 24 GB and ended in a ``MemoryError`` traceback (round 15).
An answer larger than its bound is :class:`AnswerTooLargeError`: one line naming the URL (without credentials) and
the bound. API answers (JSON) may be :data:`MAX_API_BYTES`; a Prometheus metrics page :data:`MAX_METRICS_BYTES` (a
large server's page is a few MB).
"""

from __future__ import annotations

from typing import Any, Final

import aiohttp

from alflow.errors import AlflowError

MAX_API_BYTES: Final = 8 << 20
"""The largest API answer read (8 MiB): ``/v1/models``, ``/detokenize``, ``/version``, ``/server_info``."""
MAX_METRICS_BYTES: Final = 64 << 20
"""The largest metrics page or Prometheus API answer read (64 MiB): a multi-rank server's page is a few MB."""
_PART: Final = 64 << 10


class AnswerTooLargeError(AlflowError):
    """An HTTP answer longer than the bound its reader allows; the message names the URL and the bound."""


async def read_bounded(resp: aiohttp.ClientResponse, limit: int, what: str) -> bytes:
    """The body of ``resp``, read in parts; past ``limit`` bytes :class:`AnswerTooLargeError` naming ``what``.

    ``what`` names the request as the user may see it (``GET <url without credentials>``). A declared
    ``Content-Length`` over the bound is refused before a byte is read; the parts read are never more than the bound.
    """
    declared = resp.content_length
    if declared is not None and declared > limit:
        raise AnswerTooLargeError(too_large(what, limit))
    parts: list[bytes] = []
    total = 0
    async for part in resp.content.iter_chunked(_PART):
        total += len(part)
        if total > limit:
            raise AnswerTooLargeError(too_large(what, limit))
        parts.append(part)
    return b"".join(parts)


def too_large(what: str, limit: int) -> str:
    """The one line for an answer past its bound."""
    return f"{what}: the answer is larger than the {limit:,} bytes alflow reads of it"


async def read_text_bounded(resp: aiohttp.ClientResponse, limit: int, what: str) -> str:
    """:func:`read_bounded`, decoded as the answer's charset says (UTF-8 otherwise), bad bytes replaced."""
    raw = await read_bounded(resp, limit, what)
    try:
        return raw.decode(resp.charset or "utf-8", errors="replace")
    except LookupError:  # a charset Python does not know
        return raw.decode("utf-8", errors="replace")


def bound_requests_answers(session: Any, limit: int, what: str) -> None:
    """Bound every answer a ``requests`` session reads whole (Prometheus API queries) by ``limit`` bytes.

    A response hook runs before ``requests`` reads the body (``stream=False``): it reads the raw body in parts and
    raises :class:`AnswerTooLargeError` (``what``: the server, without credentials) past the bound.
    """

    def hook(response: Any, *_args: Any, **_kwargs: Any) -> Any:
        parts: list[bytes] = []
        total = 0
        for part in response.raw.stream(_PART, decode_content=True):
            total += len(part)
            if total > limit:
                response.close()
                raise AnswerTooLargeError(too_large(what, limit))
            parts.append(part)
        response._content = b"".join(parts)
        response._content_consumed = True
        return response

    session.hooks["response"].append(hook)
