"""``alflow tiny serve``'s HTTP server: an OpenAI-compatible API over one real CPU engine.

Endpoints: ``GET /health``, ``GET /version``, ``GET /v1/models``, ``POST /v1/completions`` and
``POST /v1/chat/completions`` (SSE streaming with ``stream_options.include_usage``, and
non-streaming), ``POST /tokenize`` and ``POST /detokenize`` (vLLM style), and ``GET /metrics`` in
vLLM's dialect (:mod:`alflow.tiny.metrics`).

**One sequence at a time.** The engine is single-sequence and not thread-safe: requests wait in an
asyncio queue in arrival order, and one worker runs each request's decode loop to its end in a
worker thread (the event loop keeps serving health, metrics and the streams meanwhile).
``/v1/models`` says so (``max_concurrency: 1``) and ``vllm:num_requests_waiting`` counts the queue.

Request fields: ``max_tokens`` (chat also ``max_completion_tokens``; default: the rest of the
context for chat, 16 for completions), ``temperature`` (default 1.0; 0 is greedy), ``top_k`` (0 or
-1: off), ``top_p``, ``seed``, ``stop`` (a string or a list of strings), ``ignore_eos``,
``min_tokens`` (only 0 or equal to ``max_tokens``: the engine cannot suppress EOS for part of a
reply, and ``min_tokens == max_tokens`` is served as ``ignore_eos``), ``n`` (1 only), ``stream``,
``stream_options``; completions take a string or a list of token ids; chat takes ``messages``
rendered with :mod:`alflow.tiny.chat` (``chat_template_kwargs`` is accepted and ignored: the
template has no switches). Unknown fields are ignored, as OpenAI-compatible servers do. Bad input
gets HTTP 400 with an OpenAI-style body ``{"error": {"message", "type", "param", "code"}}`` whose
``param`` names the field.

Usage counts come from the engine: ``prompt_tokens`` is the length of the tokenized prompt,
``completion_tokens`` the number of tokens the engine emitted (the sum of its steps' tokens).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import orjson
from aiohttp import web

from alflow import __version__
from alflow.errors import AlflowError, InvalidInputError
from alflow.openai_api import ApiError
from alflow.openai_api import get_bool as _get_bool
from alflow.openai_api import get_float as _get_float
from alflow.openai_api import get_int as _get_int
from alflow.tiny.chat import ChatTemplateError, chat_stops, render_chat
from alflow.tiny.metrics import TinyMetrics

log = logging.getLogger(__name__)

LISTENING_PREFIX = "alflow-tiny listening on "
ENGINE_HEADER = "x-alflow-engine"
DEFAULT_COMPLETION_MAX_TOKENS = 16
MAX_STOP_STRINGS = 16
_JSON = "application/json"


# ------------------------------------------------------------------------------------ the engine seam


class SpecLike(Protocol):
    """Speculative settings as the engine takes them (:class:`alflow.tiny.engine.SpecSettings`)."""

    @property
    def k(self) -> int:
        """Draft tokens per step, K."""
        ...

    @property
    def ngram_min(self) -> int:
        """Smallest n-gram the drafter looks up."""
        ...

    @property
    def ngram_max(self) -> int:
        """Largest n-gram the drafter looks up."""
        ...

    @property
    def synthetic_rates(self) -> tuple[float, ...] | None:
        """Forced unconditional per-position acceptance rates p_1..p_K (vLLM semantics), or None."""
        ...


class StepLike(Protocol):
    """One decode step (:class:`alflow.tiny.engine.StepEvent`)."""

    @property
    def tokens(self) -> tuple[int, ...]:
        """Tokens the step emitted (accepted drafts plus the target's own token)."""
        ...

    @property
    def text(self) -> str:
        """Text of those tokens."""
        ...

    @property
    def drafted(self) -> int:
        """Draft tokens proposed in this step (0: a plain decode step)."""
        ...

    @property
    def accepted(self) -> int:
        """Drafts accepted in this step."""
        ...

    @property
    def accepted_positions(self) -> tuple[bool, ...]:
        """Per draft position: accepted or not."""
        ...

    @property
    def finish_reason(self) -> str | None:
        """None while the request goes on; ``"stop"`` or ``"length"`` on its last step."""
        ...


class EngineLike(Protocol):
    """What the server needs of an engine (:class:`alflow.tiny.engine.TinyEngine` is one)."""

    model_name: str

    @property
    def eos_token_ids(self) -> frozenset[int]:
        """End-of-sequence token ids."""
        ...

    def tokenize(self, text: str, *, add_bos: bool = True) -> list[int]:
        """Text to token ids."""
        ...

    def detokenize(self, tokens: Sequence[int]) -> str:
        """Token ids to text."""
        ...

    def generate(
        self,
        prompt: Sequence[int],
        *,
        max_tokens: int,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int | None = None,
        spec: Any = None,
        stop: Sequence[str] = (),
        ignore_eos: bool = False,
    ) -> Iterator[StepLike]:
        """Decode ``prompt`` step by step."""
        ...


@dataclass(frozen=True)
class TinyServerSettings:
    """What the server needs besides the engine (the CLI fills it)."""

    served_model_name: str = "tiny"
    n_ctx: int = 2048
    vocab_size: int | None = None
    spec: SpecLike | None = None
    synthetic: dict[str, Any] | None = None
    speculative_config: dict[str, Any] | None = None
    host: str = "127.0.0.1"
    port: int = 0
    """0 binds a free port (tests, notebooks); ``alflow tiny serve`` passes its --port."""
    engine_info: dict[str, Any] = field(default_factory=dict)

    @property
    def k(self) -> int:
        """K, or 0 without speculation."""
        return 0 if self.spec is None else self.spec.k


class TinyStartupError(AlflowError):
    """The tiny server could not start (bind failure, bad settings)."""


# ------------------------------------------------------------------------------------ validation


def _get_stop(body: dict[str, Any]) -> tuple[str, ...]:
    value = body.get("stop")
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise ApiError(400, f"stop must be a string or a list of strings, got {value!r}", "stop")
    if len(value) > MAX_STOP_STRINGS:
        raise ApiError(400, f"stop holds {len(value)} strings; at most {MAX_STOP_STRINGS}", "stop")
    if any(not s for s in value):
        raise ApiError(400, "stop strings must not be empty", "stop")
    return tuple(value)


def _message_text(content: object, index: int) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for part in content:
            if not isinstance(part, dict) or part.get("type", "text") != "text":
                raise ApiError(400, f"messages[{index}].content parts must be text parts", "messages")
            text = part.get("text")
            if not isinstance(text, str):
                raise ApiError(400, f"messages[{index}].content part has no text string", "messages")
            parts.append(text)
        return "".join(parts)
    raise ApiError(400, f"messages[{index}].content must be a string or a list of parts", "messages")


@dataclass(frozen=True)
class Params:
    """A validated generation request."""

    prompt: tuple[int, ...]
    max_tokens: int
    temperature: float
    top_k: int
    top_p: float
    seed: int | None
    stop: tuple[str, ...]
    ignore_eos: bool
    stream: bool
    include_usage: bool


# ------------------------------------------------------------------------------------ jobs


_END = object()


@dataclass
class _Job:
    """One request in the queue: its parameters and the channel its steps come back on."""

    params: Params
    loop: asyncio.AbstractEventLoop
    events: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)
    cancelled: threading.Event = field(default_factory=threading.Event)

    def put(self, item: object) -> None:
        """From the worker thread: hand a step (or an exception, or the end) to the handler."""
        self.loop.call_soon_threadsafe(self.events.put_nowait, item)


# ------------------------------------------------------------------------------------ server


class TinyServer:
    """One engine behind the OpenAI-compatible API; requests run one at a time, in arrival order."""

    def __init__(self, engine: EngineLike, settings: TinyServerSettings) -> None:
        self.engine = engine
        self.settings = settings
        self.model = settings.served_model_name
        self.metrics = TinyMetrics(self.model, settings.k)
        self.created = int(time.time())
        self._boot = os.urandom(4).hex()
        self._counter = 0
        self._queue: asyncio.Queue[_Job] | None = None
        self._worker: asyncio.Task[None] | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="alflow-tiny-engine")
        self.failed: str | None = None

    # -------------------------------------------------------------- app

    def make_app(self) -> web.Application:
        """The aiohttp application with every route."""
        app = web.Application(middlewares=[self._errors], client_max_size=16 * 1024 * 1024)
        app.on_response_prepare.append(self._mark)
        app.on_startup.append(self._on_startup)
        app.on_shutdown.append(self._on_shutdown)
        r = app.router
        r.add_get("/health", self._health)
        r.add_get("/version", self._version)
        r.add_get("/v1/models", self._models)
        r.add_post("/v1/completions", self._completions)
        r.add_post("/v1/chat/completions", self._chat)
        r.add_post("/tokenize", self._tokenize)
        r.add_post("/detokenize", self._detokenize)
        r.add_get("/metrics", self._metrics)
        return app

    async def _on_startup(self, _app: web.Application) -> None:
        self._queue = asyncio.Queue()
        self._worker = asyncio.create_task(self._work(), name="alflow-tiny-worker")

    async def _on_shutdown(self, _app: web.Application) -> None:
        if self._queue is not None:
            while not self._queue.empty():
                self._queue.get_nowait().cancelled.set()
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
        self._executor.shutdown(wait=True, cancel_futures=True)

    @staticmethod
    async def _mark(_request: web.Request, response: web.StreamResponse) -> None:
        response.headers[ENGINE_HEADER] = "tiny"

    @web.middleware
    async def _errors(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        try:
            return await handler(request)
        except ApiError as err:
            return web.json_response(err.payload(), status=err.status)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            return web.json_response(ApiError(exc.status, exc.reason or "error").payload(), status=exc.status)
        except (asyncio.CancelledError, ConnectionResetError):
            raise
        except Exception as exc:
            log.exception("unexpected error in %s %s", request.method, request.path)
            return web.json_response(ApiError(500, f"internal error: {exc}").payload(), status=500)

    # -------------------------------------------------------------- small endpoints

    async def _health(self, _request: web.Request) -> web.Response:
        if self.failed is not None:
            return web.Response(status=503, text=f"engine failed: {self.failed}")
        return web.Response(status=200)

    async def _version(self, _request: web.Request) -> web.Response:
        s = self.settings
        return web.json_response(
            {
                "version": f"alflow-tiny {__version__}",
                "engine": "tiny",
                "simulated": False,
                "model": self.model,
                "k": s.k,
                "ngram": None if s.spec is None else [s.spec.ngram_min, s.spec.ngram_max],
                "speculative_config": s.speculative_config,
                "synthetic_acceptance": s.synthetic,
                **s.engine_info,
            }
        )

    async def _models(self, _request: web.Request) -> web.Response:
        data = {
            "object": "list",
            "data": [
                {
                    "id": self.model,
                    "object": "model",
                    "created": self.created,
                    "owned_by": "alflow-tiny",
                    "root": self.engine.model_name,
                    "parent": None,
                    "max_model_len": self.settings.n_ctx,
                    "max_concurrency": 1,
                    "scheduling": "one sequence at a time; further requests wait in a FIFO queue",
                }
            ],
        }
        return web.json_response(data)

    async def _metrics(self, _request: web.Request) -> web.Response:
        return web.Response(body=self.metrics.text(), content_type="text/plain", charset="utf-8")

    async def _read_json(self, request: web.Request) -> dict[str, Any]:
        raw = await request.read()
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise ApiError(400, f"request body is not valid JSON: {exc}") from None
        if not isinstance(body, dict):
            raise ApiError(400, f"request body must be a JSON object, got {type(body).__name__}")
        return cast(dict[str, Any], body)

    def _check_ids(self, value: object, param: str) -> list[int]:
        if not isinstance(value, list) or not value:
            raise ApiError(400, f"{param} must be a non-empty list of token ids", param)
        limit = self.settings.vocab_size
        for i, tok in enumerate(value):
            if isinstance(tok, bool) or not isinstance(tok, int) or tok < 0:
                raise ApiError(
                    400, f"{param}[{i}] must be a non-negative integer token id, got {tok!r}", param
                )
            if limit is not None and tok >= limit:
                raise ApiError(400, f"{param}[{i}] = {tok} is outside the vocabulary (size {limit})", param)
        return cast(list[int], value)

    async def _tokenize(self, request: web.Request) -> web.Response:
        body = await self._read_json(request)
        if "messages" in body:
            text = self._render(body)
            ids = self.engine.tokenize(text, add_bos=True)
        elif isinstance(body.get("prompt"), str):
            ids = self.engine.tokenize(body["prompt"], add_bos=_get_bool(body, "add_special_tokens", True))
        else:
            raise ApiError(400, "give a string prompt or messages", "prompt")
        return web.json_response({"count": len(ids), "max_model_len": self.settings.n_ctx, "tokens": ids})

    async def _detokenize(self, request: web.Request) -> web.Response:
        body = await self._read_json(request)
        ids = self._check_ids(body.get("tokens"), "tokens")
        return web.json_response({"prompt": self.engine.detokenize(ids)})

    # -------------------------------------------------------------- parsing

    def _render(self, body: dict[str, Any]) -> str:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ApiError(400, "messages must be a non-empty list", "messages")
        pairs: list[tuple[str, str]] = []
        for i, msg in enumerate(messages):
            if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
                raise ApiError(400, f"messages[{i}] must be an object with a string role", "messages")
            pairs.append((msg["role"], _message_text(msg.get("content"), i)))
        try:
            return render_chat(pairs, add_generation_prompt=_get_bool(body, "add_generation_prompt", True))
        except ChatTemplateError as exc:
            raise ApiError(400, str(exc), "messages") from None

    def parse(self, body: dict[str, Any], *, chat: bool) -> Params:
        """Validate a completions or chat body; :class:`ApiError` (400) names the bad field."""
        model = body.get("model")
        if model is not None:
            if not isinstance(model, str):
                raise ApiError(400, f"model must be a string, got {model!r}", "model")
            if model not in (self.model, self.engine.model_name):
                raise ApiError(
                    404, f"The model `{model}` does not exist; this server serves {self.model!r}.", "model"
                )
        if chat:
            prompt = self.engine.tokenize(self._render(body), add_bos=True)
            where = "messages"
        else:
            raw = body.get("prompt")
            if isinstance(raw, list) and len(raw) == 1 and isinstance(raw[0], str | list):
                raw = raw[0]  # a batch of one
            if isinstance(raw, str):
                if not raw:
                    raise ApiError(400, "prompt must not be empty", "prompt")
                prompt = self.engine.tokenize(raw, add_bos=True)
            elif isinstance(raw, list):
                prompt = self._check_ids(raw, "prompt")
            else:
                raise ApiError(400, "prompt must be a string or a non-empty list of token ids", "prompt")
            where = "prompt"
        if _get_int(body, "n", low=1, default=1) != 1:
            raise ApiError(400, "the tiny engine serves n=1 only", "n")
        n_ctx, k = self.settings.n_ctx, self.settings.k
        if len(prompt) + k >= n_ctx:
            raise ApiError(
                400,
                f"This model's maximum context length is {n_ctx} tokens. However, your prompt has "
                f"{len(prompt)} tokens (plus K={k} draft positions). Please reduce the length of the input.",
                where,
            )
        max_tokens = _get_int(body, "max_tokens", low=1, default=None)
        if chat and max_tokens is None:
            max_tokens = _get_int(body, "max_completion_tokens", low=1, default=None)
        if max_tokens is None:
            max_tokens = n_ctx - len(prompt) - k if chat else DEFAULT_COMPLETION_MAX_TOKENS
        if len(prompt) + max_tokens + k > n_ctx:
            raise ApiError(
                400,
                f"This model's maximum context length is {n_ctx} tokens. However, you requested "
                f"{len(prompt) + max_tokens} tokens ({len(prompt)} in the input, max_tokens={max_tokens} in the "
                f"completion) and K={k} draft positions. Please reduce the length of the input or completion.",
                "max_tokens",
            )
        ignore_eos = _get_bool(body, "ignore_eos", False)
        min_tokens = cast(int, _get_int(body, "min_tokens", low=0, default=0))
        if min_tokens:
            if min_tokens != max_tokens:
                raise ApiError(
                    400,
                    f"min_tokens={min_tokens}: the tiny engine supports only min_tokens 0 or equal to "
                    f"max_tokens={max_tokens} (served as ignore_eos)",
                    "min_tokens",
                )
            ignore_eos = True
        temperature = _get_float(body, "temperature", 1.0, 0.0, 100.0)
        top_p = _get_float(body, "top_p", 1.0, 0.0, 1.0)
        if top_p <= 0.0:
            raise ApiError(400, f"top_p must be in (0, 1], got {top_p}", "top_p")
        top_k = cast(int, _get_int(body, "top_k", low=-1, default=0))
        seed = _get_int(body, "seed", low=0, default=None)
        stream = _get_bool(body, "stream", False)
        include_usage = False
        options = body.get("stream_options")
        if options is not None:
            if not stream:
                raise ApiError(400, "stream_options can only be set when stream is true", "stream_options")
            if not isinstance(options, dict):
                raise ApiError(400, "stream_options must be an object", "stream_options")
            include_usage = _get_bool(options, "include_usage", False)
        kwargs = body.get("chat_template_kwargs")
        if kwargs is not None and not isinstance(kwargs, dict):
            raise ApiError(400, "chat_template_kwargs must be an object", "chat_template_kwargs")
        stop = _get_stop(body)
        if chat:
            stop = chat_stops(stop)
        return Params(
            prompt=tuple(prompt),
            max_tokens=max_tokens,
            temperature=temperature,
            top_k=max(0, top_k),
            top_p=top_p,
            seed=seed,
            stop=stop,
            ignore_eos=ignore_eos,
            stream=stream,
            include_usage=include_usage,
        )

    # -------------------------------------------------------------- the worker

    async def _work(self) -> None:
        """Take queued requests one at a time and run each to its end in the engine thread."""
        assert self._queue is not None
        loop = asyncio.get_running_loop()
        while True:
            job = await self._queue.get()
            self.metrics.waiting.set(self._queue.qsize())
            if job.cancelled.is_set():
                job.put(_END)
                continue
            self.metrics.running.set(1)
            try:
                await loop.run_in_executor(self._executor, self._run, job)
            finally:
                self.metrics.running.set(0)

    def _run(self, job: _Job) -> None:
        """In the engine thread: decode one request, counting and handing over every step."""
        p = job.params
        reason = "abort"
        try:
            self.metrics.prompt_tokens.inc(len(p.prompt))
            steps = self.engine.generate(
                p.prompt,
                max_tokens=p.max_tokens,
                temperature=p.temperature,
                top_k=p.top_k,
                top_p=p.top_p,
                seed=p.seed,
                spec=self.settings.spec,
                stop=p.stop,
                ignore_eos=p.ignore_eos,
            )
            try:
                for step in steps:
                    self.metrics.count_step(
                        len(step.tokens), step.drafted, step.accepted, step.accepted_positions
                    )
                    job.put(step)
                    if step.finish_reason is not None:
                        reason = step.finish_reason
                        break
                    if job.cancelled.is_set():
                        break
            finally:
                close = getattr(steps, "close", None)
                if close is not None:
                    close()
        except Exception as exc:  # handed to the request's handler, which answers with it
            log.exception("the engine failed on a request")
            job.put(exc)
        finally:
            self.metrics.request_success[reason if reason in ("stop", "length") else "abort"].inc()
            job.put(_END)

    async def submit(self, params: Params) -> _Job:
        """Queue a request; its steps arrive on the job's ``events`` queue, then the end marker."""
        if self._queue is None:
            raise ApiError(503, "the server is not running")
        job = _Job(params=params, loop=asyncio.get_running_loop())
        self._queue.put_nowait(job)
        self.metrics.waiting.set(self._queue.qsize())
        return job

    # -------------------------------------------------------------- generation

    def _rid(self, chat: bool) -> str:
        self._counter += 1
        return f"{'chatcmpl' if chat else 'cmpl'}-{self._boot}{self._counter:06d}"

    @staticmethod
    def _usage(prompt: int, completion: int) -> dict[str, int]:
        return {"prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion}

    async def _generate(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        body = await self._read_json(request)
        params = self.parse(body, chat=chat)
        rid = self._rid(chat)
        job = await self.submit(params)
        try:
            # the engine checks its arguments before the first step: refuse before any header is sent
            first = await job.events.get()
            if isinstance(first, InvalidInputError):
                raise ApiError(400, f"the engine refused the request: {first}")
            if isinstance(first, BaseException):
                raise ApiError(500, f"the engine failed: {first}")
            if params.stream:
                return await self._stream(request, job, first, rid, chat)
            return await self._collect(job, first, rid, chat)
        finally:
            job.cancelled.set()

    async def _steps(self, job: _Job, first: object) -> AsyncIterator[StepLike]:
        """The job's steps as they come (``first`` already taken); raises the engine's error."""
        item = first
        while True:
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            yield cast(StepLike, item)
            item = await job.events.get()

    def _head(self, rid: str, chat: bool, *, chunk: bool) -> dict[str, Any]:
        kind = ("chat.completion.chunk" if chunk else "chat.completion") if chat else "text_completion"
        return {"id": rid, "object": kind, "created": self.created, "model": self.model}

    async def _collect(self, job: _Job, first: object, rid: str, chat: bool) -> web.Response:
        texts: list[str] = []
        emitted = 0
        reason = "length"
        try:
            async for step in self._steps(job, first):
                texts.append(step.text)
                emitted += len(step.tokens)
                if step.finish_reason is not None:
                    reason = step.finish_reason
        except Exception as exc:
            raise ApiError(500, f"the engine failed: {exc}") from exc
        text = "".join(texts)
        if chat:
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": text, "tool_calls": []},
            }
        else:
            choice = {"index": 0, "text": text}
        choice.update(logprobs=None, finish_reason=reason, stop_reason=None)
        out = {
            **self._head(rid, chat, chunk=False),
            "choices": [choice],
            "usage": self._usage(len(job.params.prompt), emitted),
        }
        return web.json_response(out, dumps=lambda o: orjson.dumps(o).decode())

    async def _stream(
        self, request: web.Request, job: _Job, first: object, rid: str, chat: bool
    ) -> web.StreamResponse:
        resp = web.StreamResponse(
            status=200, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        if request.version >= (1, 1):
            resp.enable_chunked_encoding()
        await resp.prepare(request)
        head = self._head(rid, chat, chunk=True)

        def event(choice: dict[str, Any]) -> bytes:
            return b"data: " + orjson.dumps({**head, "choices": [choice]}) + b"\n\n"

        def choice(text: str, reason: str | None, *, role: bool = False) -> dict[str, Any]:
            if chat:
                delta: dict[str, Any] = {"role": "assistant", "content": text} if role else {"content": text}
                return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}
            return {"index": 0, "text": text, "logprobs": None, "finish_reason": reason, "stop_reason": None}

        if chat:
            await resp.write(event(choice("", None, role=True)))
        emitted = 0
        try:
            async for step in self._steps(job, first):
                emitted += len(step.tokens)
                if step.text or step.finish_reason is not None:
                    await resp.write(event(choice(step.text, step.finish_reason)))
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as exc:
            err = ApiError(500, f"the engine failed: {exc}")
            await resp.write(b"data: " + orjson.dumps(err.payload()) + b"\n\n" + b"data: [DONE]\n\n")
            return resp
        if job.params.include_usage:
            usage = {**head, "choices": [], "usage": self._usage(len(job.params.prompt), emitted)}
            await resp.write(b"data: " + orjson.dumps(usage) + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=True)

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=False)


# ------------------------------------------------------------------------------------ running


async def serve(
    server: TinyServer,
    *,
    stop: asyncio.Event,
    on_ready: Callable[[str, int], None] | None = None,
) -> None:
    """Run ``server`` until ``stop`` is set; call ``on_ready(host, port)`` once bound."""
    host, port = server.settings.host, server.settings.port
    runner = web.AppRunner(server.make_app(), handler_cancellation=True, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        try:
            await site.start()
        except OSError as exc:
            raise TinyStartupError(f"cannot listen on {host}:{port}: {exc}") from None
        for addr in runner.addresses:
            if isinstance(addr, tuple) and len(addr) >= 2:
                port = int(addr[1])
                break
        s = server.settings
        log.info(
            "serving %s (tiny CPU engine, %s) on %s:%d, one sequence at a time",
            server.model,
            "no speculation"
            if s.spec is None
            else f"n-gram K={s.k}" + (", SYNTHETIC acceptance" if s.synthetic else ""),
            host,
            port,
        )
        if on_ready is not None:
            on_ready(host, port)
        await stop.wait()
    finally:
        await runner.cleanup()


def listening_line(host: str, port: int) -> str:
    """The one line the server prints on stdout once bound (``alflow-tiny listening on URL``)."""
    shown = f"[{host}]" if ":" in host else host
    return f"{LISTENING_PREFIX}http://{shown}:{port}"
