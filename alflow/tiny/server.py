"""``alflow tiny serve``'s HTTP server: an OpenAI-compatible API over one real CPU engine.

Endpoints: ``GET /health``, ``GET /version``, ``GET /v1/models``, ``POST /v1/completions`` and
``POST /v1/chat/completions`` (SSE streaming with ``stream_options.include_usage``, and
non-streaming), ``POST /tokenize`` and ``POST /detokenize`` (vLLM style), and ``GET /metrics`` in
vLLM's dialect (:mod:`alflow.tiny.metrics`).

**One sequence at a time.** The engine is single-sequence and not thread-safe: requests wait in an
asyncio queue in arrival order, and one worker runs each request's decode loop to its end in a
worker thread (the event loop keeps serving health, metrics and the streams meanwhile).
``/v1/models`` says so (``max_concurrency: 1``) and ``vllm:num_requests_waiting`` counts the queue.

Validation (a bad field: a 400 naming it; unknown fields ignored) is the serving kit's (:mod:`alflow.serving`).
Request fields: ``max_tokens`` (chat also ``max_completion_tokens``; default: the rest of the context for chat, 16
for completions), ``temperature`` (default 1.0; 0 is greedy), ``top_k`` (0 or -1: off), ``top_p``, ``seed``,
``stop`` (a string or a list of strings), ``ignore_eos``, ``min_tokens`` (only 0 or equal to ``max_tokens``: the
engine cannot suppress EOS for part of a reply, and ``min_tokens == max_tokens`` is served as ``ignore_eos``),
``n`` (1 only), ``stream``, ``stream_options``; completions take a string or a list of token ids; chat takes
``messages`` rendered with :mod:`alflow.tiny.chat` (``chat_template_kwargs`` is accepted and ignored: the
template has no switches).

Usage counts come from the engine: ``prompt_tokens`` is the length of the tokenized prompt,
``completion_tokens`` the number of tokens the engine emitted (the sum of its steps' tokens).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import orjson
from aiohttp import web

from alflow import __version__
from alflow.errors import AlflowError, InvalidInputError
from alflow.serving.api import ApiError, usage
from alflow.serving.app import Handler, OnReady, OpenAIServer, open_stream, run_app
from alflow.serving.requests import ChatRequest, CompletionRequest, TokenizeRequest, output_budget
from alflow.tiny.chat import ChatTemplateError, chat_stops, render_chat
from alflow.tiny.metrics import TinyMetrics

if TYPE_CHECKING:  # the engine needs the optional extra; the server runs over any engine with its methods
    from alflow.tiny.engine import SpecSettings, StepEvent, TinyEngine

log = logging.getLogger(__name__)

LISTENING_PREFIX = "alflow-tiny listening on "
ENGINE_HEADER = "x-alflow-engine"
MAX_STOP_STRINGS = 16


@dataclass(frozen=True)
class TinyServiceSettings:
    """What the server needs besides the engine (the CLI fills it)."""

    served_model_name: str = "tiny"
    n_ctx: int = 2048
    vocab_size: int | None = None
    spec: SpecSettings | None = None
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


def _stops(body: CompletionRequest | ChatRequest) -> tuple[str, ...]:
    stops = body.stops()
    if len(stops) > MAX_STOP_STRINGS:
        raise ApiError(400, f"stop holds {len(stops)} strings; at most {MAX_STOP_STRINGS}", "stop")
    if any(not s for s in stops):
        raise ApiError(400, "stop strings must not be empty", "stop")
    return stops


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


class TinyService:
    """One engine behind the OpenAI-compatible API; requests run one at a time, in arrival order.

    The engine side of the serving kit (:class:`alflow.serving.app.ServingEngine`).
    """

    header = (ENGINE_HEADER, "tiny")

    def __init__(self, engine: TinyEngine, settings: TinyServiceSettings) -> None:
        self.engine = engine
        self.settings = settings
        self.model = settings.served_model_name
        self.counters = TinyMetrics(self.model, settings.k)
        self.api = OpenAIServer(self)
        self.served_names = (self.model, engine.model_name)
        self.metrics_path = "/metrics"
        self.max_model_len = settings.n_ctx
        self.api_key: str | None = None
        self._queue: asyncio.Queue[_Job] | None = None
        self._worker: asyncio.Task[None] | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="alflow-tiny-engine")
        self.failed: str | None = None

    # -------------------------------------------------------------- the kit's engine interface

    def routes(self) -> Sequence[tuple[str, str, Handler]]:
        """No routes of its own: the kit's are vLLM's."""
        return ()

    async def startup(self) -> None:
        """Start the worker that runs queued requests one at a time."""
        self._queue = asyncio.Queue()
        self._worker = asyncio.create_task(self._work(), name="alflow-tiny-worker")

    async def shutdown(self) -> None:
        """Cancel what waits, stop the worker and the engine thread."""
        if self._queue is not None:
            while not self._queue.empty():
                self._queue.get_nowait().cancelled.set()
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
        self._executor.shutdown(wait=True, cancel_futures=True)

    def unhealthy(self) -> str | None:
        """The engine's failure, if it failed."""
        return None if self.failed is None else f"engine failed: {self.failed}"

    def version(self) -> dict[str, Any]:
        """``GET /version``: the engine, K, the n-gram window and the synthetic setting."""
        s = self.settings
        return {
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

    def model_card(self) -> dict[str, Any]:
        """The tiny engine's fields of its ``/v1/models`` entry: one sequence at a time."""
        return {
            "owned_by": "alflow-tiny",
            "root": self.engine.model_name,
            "max_concurrency": 1,
            "scheduling": "one sequence at a time; further requests wait in a FIFO queue",
        }

    def metrics(self) -> bytes:
        """vLLM-dialect Prometheus text."""
        return self.counters.text()

    def _check_ids(self, ids: list[int], param: str) -> list[int]:
        limit = self.settings.vocab_size
        for i, tok in enumerate(ids):
            if limit is not None and tok >= limit:
                raise ApiError(400, f"{param}[{i}] = {tok} is outside the vocabulary (size {limit})", param)
        return ids

    def tokenize(self, body: TokenizeRequest) -> list[int]:
        """The chat template applied to messages (with BOS), or the prompt (BOS unless ``add_special_tokens`` false)."""
        if body.messages is not None:
            text = self._render(body.pairs(), body.add_generation_prompt is not False)
            return self.engine.tokenize(text, add_bos=True)
        return self.engine.tokenize(body.prompt or "", add_bos=body.add_special_tokens is not False)

    def detokenize(self, ids: list[int]) -> str:
        """Text of token ids (an id outside the vocabulary: a 400 naming it)."""
        return self.engine.detokenize(self._check_ids(ids, "tokens"))

    # -------------------------------------------------------------- parsing

    @staticmethod
    def _render(pairs: list[tuple[str, str]], add_generation_prompt: bool) -> str:
        try:
            return render_chat(pairs, add_generation_prompt=add_generation_prompt)
        except ChatTemplateError as exc:
            raise ApiError(400, str(exc), "messages") from None

    def parse(self, body: CompletionRequest | ChatRequest) -> Params:
        """The tiny engine's limits on a validated request; :class:`ApiError` (400) names the bad field."""
        chat = isinstance(body, ChatRequest)
        if isinstance(body, ChatRequest):
            prompt = self.engine.tokenize(
                self._render(body.pairs(), body.add_generation_prompt is not False), add_bos=True
            )
        else:
            raw = body.single_prompt()
            prompt = (
                self.engine.tokenize(raw, add_bos=True)
                if isinstance(raw, str)
                else self._check_ids(raw, "prompt")
            )
        if (body.n or 1) != 1:
            raise ApiError(400, "n: the tiny engine serves n=1 only", "n")
        max_tokens = output_budget(body, len(prompt), self.settings.n_ctx, self.settings.k)
        ignore_eos = bool(body.ignore_eos)
        min_tokens = body.min_tokens or 0
        if min_tokens:
            if min_tokens != max_tokens:
                raise ApiError(
                    400,
                    f"min_tokens={min_tokens}: the tiny engine supports only min_tokens 0 or equal to "
                    f"max_tokens={max_tokens} (served as ignore_eos)",
                    "min_tokens",
                )
            ignore_eos = True
        if body.seed is not None and body.seed < 0:
            raise ApiError(400, f"seed: must be >= 0 for the tiny engine, got {body.seed}", "seed")
        stop = _stops(body)
        return Params(
            prompt=tuple(prompt),
            max_tokens=max_tokens,
            temperature=1.0 if body.temperature is None else body.temperature,
            top_k=max(0, body.top_k or 0),
            top_p=1.0 if body.top_p is None else body.top_p,
            seed=body.seed,
            stop=chat_stops(stop) if chat else stop,
            ignore_eos=ignore_eos,
            stream=bool(body.stream),
            include_usage=body.include_usage,
        )

    # -------------------------------------------------------------- the worker

    async def _work(self) -> None:
        """Take queued requests one at a time and run each to its end in the engine thread."""
        assert self._queue is not None
        loop = asyncio.get_running_loop()
        while True:
            job = await self._queue.get()
            self.counters.waiting.set(self._queue.qsize())
            if job.cancelled.is_set():
                job.put(_END)
                continue
            self.counters.running.set(1)
            try:
                await loop.run_in_executor(self._executor, self._run, job)
            finally:
                self.counters.running.set(0)

    def _run(self, job: _Job) -> None:
        """In the engine thread: decode one request, counting and handing over every step."""
        p = job.params
        reason = "abort"
        try:
            self.counters.prompt_tokens.inc(len(p.prompt))
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
                    self.counters.count_step(
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
            self.counters.request_success[reason if reason in ("stop", "length") else "abort"].inc()
            job.put(_END)

    async def submit(self, params: Params) -> _Job:
        """Queue a request; its steps arrive on the job's ``events`` queue, then the end marker."""
        if self._queue is None:
            raise ApiError(503, "the server is not running")
        job = _Job(params=params, loop=asyncio.get_running_loop())
        self._queue.put_nowait(job)
        self.counters.waiting.set(self._queue.qsize())
        return job

    # -------------------------------------------------------------- generation

    async def generate(
        self, request: web.Request, body: CompletionRequest | ChatRequest
    ) -> web.StreamResponse:
        """Queue the request; stream its steps as they come (or answer once it ends)."""
        chat = isinstance(body, ChatRequest)
        params = self.parse(body)
        rid = self.api.request_id(chat)
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

    async def _steps(self, job: _Job, first: object) -> AsyncIterator[StepEvent]:
        """The job's steps as they come (``first`` already taken); raises the engine's error."""
        item = first
        while True:
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            yield cast("StepEvent", item)
            item = await job.events.get()

    def _head(self, rid: str, chat: bool, *, chunk: bool) -> dict[str, Any]:
        kind = ("chat.completion.chunk" if chunk else "chat.completion") if chat else "text_completion"
        return {"id": rid, "object": kind, "created": self.api.created, "model": self.model}

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
            "usage": usage(len(job.params.prompt), emitted),
        }
        return web.json_response(out, dumps=lambda o: orjson.dumps(o).decode())

    async def _stream(
        self, request: web.Request, job: _Job, first: object, rid: str, chat: bool
    ) -> web.StreamResponse:
        resp = await open_stream(request)
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
            tail = {**head, "choices": [], "usage": usage(len(job.params.prompt), emitted)}
            await resp.write(b"data: " + orjson.dumps(tail) + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


# ------------------------------------------------------------------------------------ running


async def serve(server: TinyService, stop: asyncio.Event, on_ready: OnReady | None = None) -> None:
    """Run ``server`` until ``stop`` is set; call ``on_ready(host, port)`` once bound."""
    s = server.settings

    def describe(port: int) -> str:
        what = (
            "no speculation"
            if s.spec is None
            else f"n-gram K={s.k}" + (", SYNTHETIC acceptance" if s.synthetic else "")
        )
        return f"serving {server.model} (tiny CPU engine, {what}) on {s.host}:{port}, one sequence at a time"

    await run_app(
        server.api.make_app(),
        s.host,
        s.port,
        stop=stop,
        on_ready=on_ready,
        error=TinyStartupError,
        describe=describe,
    )
