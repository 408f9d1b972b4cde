"""The streaming HTTP client: incremental SSE parsing on bytes, orjson, two transports.

:class:`SseConsumer` parses the event stream of one request incrementally and fills its
:class:`RequestRecord`; a transport hands it every network read with one clock reading.

Transports (the :class:`Transport` seam; tests drive :func:`stream_request` with a scripted one):

- :class:`alflow.loadgen.fast.FastTransport` (the default for load): HTTP/1.1 on plain ``asyncio`` protocols with
  a keep-alive pool, each read parsed by ``httptools`` in the read callback (no task switch per chunk) and dated
  by the kernel's receive stamp on Linux; its module says how.
- :class:`AiohttpTransport`: one shared ``aiohttp.ClientSession`` (``iter_any`` per read); slower
  per chunk, kept for proxies and anything the fast transport does not speak.

Per-request speculative counts (steps, accepted and proposed drafts, the acceptance histogram) are read by the
readers the client is handed (:mod:`alflow.loadgen.counts`; each framework's in its plugin), from the events that
carry no output choices, never from content chunks.

Every SSE event that carries output gets its own entry in ``chunk_ns`` (the arrival time of the
network read that brought it): events that arrive together share a timestamp, as in
``vllm bench serve``, so ``len(chunk_ns)`` counts server chunks (engine steps), not TCP reads.

A request fails (its record gets ``error``) on: an HTTP status other than 200, an error event in
a 200 stream, a stream that ends without ``[DONE]``, a stream with no output (usage only), a lost
connection or a timeout; and on a stream that brings more than one request may hold (then it is closed): more
output chunks than the request's ``max_tokens`` plus :data:`STREAM_SLACK_CHUNKS`, more events (with output or
without: empty deltas, role or usage chunks, comments) than :data:`EVENTS_PER_CHUNK` per output chunk it may take plus
:data:`EVENT_SLACK`, more than :data:`MAX_ANSWER_CHARS` characters of answer, or a line longer than
:data:`MAX_LINE_BYTES` (a line is searched for its end only in the bytes each read adds: linear time). An unreachable server, a wrong endpoint
(404/405) or a server that does not stream raise :class:`FatalRequestError`: the run cannot produce anything useful and is aborted.

Both transports send the same extra headers on every request (``Authorization: Bearer <key>`` for a
server started with ``--api-key``, see :func:`auth_headers`); URLs in error texts carry no
credentials (:func:`alflow.util.redact.redact_url`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

import aiohttp
import orjson

from alflow.errors import AlflowError, InvalidInputError
from alflow.loadgen.counts import CountsReader, fill_spec_counts
from alflow.loadgen.endpoints import Endpoint
from alflow.loadgen.records import RequestRecord
from alflow.util.redact import redact_url, redact_urls_in_text

Clock = Callable[[], int]
Sink = Callable[[bytes, int], bool]
FATAL_STATUS: Final = frozenset({401, 403, 404, 405})
SSE_TYPE: Final = "text/event-stream"
_ERROR_BODY_LIMIT: Final = 2000
_JSON_HEADERS: Final = {"Content-Type": "application/json", "Accept": SSE_TYPE}


class FatalRequestError(AlflowError):
    """The server cannot serve this run at all (unreachable, wrong endpoint, not streaming)."""


MAX_API_KEY: Final = 4096
"""The longest API key sent (OpenAI's keys are under 200 characters; a JWT rarely past 2,000)."""


def auth_headers(api_key: str | None) -> dict[str, str]:
    """``{"Authorization": "Bearer <api_key>"}`` (empty without a key), as vLLM's and SGLang's ``--api-key`` expect.

    Raises :class:`InvalidInputError` (without echoing the key) for a key that could not be one header line.
    """
    if not api_key:
        return {}
    # servers refuse header lines this long (aiohttp: 8,190 bytes), with an odd answer
    if len(api_key) > MAX_API_KEY:
        raise InvalidInputError(
            f"--api-key is {len(api_key):,} characters long: at most {MAX_API_KEY:,} (it is sent as one HTTP header)"
        )
    if not (api_key.isascii() and api_key.isprintable()) or api_key != api_key.strip():
        raise InvalidInputError(
            "--api-key must be printable ASCII without surrounding spaces (it is sent as an HTTP header); "
            "the given key is not"
        )
    return {"Authorization": f"Bearer {api_key}"}


@dataclass(frozen=True, slots=True)
class ResponseInfo:
    """Status and content type of a response; ``body`` holds the start of a non-stream body."""

    status: int
    content_type: str
    body: str = ""
    stamp_source: str = "clock"
    """Where the read times came from: ``kernel`` (every read of the body carried a kernel receive stamp,
    :mod:`alflow.loadgen.rxstamp`) or ``clock`` (the process's clock when it read)."""


class Transport(Protocol):
    """Sends one POST; feeds an event-stream body to ``sink`` as it arrives."""

    async def stream(
        self, url: str, body: bytes, timeout_s: float | None, sink: Sink, clock: Clock
    ) -> ResponseInfo:
        """POST ``body`` and feed a 200 event-stream answer to ``sink`` read by read.

        ``sink(data, clock())`` is called per network read until the body ends or ``sink`` returns
        True; any other answer's body start goes to ``ResponseInfo.body``. Raises ``TimeoutError``,
        ``OSError`` (connection lost) or :class:`FatalRequestError` (cannot connect).
        """
        ...


# --------------------------------------------------------------------------------------------
# SSE parsing


def _error_text(event: Any) -> str:
    err = event.get("error", event) if isinstance(event, dict) else event
    if isinstance(err, dict):
        msg = err.get("message") or err.get("msg") or orjson.dumps(err).decode()
        code = err.get("code") or err.get("type")
        return f"error event in stream: {msg}" + (f" (code {code})" if code else "")
    return f"error event in stream: {err}"


MAX_TOKENS_PER_CHUNK: Final = 64
"""The most output tokens one streamed output chunk (SSE event with output) is believed to carry.

One engine step emits at most K + 1 tokens (K drafts accepted plus the bonus token; K <= ``K_MAX`` = 16 here, so
17), and a server may put several steps into one event (vLLM's stream interval, a detokenizer that holds back
an incomplete character): 64 leaves that room and still catches a count no stream of that many chunks could
hold (100,000 tokens in 8 chunks)."""
STREAM_SLACK_CHUNKS: Final = 16
"""Output chunks a stream may carry beyond its request's ``max_tokens``: every output chunk carries at least one token,
so ``max_tokens`` chunks are all a server may send, but a framework may add a few of its own (a final chunk with a
finish reason and a character the detokenizer held back, a reasoning chunk): 16 leaves them room."""
MAX_ANSWER_CHARS: Final = 16 * 2**20
"""Characters of answer text one request may bring (16 Mi: 64 MiB of memory at most, 16 MiB for ASCII). A GSM8K
answer is a few hundred characters, and even 128 Ki tokens of 16 characters each are 2 Mi; an endless stream of
valid chunks once held 2.4 GB of one answer until ``--timeout`` (issue #49)."""
MAX_LINE_BYTES: Final = 16 * 2**20
"""Bytes one stream line (one ``data:`` event) may have before its line end: a server that never ends a line would
otherwise grow the parser's buffer until the timeout. The largest real event (a chunk with top logprobs of a long
prompt) is well under 1 MiB."""
EVENTS_PER_CHUNK: Final = 4
"""Stream events (with output or without) one request may bring per output chunk it may take. Real frameworks send a
handful of events without output per request (a role chunk, a final empty delta with the finish reason, a usage
chunk, a counts event); vLLM with continuous usage stats sends usage on every chunk, but those chunks carry output.
An endless 200 stream of empty deltas, role-only or usage-only events once ran until ``--timeout`` (issue #49)."""
EVENT_SLACK: Final = 64
"""Stream events a request may bring beyond ``EVENTS_PER_CHUNK`` per output chunk (room for a short answer's
events without output)."""
UNCAPPED_CHUNKS: Final = 2**20
"""Output chunks the event bound assumes for a request sent without a ``max_tokens`` (1 Mi: more tokens than any
model's context)."""
_USAGE_SHOWN: Final = 40
_INT64_MAX: Final = 2**63 - 1


def check_usage(record: RequestRecord) -> str | None:
    """What is wrong with the server's usage counts against the streamed chunks, one line; None when they hold.

    ``prompt_tokens`` and ``completion_tokens`` (when sent) must be non-negative integers (a bool is not one) that
    fit the records' Int64 columns; with output chunks streamed, ``completion_tokens`` must be at least 1 and at
    most :data:`MAX_TOKENS_PER_CHUNK` per chunk. The request's ``max_tokens`` is not checked: the record does not
    carry it. A count that is not a non-negative integer, or one beyond the bound, is cleared from the record
    (None) so that no bad number reaches a metric or the records' columns; :meth:`SseConsumer.finish` makes the
    answer the request's error (a failed request: out of every latency and throughput figure).
    """
    problems: list[str] = []
    for name, attr in (("prompt_tokens", "input_tokens"), ("completion_tokens", "output_tokens")):
        value = getattr(record, attr)
        if value is not None and not (type(value) is int and 0 <= value <= _INT64_MAX):  # a bool is not one
            why = "is too large" if type(value) is int and value > 0 else "is not a non-negative integer"
            shown = text if len(text := repr(value)) <= _USAGE_SHOWN else text[: _USAGE_SHOWN - 3] + "..."
            problems.append(f"{name}={shown} {why}")
            setattr(record, attr, None)
    out, chunks = record.output_tokens, len(record.chunk_ns)
    if out is not None and chunks:
        if out == 0:
            problems.append(f"completion_tokens=0 for {chunks} streamed output chunks (at least 1 expected)")
        elif out > MAX_TOKENS_PER_CHUNK * chunks:
            problems.append(
                f"completion_tokens={out} for {chunks} streamed chunks is impossible "
                f"(at most {MAX_TOKENS_PER_CHUNK} tokens per chunk)"
            )
            record.output_tokens = None
    return "usage: " + "; ".join(problems) if problems else None


def output_cap(body: Mapping[str, Any]) -> int | None:
    """The output cap a request body asks for (``max_tokens``, ``max_completion_tokens``), or None.

    The larger of the two that is a positive integer (``max_completion_tokens`` is the newer OpenAI name; a body
    alflow builds sends ``max_tokens``, ``--extra-body`` may not set either): a server may honour either. A server
    that streams more output than that is sending something else (:class:`SseConsumer` stops it).
    """
    caps = [
        value
        for value in (body.get("max_tokens"), body.get("max_completion_tokens"))
        if type(value) is int and value > 0
    ]
    return max(caps) if caps else None


class SseConsumer:
    """Incremental parser of one response's event stream into a :class:`RequestRecord`."""

    __slots__ = (
        "_chars",
        "_counts",
        "_event",
        "_held",
        "_held_bytes",
        "_keep_text",
        "_max_chunks",
        "_max_events",
        "_max_tokens",
        "_output",
        "_quiet_events",
        "done",
        "pieces",
        "record",
    )

    def __init__(
        self,
        record: RequestRecord,
        endpoint: Endpoint,
        keep_text: bool,
        counts: Sequence[CountsReader] = (),
        max_tokens: int | None = None,
    ) -> None:
        self.record = record
        self._counts = tuple(counts)
        self._output = endpoint.output
        self._keep_text = keep_text
        self._max_tokens = max_tokens
        self._max_chunks = None if max_tokens is None else max(max_tokens, 1) + STREAM_SLACK_CHUNKS
        self._max_events = (self._max_chunks or UNCAPPED_CHUNKS) * EVENTS_PER_CHUNK + EVENT_SLACK
        self._quiet_events = 0
        self._chars = 0
        self._held: list[bytes] = []
        self._held_bytes = 0
        self._event = b""
        self.pieces: list[str] = []
        self.done = False

    def _take(self, text: str | None) -> bool:
        """Keep one more output chunk's ``text``; True (the request's error set) when it is more than the request may get.

        More than ``max_tokens +`` :data:`STREAM_SLACK_CHUNKS` output chunks (each carries at least one token), or
        more than :data:`MAX_ANSWER_CHARS` characters of answer: the stream is stopped and nothing more is held.
        """
        if self._max_chunks is not None and len(self.record.chunk_ns) > self._max_chunks:
            self.record.error = (
                f"the server sent more than {self._max_chunks:,} output chunks (each at least one token) for "
                f"max_tokens={self._max_tokens:,} (at most max_tokens + {STREAM_SLACK_CHUNKS} are taken); "
                "the stream was stopped"
            )
        elif text:
            self._chars += len(text)
            if self._chars > MAX_ANSWER_CHARS:
                self.record.error = (
                    f"the server sent more than {MAX_ANSWER_CHARS:,} characters of answer text "
                    "(the most one request may bring); the stream was stopped"
                )
            elif self._keep_text:
                self.pieces.append(text)
        if self.record.error is None:
            return False
        self._held = []
        self._held_bytes = 0
        return True

    def feed(self, received: bytes, now: int) -> bool:
        """Parse one network read that arrived at ``now``; True when the stream must stop (error).

        Called once per read with every event in it, so written for speed (a quarter less time per event
        than the plain loop, measured: blank lines skipped without a slice, ``{...}`` payloads parsed as
        they come, since JSON allows the space after ``data:``).
        """
        # anything after [DONE] is no part of the answer (it was once counted as output); a read with no line end
        # is held whole (True: the held line grew past its bound)
        if self.done or not (data := self._join(received) if self._held else received):
            return self.record.error is not None
        start = 0
        find = data.find
        record = self.record
        chunk_ns = record.chunk_ns
        output = self._output
        while True:
            nl = find(b"\n", start)
            if nl < 0:
                break
            if nl == start:  # the blank line that ends an event
                start += 1
                continue
            line = data[start:nl]
            start = nl + 1
            if not line.startswith(b"data:"):
                if self._other_line(
                    line
                ):  # endless comments or event: lines: bounded as events without output
                    return True
                continue
            payload = line[5:]
            if payload[-1:] != b"}":  # not a bare JSON object: [DONE], a CR line end, padding, or garbage
                payload = payload.strip()
                if payload == b"[DONE]":
                    self.done = True
                    self._held = []
                    self._held_bytes = 0
                    return False
            try:
                event = orjson.loads(payload)
            except orjson.JSONDecodeError as exc:
                record.error = f"malformed stream event: {exc}"
                return True
            if self._event == b"error" or not isinstance(event, dict) or "error" in event:
                record.error = _error_text(event)
                return True
            text, has_output = output(event)
            if has_output:
                chunk_ns.append(now)
                if self._take(text):  # an endless stream: fail this request, hold no more of it
                    return True
            elif self._quiet(event):  # an endless stream of events without output: the same
                return True
            usage = event.get("usage")
            if isinstance(usage, dict) and usage:  # another shape is no usage (the count checks then say so)
                record.input_tokens = usage.get("prompt_tokens")
                record.output_tokens = usage.get("completion_tokens")
        return self._hold(data[start:]) if start < len(data) else False

    def _other_line(self, line: bytes) -> bool:
        """Take a line other than ``data:`` (an ``event:`` line names the next event's type); True past the event bound."""
        if line.startswith(b"event:"):
            self._event = line[6:].strip()
        return self._quiet(None)

    def _quiet(self, event: dict[str, Any] | None) -> bool:
        """Count one event without output, read the speculative counts it may carry; True (the error set) past the bound.

        A request may bring :data:`EVENTS_PER_CHUNK` events per output chunk it may take, plus :data:`EVENT_SLACK`
        (:data:`UNCAPPED_CHUNKS` output chunks assumed without a ``max_tokens``); a line other than ``data:`` (an
        ``event:`` line, a comment) counts as one too (``event`` None). Output chunks are bounded in :meth:`_take`; without this, an endless 200 stream of empty deltas, role-only or
        usage-only events ran until ``--timeout`` (issue #49).
        """
        if (
            event is not None and self._counts and not event.get("choices")
        ):  # counts come on events with no choices
            fill_spec_counts(self.record, event, self._counts)
        self._quiet_events += 1
        if self._quiet_events + len(self.record.chunk_ns) <= self._max_events:
            return False
        cap = "no max_tokens" if self._max_tokens is None else f"max_tokens={self._max_tokens:,}"
        self.record.error = (
            f"the server sent more than {self._max_events:,} stream events for {cap}, {self._quiet_events:,} of "
            f"them without output (at most {EVENTS_PER_CHUNK} per output chunk the request may take, plus "
            f"{EVENT_SLACK}); the stream was stopped"
        )
        return True

    def _join(self, received: bytes) -> bytes:
        """The held start of a line joined with ``received`` once ``received`` brings a line end; else b"" (held).

        Only the new bytes are searched for the line end (issue #49: the whole buffer was copied and searched again
        at every read, quadratic in a line dripped in small reads).
        """
        if received.find(b"\n") < 0:
            self._hold(received)
            return b""
        self._held.append(received)
        data = b"".join(self._held)
        self._held = []
        self._held_bytes = 0
        return data

    def _hold(self, rest: bytes) -> bool:
        """Hold ``rest`` (more of a line not yet ended) for the next read; True (the error set) past :data:`MAX_LINE_BYTES`.

        The pieces of the line are kept as they came and joined once, when its end arrives; :meth:`feed` searches only
        each new read for it: a line dripped in small reads costs time linear in its length, not quadratic (issue #49).
        """
        self._held_bytes += len(rest)
        if self._held_bytes <= MAX_LINE_BYTES:
            self._held.append(rest)
            return False
        self.record.error = (
            f"the server sent a stream line of more than {MAX_LINE_BYTES:,} bytes without a line end; "
            "the stream was stopped"
        )
        self._held = []
        self._held_bytes = 0
        return True

    def finish(self) -> None:
        """Judge the ended stream (no ``[DONE]``, no output, impossible usage) and set the derived record fields."""
        rec = self.record
        usage_error = check_usage(rec)
        if rec.error is None and rec.http_status == 200:
            if not self.done:
                rec.error = "stream ended without [DONE]"
            elif not rec.chunk_ns:
                rec.error = "stream carried no output tokens (usage only)"
            elif usage_error is not None:
                rec.error = usage_error
        if rec.chunk_ns:
            rec.first_token_ns = rec.chunk_ns[0]
            rec.end_ns = rec.chunk_ns[-1]
        if self._keep_text:
            rec.text = "".join(self.pieces)


async def stream_request(
    transport: Transport,
    url: str,
    body: bytes,
    endpoint: Endpoint,
    record: RequestRecord,
    *,
    clock: Clock = time.perf_counter_ns,
    timeout_s: float | None = None,
    keep_text: bool = True,
    counts: Sequence[CountsReader] = (),
    secrets: Sequence[str] = (),
    max_tokens: int | None = None,
) -> RequestRecord:
    """Send one streaming request and fill ``record`` with timestamps, usage, text and error.

    ``counts``: the readers of per-request speculative counts (the run's dialect's). ``secrets``: values no error
    text may hold (the API key: a server's error answer may quote it; R13-4). ``max_tokens``: the request's output
    cap; a stream of more than ``max_tokens +`` :data:`STREAM_SLACK_CHUNKS` output chunks, of more than
    :data:`MAX_ANSWER_CHARS` characters of answer or of a line longer than :data:`MAX_LINE_BYTES` fails the request
    and is closed (what one request holds stays bounded). Raises :class:`FatalRequestError` when the server cannot
    serve the run (see module doc).
    """
    consumer = SseConsumer(record, endpoint, keep_text, counts, max_tokens)
    record.start_ns = clock()
    try:
        info = await transport.stream(url, body, timeout_s, consumer.feed, clock)
        record.http_status = info.status
        record.stamp_source = info.stamp_source
        if info.status != 200:
            answer = redact_urls_in_text(info.body, secrets)[
                :300
            ].strip()  # redacted whole, then cut: no half secret
            msg = f"POST {redact_url(url)} answered HTTP {info.status}: {answer}"
            if info.status in FATAL_STATUS:
                raise FatalRequestError(
                    msg + " (the server wants an API key: give --api-key or set OPENAI_API_KEY, and check it)"
                    if info.status in (401, 403)
                    else msg + " (wrong --base-url, --endpoint or --model?)"
                )
            record.error = msg
        elif info.content_type != SSE_TYPE:
            raise FatalRequestError(
                f"POST {redact_url(url)} answered {info.content_type or 'no content type'}, not a text/event-stream: "
                "the server does not stream"
            )
    except FatalRequestError as exc:
        record.error = str(exc)
        raise
    except TimeoutError:
        record.error = f"timed out after {timeout_s} s"
    except (OSError, aiohttp.ClientError) as exc:
        record.error = f"{type(exc).__name__}: {redact_urls_in_text(str(exc))}"
    except asyncio.CancelledError:
        record.error = record.error or "cancelled"  # a stall watcher names why it cancelled
        raise
    finally:
        record.done_ns = clock()
        consumer.finish()
        if (
            record.error
        ):  # stored as printed: a server's error body may quote a URL's password (R12-1) or the key
            record.error = redact_urls_in_text(record.error, secrets)
    return record


# --------------------------------------------------------------------------------------------
# aiohttp transport


class AiohttpTransport:
    """Streams through one shared ``aiohttp.ClientSession`` (one ``iter_any`` await per read).

    ``headers`` (e.g. :func:`auth_headers`) go with every request.
    """

    def __init__(self, session: aiohttp.ClientSession, headers: Mapping[str, str] | None = None) -> None:
        self._session = session
        self._headers = {**_JSON_HEADERS, **(headers or {})}

    @staticmethod
    def new_session(limit: int = 0) -> aiohttp.ClientSession:
        """A client session suited to many long streams (no connection cap unless ``limit``)."""
        connector = aiohttp.TCPConnector(limit=limit, limit_per_host=0, ttl_dns_cache=300)
        return aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=30),
            auto_decompress=False,
            read_bufsize=2**18,
        )

    async def stream(
        self, url: str, body: bytes, timeout_s: float | None, sink: Sink, clock: Clock
    ) -> ResponseInfo:
        """POST with a total timeout of ``timeout_s`` seconds; feed the event stream to ``sink``."""
        timeout = aiohttp.ClientTimeout(total=timeout_s or None)
        try:
            async with self._session.post(url, data=body, headers=self._headers, timeout=timeout) as resp:
                if resp.status != 200 or resp.content_type != SSE_TYPE:
                    text = (await resp.content.read(_ERROR_BODY_LIMIT)).decode(errors="replace")
                    return ResponseInfo(resp.status, resp.content_type, text)
                async for received in resp.content.iter_any():
                    if sink(received, clock()):
                        break
                return ResponseInfo(resp.status, resp.content_type)
        except aiohttp.ClientConnectorError as exc:
            why = redact_urls_in_text(str(exc.os_error or exc))
            raise FatalRequestError(f"cannot reach {redact_url(url)}: {why}") from None
