"""The streaming HTTP client: incremental SSE parsing on bytes, orjson, two transports.

:class:`SseConsumer` parses the event stream of one request incrementally and fills its
:class:`RequestRecord`; a transport hands it every network read with one clock reading.

Transports (the :class:`Transport` seam; tests drive :func:`stream_request` with a scripted one):

- :class:`alflow.loadgen.fast.FastTransport` (the default for load): HTTP/1.1 on plain ``asyncio`` protocols
  with a keep-alive connection pool, dating each read with the kernel's receive stamp on Linux. Each network read is parsed by ``httptools`` (llhttp, the parser of
  Node.js and uvicorn: status line, headers, Content-Length and chunked framing) inside the
  protocol's ``data_received`` callback, so a streamed chunk costs no task switch; the waiting
  coroutine wakes once, when the response ends. A response llhttp rejects fails the request with
  :class:`MalformedResponseError`.
- :class:`AiohttpTransport`: one shared ``aiohttp.ClientSession`` (``iter_any`` per read); slower
  per chunk, kept for proxies and anything the fast transport does not speak.

Per-request speculative counts (steps, accepted and proposed drafts, the acceptance histogram) come from
SGLang's ``sglext.spec_tokens_details`` (its own chunk with ``"choices": []``, sent when the request asks with
``return_spec_tokens_details``) and vLLM's ``metrics.speculative_decoding`` (the event that carries ``usage``)
(:func:`spec_tokens_details_counts`, :func:`speculative_decoding_counts`), never from content chunks;
:func:`fill_spec_counts` puts them into a record, from that event or from a non-streamed body. Each object is
checked for consistency first and dropped (the record's counts stay None) when it does not hold together: a
server's bad numbers never fail a request or stop a stream.

Every SSE event that carries output gets its own entry in ``chunk_ns`` (the arrival time of the
network read that brought it): events that arrive together share a timestamp, as in
``vllm bench serve``, so ``len(chunk_ns)`` counts server chunks (engine steps), not TCP reads.

A request fails (its record gets ``error``) on: an HTTP status other than 200, an error event in
a 200 stream, a stream that ends without ``[DONE]``, a stream with no output (usage only), a lost
connection or a timeout. An unreachable server, a wrong endpoint (404/405) or a server that does
not stream raise :class:`FatalRequestError`: the run cannot produce anything useful and is aborted.

Both transports send the same extra headers on every request (``Authorization: Bearer <key>`` for a
server started with ``--api-key``, see :func:`auth_headers`); URLs in error texts carry no
credentials (:func:`alflow.util.redact.redact_url`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple, Protocol

import aiohttp
import orjson

from alflow.errors import AlflowError, InvalidInputError
from alflow.loadgen.endpoints import Endpoint
from alflow.loadgen.records import RequestRecord
from alflow.util.redact import redact_url, redact_urls_in_text

# SGLang's per-request speculative details on the OpenAI endpoints (sgl-project/sglang PR #33518, merged
# 2026-08-04; python/sglang/srt/entrypoints/openai/serving_chat.py and utils.py): only when the request sets
# ``return_spec_tokens_details: true``; streamed as a chunk of its own with ``"choices": []`` and a response-level
# ``sglext`` (after the finish_reason chunks, before the usage chunk), not streamed as the body's top-level
# ``sglext``. ``meta_info`` is not sent on these endpoints (``return_meta_info`` is refused with ``stream``).
SGLANG_SPEC_DETAILS_FLAG: Final = "return_spec_tokens_details"
SGLANG_SGLEXT: Final = "sglext"
SGLANG_SPEC_DETAILS: Final = "spec_tokens_details"
SGLANG_SPEC_DETAILS_SINCE: Final = "sgl-project/sglang PR #33518 (merged 2026-08-04)"
SGLANG_DETAILS_VERIFY_CT: Final = "spec_verify_ct"  # verify steps of the request
SGLANG_DETAILS_CORRECT: Final = "spec_num_correct_drafts"  # accepted draft tokens (bonus not counted)
SGLANG_DETAILS_PROPOSED: Final = "spec_num_proposed_drafts"  # drafts proposed (verify steps x block size)
SGLANG_DETAILS_HISTOGRAM: Final = (
    "spec_correct_drafts_histogram"  # index i = steps that accepted i drafts, K+1 long
)
# ``spec_accept_length`` in the same object is completion_tokens / spec_verify_ct: it counts the prefill token
# (biased high) and is never read.

Clock = Callable[[], int]
Sink = Callable[[bytes, int], bool]
FATAL_STATUS: Final = frozenset({401, 403, 404, 405})
SSE_TYPE: Final = "text/event-stream"
_ERROR_BODY_LIMIT: Final = 2000
_JSON_HEADERS: Final = {"Content-Type": "application/json", "Accept": SSE_TYPE}


class FatalRequestError(AlflowError):
    """The server cannot serve this run at all (unreachable, wrong endpoint, not streaming)."""


def auth_headers(api_key: str | None) -> dict[str, str]:
    """``{"Authorization": "Bearer <api_key>"}`` (empty without a key), as vLLM's and SGLang's ``--api-key`` expect.

    Raises :class:`InvalidInputError` (without echoing the key) for a key that could not be one header line.
    """
    if not api_key:
        return {}
    if not (api_key.isascii() and api_key.isprintable()) or api_key != api_key.strip():
        raise InvalidInputError(
            "--api-key must be printable ASCII without surrounding spaces (it is sent as an HTTP header); "
            "the given key is not"
        )
    return {"Authorization": f"Bearer {api_key}"}


def _status_hint(status: int) -> str:
    if status in (401, 403):
        return " (the server wants an API key: give --api-key or set OPENAI_API_KEY, and check it)"
    return " (wrong --base-url, --endpoint or --model?)"


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


class RequestSpec(NamedTuple):
    """One request's speculative counts from vLLM's ``metrics.speculative_decoding`` (all None: not usable)."""

    steps: int | None
    accepted_drafts: int | None
    draft_tokens: int | None
    histogram: list[int] | None
    full_k_histogram: list[int] | None = None
    """The histogram over the steps that carried all K drafts (from ``detailed``'s per-step arrays)."""


NO_REQUEST_SPEC: Final = RequestSpec(None, None, None, None)


def _nonneg_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def speculative_decoding_counts(body: Mapping[str, object]) -> RequestSpec:
    """VLLM's per-request speculative counts from a response body or the stream's usage event.

    Reads ``metrics.speculative_decoding``, vLLM 0.32.0's ``RequestSpecDecodeMetrics.to_dict``
    (``vllm/v1/metrics/stats.py``), sent when the server runs with ``--per-request-spec-decode-metrics
    summary|detailed`` (``vllm/config/observability.py``): streamed on the final usage chunk (``"choices":[]``)
    when ``stream_options.include_usage`` is set and ``n == 1`` (``vllm/entrypoints/openai/completion/serving.py``,
    ``chat_completion/serving.py``), else at the top level of the body. The counts used are ``num_spec_steps``,
    ``num_accepted_draft_tokens``, ``num_draft_tokens`` and the dense ``acceptance_histogram`` (index j = steps
    that accepted exactly j drafts, length ``num_spec_tokens + 1``); the scheduler observes one entry per verify
    step that carried drafts (``vllm/v1/core/sched/scheduler.py``), the same entries as its counters.

    The server's word is checked before it is used: every count a non-negative integer (bools are not),
    ``sum(hist) == num_spec_steps``, ``sum(j * hist[j]) == num_accepted_draft_tokens``, accepted <= proposed
    drafts, ``len(hist) == num_spec_tokens + 1`` when ``num_spec_tokens`` is sent, and ``detailed``'s
    ``per_step_accepted`` / ``per_step_drafted`` (when not null) one integer per step summing to the accepted and
    proposed drafts. An object that fails any of these is not used (all None); nothing here raises.
    """
    metrics = body.get("metrics")
    spec = metrics.get("speculative_decoding") if isinstance(metrics, dict) else None
    if not isinstance(spec, dict):
        return NO_REQUEST_SPEC
    steps = _nonneg_int(spec.get("num_spec_steps"))
    accepted = _nonneg_int(spec.get("num_accepted_draft_tokens"))
    drafts = _nonneg_int(spec.get("num_draft_tokens"))
    hist = _int_list(spec.get("acceptance_histogram"))
    if steps is None or accepted is None or drafts is None or not hist:
        return NO_REQUEST_SPEC
    if not _consistent(steps, accepted, drafts, hist):
        return NO_REQUEST_SPEC
    k = spec.get("num_spec_tokens")
    if k is not None and _nonneg_int(k) != len(hist) - 1:
        return NO_REQUEST_SPEC
    per_step_accepted = spec.get("per_step_accepted")
    per_step_drafted = spec.get("per_step_drafted")
    if per_step_accepted is not None or per_step_drafted is not None:
        got_accepted = _int_list(per_step_accepted)
        got_drafted = _int_list(per_step_drafted)
        if (
            got_accepted is None
            or got_drafted is None
            or len(got_accepted) != steps
            or len(got_drafted) != steps
            or sum(got_accepted) != accepted
            or sum(got_drafted) != drafts
        ):
            return NO_REQUEST_SPEC
        return RequestSpec(
            steps, accepted, drafts, hist, full_k_histogram(got_accepted, got_drafted, len(hist) - 1)
        )
    return RequestSpec(steps, accepted, drafts, hist)


def full_k_histogram(accepted: Sequence[int], drafted: Sequence[int], k: int) -> list[int] | None:
    """The steps that carried all ``k`` drafts, by drafts accepted (index j: exactly j).

    None if a step accepted more than it drafted (not a count to trust).
    """
    hist = [0] * (k + 1)
    for a, d in zip(accepted, drafted, strict=True):
        if a > d:
            return None
        if d == k:
            hist[a] += 1
    return hist


def _int_list(value: object) -> list[int] | None:
    """``value`` when it is a list of non-negative integers (possibly empty), else None."""
    if not isinstance(value, list):
        return None
    for item in value:
        if type(item) is not int or item < 0:  # bool is a subclass of int: not a count
            return None
    return value


def _consistent(steps: int, accepted: int, drafts: int, hist: list[int]) -> bool:
    """A histogram (index j = steps that accepted j drafts) that agrees with the counts it comes with."""
    return sum(hist) == steps and sum(j * c for j, c in enumerate(hist)) == accepted and accepted <= drafts


def spec_tokens_details_counts(body: Mapping[str, object]) -> RequestSpec:
    """SGLang's per-request speculative counts from ``sglext.spec_tokens_details`` (all None: not usable).

    SGLang (PR #33518, merged 2026-08-04; ``python/sglang/srt/entrypoints/openai/serving_chat.py``,
    ``serving_completions.py``, ``utils.py`` ``spec_tokens_details_from_meta_info``) sends the object when the
    request sets ``return_spec_tokens_details: true``: streamed in a chunk of its own (``"choices": []``,
    response-level ``sglext``) after the finish_reason chunks and before the usage chunk; not streamed, as the
    body's top-level ``sglext``. With ``n > 1`` it is a list (alflow sends ``n = 1``: a list is not used).

    Used: ``spec_verify_ct`` (steps), ``spec_num_correct_drafts`` (accepted drafts), ``spec_num_proposed_drafts``
    and ``spec_correct_drafts_histogram`` (index j = steps that accepted j drafts, K + 1 buckets). SGLang fills a
    missing count with 0 and a missing histogram with ``[]``: an empty histogram gives the counts without one.
    ``spec_accept_length`` (completion tokens / verify steps: counts the prefill token, biased high) is never
    read. The same checks as vLLM's: non-negative integers, the histogram summing to the steps and to the
    accepted drafts, accepted <= proposed; an object that fails any of them is not used.
    """
    ext = body.get(SGLANG_SGLEXT)
    details = ext.get(SGLANG_SPEC_DETAILS) if isinstance(ext, dict) else None
    if not isinstance(details, dict):
        return NO_REQUEST_SPEC
    steps = _nonneg_int(details.get(SGLANG_DETAILS_VERIFY_CT))
    accepted = _nonneg_int(details.get(SGLANG_DETAILS_CORRECT))
    drafts = _nonneg_int(details.get(SGLANG_DETAILS_PROPOSED))
    hist = _int_list(details.get(SGLANG_DETAILS_HISTOGRAM, []))
    if steps is None or accepted is None or drafts is None or hist is None or accepted > drafts:
        return NO_REQUEST_SPEC
    if hist and not _consistent(steps, accepted, drafts, hist):
        return NO_REQUEST_SPEC
    return RequestSpec(steps, accepted, drafts, hist or None)


def fill_spec_counts(record: RequestRecord, body: Mapping[str, object]) -> None:
    """Set ``record``'s per-request speculative counts from a non-streamed body or a stream's usage event.

    SGLang's ``sglext.spec_tokens_details`` (:func:`spec_tokens_details_counts`) and vLLM's
    ``metrics.speculative_decoding`` (:func:`speculative_decoding_counts`) fill ``spec_verify_ct``,
    ``spec_accepted_drafts``, ``spec_draft_tokens`` and ``spec_accept_hist`` (SGLang's histogram may be absent).
    A body with neither, or with an object that does not hold together, leaves the record's counts as they were
    (None for a fresh record).
    """
    if SGLANG_SGLEXT in body:
        got = spec_tokens_details_counts(body)
    elif "metrics" in body:
        got = speculative_decoding_counts(body)
    else:
        return
    if got.steps is not None:
        record.spec_verify_ct, record.spec_accepted_drafts = got.steps, got.accepted_drafts
        record.spec_draft_tokens, record.spec_accept_hist = got.draft_tokens, got.histogram
        record.spec_full_k_hist = got.full_k_histogram


MAX_TOKENS_PER_CHUNK: Final = 64
"""The most output tokens one streamed output chunk (SSE event with output) is believed to carry.

One engine step emits at most K + 1 tokens (K drafts accepted plus the bonus token; K <= ``K_MAX`` = 16 here, so
17), and a server may put several steps into one event (vLLM's stream interval, a detokenizer that holds back
an incomplete character): 64 leaves that room and still catches a count no stream of that many chunks could
hold (100,000 tokens in 8 chunks)."""
_USAGE_SHOWN: Final = 40
_INT64_MAX: Final = 2**63 - 1


def _usage_count(value: object) -> bool:
    """True when ``value`` is a usable usage count: a non-negative integer (a bool is not one) that fits Int64."""
    return type(value) is int and 0 <= value <= _INT64_MAX


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _USAGE_SHOWN else text[: _USAGE_SHOWN - 3] + "..."


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
        if value is not None and not _usage_count(value):
            why = "is too large" if type(value) is int and value > 0 else "is not a non-negative integer"
            problems.append(f"{name}={_shown(value)} {why}")
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


class SseConsumer:
    """Incremental parser of one response's event stream into a :class:`RequestRecord`."""

    __slots__ = ("_buf", "_event", "_keep_text", "_output", "done", "pieces", "record")

    def __init__(self, record: RequestRecord, endpoint: Endpoint, keep_text: bool) -> None:
        self.record = record
        self._output = endpoint.output
        self._keep_text = keep_text
        self._buf = b""
        self._event = b""
        self.pieces: list[str] = []
        self.done = False

    def feed(self, received: bytes, now: int) -> bool:
        """Parse one network read that arrived at ``now``; True when the stream must stop (error).

        Called once per read with every event in it, so written for speed (a quarter less time per event
        than the plain loop, measured: blank lines skipped without a slice, ``{...}`` payloads parsed as
        they come, since JSON allows the space after ``data:``).
        """
        data = self._buf + received if self._buf else received
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
                if line.startswith(b"event:"):
                    self._event = line[6:].strip()
                continue
            payload = line[5:]
            if payload[-1:] != b"}":  # not a bare JSON object: [DONE], a CR line end, padding, or garbage
                payload = payload.strip()
                if payload == b"[DONE]":
                    self.done = True
                    continue
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
                if text and self._keep_text:
                    self.pieces.append(text)
            usage = event.get("usage")
            if isinstance(usage, dict) and usage:  # another shape is no usage (the count checks then say so)
                record.input_tokens = usage.get("prompt_tokens")
                record.output_tokens = usage.get("completion_tokens")
                if "metrics" in event:  # vLLM: only the usage event is looked at
                    fill_spec_counts(record, event)
            elif SGLANG_SGLEXT in event and not event.get("choices"):  # SGLang: its own chunk, choices []
                fill_spec_counts(record, event)
        self._buf = data[start:]
        return False

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
) -> RequestRecord:
    """Send one streaming request and fill ``record`` with timestamps, usage, text and error.

    Raises :class:`FatalRequestError` when the server cannot serve the run (see module doc).
    """
    consumer = SseConsumer(record, endpoint, keep_text)
    record.start_ns = clock()
    try:
        info = await transport.stream(url, body, timeout_s, consumer.feed, clock)
        record.http_status = info.status
        record.stamp_source = info.stamp_source
        if info.status != 200:
            msg = f"POST {redact_url(url)} answered HTTP {info.status}: {info.body[:300].strip()}"
            if info.status in FATAL_STATUS:
                raise FatalRequestError(msg + _status_hint(info.status))
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
                info = ResponseInfo(resp.status, resp.content_type)
                if resp.status != 200 or resp.content_type != SSE_TYPE:
                    text = (await resp.content.read(_ERROR_BODY_LIMIT)).decode(errors="replace")
                    return ResponseInfo(resp.status, resp.content_type, text)
                async for received in resp.content.iter_any():
                    if sink(received, clock()):
                        break
                return info
        except aiohttp.ClientConnectorError as exc:
            why = redact_urls_in_text(str(exc.os_error or exc))
            raise FatalRequestError(f"cannot reach {redact_url(url)}: {why}") from None
