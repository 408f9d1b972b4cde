"""The simulated engine's HTTP server: the OpenAI-compatible API plus each framework's extra endpoints.

The shared routes (health, version, models, completions and chat, streamed or not, tokenize and detokenize),
request validation and error bodies come from :mod:`alflow.serving` (the kit the tiny engine uses too); this
module is the simulator's engine side, with the dialect's metrics (vLLM and SGLang ``/metrics``, SGLang
``/server_info`` and ``/get_server_info``, TensorRT-LLM ``/prometheus/metrics`` plus JSON iteration stats at
``/metrics``). Every response carries ``x-alflow-simulated: 1``; model names are prefixed ``sim/``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import math
import os
import random
import socket
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

import orjson
from aiohttp import web
from prometheus_client import generate_latest

from alflow.errors import AlflowError
from alflow.serving.api import ApiError
from alflow.serving.app import JSON, Handler, OpenAIServer, open_stream, run_app
from alflow.serving.requests import ChatRequest, CompletionRequest, TokenizeRequest, output_budget
from alflow.sim.acceptance import NaturalAcceptance, stable_seed
from alflow.sim.cluster import ClusterError, HeadCluster, WorkerLink
from alflow.sim.config import SGLANG_FIXED_TOKEN_ID, SimConfig, emitter_of
from alflow.sim.dialects import JsonView, make_registry
from alflow.sim.engine import SimEngine, SimRequest
from alflow.sim.payloads import body_metrics_json, spec_tokens_details_json, stream_metrics_json, usage_json
from alflow.sim.sources import sim_plugin
from alflow.sim.stats import EngineStats
from alflow.sim.text import AnswerKey, TextSource, corpus_text, load_answer_key
from alflow.sim.tokenizer import get_tokenizer

log = logging.getLogger(__name__)

SIM_HEADER = "x-alflow-simulated"
LISTENING_PREFIX = "alflow-sim listening on "


class SimStartupError(AlflowError):
    """The simulated server refused to start (``--fail-startup``) or could not bind."""


@dataclass(frozen=True)
class _Parsed:
    prompt_ids_count: int
    text: str
    last_user: str
    max_tokens: int
    min_tokens: int
    ignore_eos: bool
    temperature: float
    seed: int | None
    stream: bool
    include_usage: bool
    thinking: bool = False
    spec_details: bool = False
    """SGLang dialect: the request asked for ``sglext.spec_tokens_details`` and this server answers it."""


class SimService:
    """One simulated server's engine side: engines, tokenizer, dialect (:class:`alflow.serving.app.ServingEngine`)."""

    header = (SIM_HEADER, "1")

    def __init__(
        self,
        config: SimConfig,
        *,
        crash: Callable[[], None] | None = None,
        cluster: HeadCluster | None = None,
    ) -> None:
        self.config = config
        self.engine = SimEngine(config)
        # multi-node dp: one engine per node rank (rank 0's is self.engine); requests go round-robin
        self.engines = [self.engine]
        if config.multi_node and config.node_parallel == "dp":
            self.engines += [
                SimEngine(replace(config, seed=config.seed + rank, step_log=None))
                for rank in range(1, config.nnodes)
            ]
        self._rotation = itertools.cycle(self.engines)
        self.cluster = cluster
        self.tokenizer = get_tokenizer()
        self.dialect = emitter_of(config.dialect)
        for engine in self.engines:
            engine.record_iterations = self.dialect.records_iterations
        self.registry = make_registry(self.dialect, self.engine.stats, config)
        self.crash = crash
        self.api = OpenAIServer(self)
        self.model = config.served_model_name
        self.served_names = tuple(
            dict.fromkeys((self.model, config.model_name, self.model.removeprefix("sim/")))
        )
        self.metrics_path = self.dialect.metrics_path
        self.max_model_len = config.max_model_len
        self.api_key = config.api_key
        self._model_json = orjson.dumps(self.model)
        self._completed = 0
        self._fault_rng = random.Random(stable_seed("faults", config.seed))
        self._corpus = TextSource.of(self.tokenizer, self.tokenizer.encode(corpus_text()))
        self._fixed = TextSource.of(self.tokenizer, [SGLANG_FIXED_TOKEN_ID] * 64)
        self._natural = NaturalAcceptance(config.method, config.k, config.acceptance_quality, config.seed)
        self._rates = lru_cache(maxsize=4096)(self._natural.conditional_rates)
        rows = load_answer_key(config.answer_key) if config.answer_key is not None else {}
        self.answer_key = AnswerKey(rows, self.tokenizer, seed=config.seed, accuracy=config.answer_accuracy)
        # where reasoning text streams: the dialect's plugin says (vLLM delta.reasoning, SGLang and ATOM
        # delta.reasoning_content, TensorRT-LLM both; DOMAIN.md section 8)
        plugin = sim_plugin(config.dialect)
        self._token_prompts = plugin.token_id_prompts  # ATOM's completions take a string prompt only
        first, *second = plugin.reasoning_fields
        self._reasoning_keys: tuple[bytes, bytes] = (first.encode(), second[0].encode() if second else b"")
        # SGLang's per-request speculative counts (``sglext.spec_tokens_details``) when a request asks and the server
        # honours it (PR #33518); vLLM's (``metrics.speculative_decoding``) when started with
        # --per-request-spec-decode-metrics
        self._sglext = config.dialect == "sglang" and config.sglang_spec_details
        # a request asks for them with the fields the dialect's reader sends (SGLang's return_spec_tokens_details)
        self._asked = dict(plugin.metrics.request_fields) if plugin.metrics is not None else {}
        self._spec_metrics = config.per_request_spec_decode_metrics != "none"

    def _asks(self, fields: Mapping[str, object]) -> bool:
        """The request sets every field the dialect's reader asks with (``True`` given as ``true``, not ``1``)."""
        return bool(self._asked) and all(
            fields.get(key) is value if isinstance(value, bool) else fields.get(key) == value
            for key, value in self._asked.items()
        )

    def make_app(self) -> web.Application:
        """The aiohttp application: the kit's routes plus the dialect's."""
        return self.api.make_app()

    def routes(self) -> Sequence[tuple[str, str, Handler]]:
        """SGLang's server info, TensorRT-LLM's JSON iteration stats, and SGLang's generation health check."""
        extra: list[tuple[str, str, Handler]] = [("GET", "/health_generate", self.api._health)]
        extra += [("GET", path, self._json_view(view)) for path, view in self.dialect.json_routes().items()]
        return extra

    def _json_view(self, view: JsonView) -> Handler:
        async def answer(_request: web.Request) -> web.Response:
            return web.Response(body=orjson.dumps(view(self.engine.stats, self.config)), content_type=JSON)

        return answer

    async def startup(self) -> None:
        """Start every engine's step loop."""
        for engine in self.engines:
            engine.start()

    async def shutdown(self) -> None:
        """Stop every engine."""
        for engine in self.engines:
            await engine.stop()

    def rank_stats(self, rank: int) -> EngineStats:
        """The stats of node rank ``rank``'s engine (``dp`` mode; what that node's metrics show)."""
        return self.engines[rank].stats

    def _pick_engine(self) -> SimEngine:
        """The engine of the next request: the ranks in turn (one engine unless multi-node ``dp``)."""
        return next(self._rotation)

    # -------------------------------------------------------------- small endpoints

    def unhealthy(self) -> str | None:
        """A failed engine, or a multi-node group still forming."""
        for engine in self.engines:
            if engine.failed is not None:
                return f"engine failed: {engine.failed}"
        if self.cluster is not None and not self.cluster.complete:
            return self.cluster.status()
        return None

    def version(self) -> dict[str, Any]:
        """``GET /version``: the simulator, K and its synthetic setting."""
        cfg = self.config
        synthetic = (
            {"scheme": cfg.scheme, "al": cfg.synthetic_al, "rates": cfg.synthetic_rates}
            if cfg.synthetic
            else None
        )
        return {
            "version": cfg.framework_version or "alflow-sim",
            "simulated": True,
            "k": cfg.k,
            "synthetic_acceptance": synthetic,
        }

    def model_card(self) -> dict[str, Any]:
        """The simulator's fields of its ``/v1/models`` entry."""
        return {"owned_by": "alflow-sim"}

    def metrics(self) -> bytes:
        """The dialect's Prometheus text."""
        return generate_latest(self.registry)

    def tokenize(self, body: TokenizeRequest) -> list[int]:
        """Like vLLM's ``/tokenize``: the chat template applied to messages, or the prompt (BOS by default)."""
        tk = self.tokenizer
        if body.messages is not None:
            return tk.chat_ids(body.pairs(), add_generation_prompt=body.add_generation_prompt is not False)
        ids = tk.encode(body.prompt or "")
        if body.add_special_tokens is not False:
            ids.insert(0, tk.bos_id)
        return ids

    def detokenize(self, ids: list[int]) -> str:
        """Text of token ids (an id outside the vocabulary: :class:`InvalidInputError`)."""
        return self.tokenizer.decode(self.tokenizer.check_ids(ids))

    # -------------------------------------------------------------- generation

    def _parse(self, body: CompletionRequest | ChatRequest) -> _Parsed:
        """The simulator's limits on a validated request: n = 1, the context length, min_tokens <= max_tokens."""
        tk = self.tokenizer
        chat = isinstance(body, ChatRequest)
        if isinstance(body, ChatRequest):
            messages = body.pairs()
            n_prompt = len(tk.chat_ids(messages))
            text = "\n".join(content for _, content in messages)
            users = [content for role, content in messages if role == "user"]
            last_user = users[-1] if users else text
        else:
            prompt = body.single_prompt()
            if not isinstance(prompt, str) and not self._token_prompts:
                raise ApiError(
                    400, f"prompt: {self.config.dialect} takes a string prompt, not token ids", "prompt"
                )
            if isinstance(prompt, str):
                n_prompt = 1 + tk.count(prompt)
                text = last_user = prompt
            else:
                try:
                    ids = tk.check_ids(prompt)
                except AlflowError as exc:
                    raise ApiError(400, f"prompt: {exc}", "prompt") from None
                n_prompt = len(ids)
                text = last_user = tk.decode(ids, skip_special_tokens=True)
        if (body.n or 1) != 1:
            raise ApiError(400, "n: the simulator supports n=1 only", "n")
        max_tokens = output_budget(body, n_prompt, self.config.max_model_len)
        min_tokens = body.min_tokens or 0
        if min_tokens > max_tokens:
            raise ApiError(
                400, f"min_tokens={min_tokens} must not exceed max_tokens={max_tokens}", "min_tokens"
            )
        return _Parsed(
            prompt_ids_count=n_prompt,
            text=text,
            last_user=last_user,
            max_tokens=max_tokens,
            min_tokens=min_tokens,
            ignore_eos=bool(body.ignore_eos),
            temperature=1.0 if body.temperature is None else body.temperature,
            seed=body.seed,
            stream=bool(body.stream),
            include_usage=body.include_usage,
            thinking=chat and body.thinking,
            spec_details=self._sglext and self._asks(body.model_extra or {}),
        )

    def _build(self, p: _Parsed, *, chat: bool) -> SimRequest:
        cfg = self.config
        rid = self.api.request_id(chat)
        # a request seed or greedy sampling makes a request reproducible from its text alone
        reproducible = p.seed is not None or p.temperature == 0.0
        req_seed = stable_seed("req", cfg.seed, p.seed, p.text, 0 if reproducible else self.api.requests)
        rng = random.Random(req_seed)
        source = self._fixed if cfg.fixed_token_output else self._corpus
        start = rng.randrange(source.size)
        eos_at: int | None = None
        reasoning = 0
        if self.answer_key and not cfg.synthetic:
            question = self.answer_key.find(p.last_user)
            if question is not None:
                source, eos_at, reasoning = self.answer_key.source(question)
                start = 0
        if p.thinking and not reasoning:
            reasoning = max(1, round(rng.lognormvariate(math.log(cfg.mean_output_tokens) - 0.18, 0.6)))
        if eos_at is None:
            sigma = 0.6
            mu = math.log(cfg.mean_output_tokens) - sigma * sigma / 2
            eos_at = max(1, round(rng.lognormvariate(mu, sigma)))
        if p.ignore_eos:
            limit, reason = p.max_tokens, "length"
        else:
            eos_at = max(eos_at, p.min_tokens, 1)
            limit, reason = (eos_at, "stop") if eos_at <= p.max_tokens else (p.max_tokens, "length")
        req = SimRequest(
            rid=rid,
            prompt_tokens=p.prompt_ids_count,
            limit=limit,
            finish_reason=reason,
            stream=p.stream,
            src=source.data,
            offsets=source.offsets,
            pos=start,
            temperature=p.temperature,
        )
        if not cfg.synthetic:
            req.rates = self._rates(p.text, p.temperature)
            req.rng = rng
        if p.thinking:
            req.reasoning_left = reasoning
        req.draw = self.engine.request_draw(stable_seed("accept", req_seed))
        if cfg.stall_after_tokens is not None:
            req.stall_at = cfg.stall_after_tokens
        if p.stream and cfg.stream_error_rate > 0 and self._fault_rng.random() < cfg.stream_error_rate:
            req.stream_error_at = self._fault_rng.randint(min(2, limit), limit)
        head = self._head(rid, b"chat.completion.chunk" if chat else b"text_completion")
        if p.stream:
            self._frame_stream(req, p, head, chat=chat)
        return req

    def _frame_stream(self, req: SimRequest, p: _Parsed, head: bytes, *, chat: bool) -> None:
        """A streamed request's SSE framing: the bytes around each chunk's text, and its tail (usage, metrics)."""
        cfg = self.config
        reason = req.finish_reason
        if chat:
            req.prefix = b"data: " + head + b'{"index":0,"delta":{"content":"'
            first_key, second_key = self._reasoning_keys
            req.reasoning_prefix = b"data: " + head + b'{"index":0,"delta":{"%b":"' % first_key
            if second_key:
                req.reasoning_mid = b'","%b":"' % second_key
            req.suffix = b'"},"logprobs":null,"finish_reason":null}]}\n\n'
            req.final_suffix = b'"},"logprobs":null,"finish_reason":"%b","stop_reason":null}]}\n\n' % (
                reason.encode()
            )
        else:
            req.prefix = b"data: " + head + b'{"index":0,"text":"'
            req.suffix = b'","logprobs":null,"finish_reason":null,"stop_reason":null}]}\n\n'
            req.final_suffix = b'","logprobs":null,"finish_reason":"%b","stop_reason":null}]}\n\n' % (
                reason.encode()
            )
        if p.spec_details or p.include_usage:
            n_prompt, k, with_usage, sglext = p.prompt_ids_count, cfg.k, p.include_usage, p.spec_details
            metrics = self._spec_metrics and not sglext

            def tail(completion: int) -> bytes:
                # called at the last emit: the request's verify steps (req.hist) are final. SGLang sends sglext in a
                # chunk of its own (choices []) before the usage chunk (serving_chat.py); vLLM rides its metrics on
                # the final usage chunk (completion/serving.py)
                out = b""
                if sglext:
                    out = b'data: %b],"sglext":%b}\n\n' % (head, spec_tokens_details_json(req.hist, k))
                if with_usage:
                    usage = usage_json(n_prompt, completion)
                    if metrics:
                        steps = (req.steps, req.drafted, req.draft_tokens)
                        usage += b',"metrics":' + stream_metrics_json(req.hist, k, *steps)
                    out += b'data: %b],"usage":%b}\n\n' % (head, usage)
                return out

            req.tail = tail

    async def generate(
        self, request: web.Request, body: CompletionRequest | ChatRequest
    ) -> web.StreamResponse:
        """Answer a validated request: the engine streams its chunks straight into the transport."""
        chat = isinstance(body, ChatRequest)
        parsed = self._parse(body)
        cfg = self.config
        if cfg.error_rate > 0 and self._fault_rng.random() < cfg.error_rate:
            raise ApiError(500, "simulated internal server error (--error-rate)")
        if self.cluster is not None and not self.cluster.complete:
            raise ApiError(503, f"not serving yet: {self.cluster.status()}")
        engine = self._pick_engine()
        if engine.failed is not None:
            raise ApiError(500, f"the engine has failed: {engine.failed}")
        req = self._build(parsed, chat=chat)
        resp: web.StreamResponse | None = None
        try:
            if parsed.stream:
                resp = await open_stream(request)
                if chat:
                    role = b'"delta":{"role":"assistant","content":"'
                    await resp.write(req.prefix.replace(b'"delta":{"content":"', role) + req.suffix)
                req.transport = request.transport
                if cfg.time_scale == 0 and request.transport is not None:
                    # as fast as possible: let the kernel coalesce small chunks (Nagle) instead of one
                    # segment per SSE event; chunk timing carries no meaning at --time-scale 0
                    sock = request.transport.get_extra_info("socket")
                    if sock is not None:
                        with contextlib.suppress(OSError):
                            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 0)
                            req.nagle_sock = sock  # the engine turns TCP_NODELAY back on for the last chunk
                req.chunked = resp.chunked
            engine.submit(req)
            assert req.done is not None
            await req.done
            if resp is not None:
                if request.transport is not None and not request.transport.is_closing():
                    await resp.write_eof()
                return resp
            if req.error is not None:
                raise ApiError(500, f"request aborted: {req.error}")
            return web.Response(body=self._whole_response(req, parsed, chat), content_type=JSON)
        finally:
            if req.done is not None:
                engine.abort(req)
                self._count_completed(req)

    def _whole_response(self, req: SimRequest, parsed: _Parsed, chat: bool) -> bytes:
        """The body of a finished request's non-streamed answer (OpenAI's completion or chat completion)."""
        cfg = self.config
        content = b"".join(req.parts)
        usage = usage_json(parsed.prompt_ids_count, req.emitted)
        head = self._head(req.rid, b"chat.completion" if chat else b"text_completion") + b'{"index":0,'
        if chat:
            reasoning = b'"%b"' % b"".join(req.reasoning_parts) if parsed.thinking else b"null"
            first_key, second_key = self._reasoning_keys
            fields = b'"%b":%b' % (first_key, reasoning)
            if second_key:
                fields += b',"%b":%b' % (second_key, reasoning)
            choice = b'"message":{"role":"assistant","content":"%b",%b,"tool_calls":[]},' % (
                content,
                fields,
            )
        else:
            choice = b'"text":"%b",' % content
        if parsed.spec_details:  # SGLang: a response-level sglext beside usage (serving_chat.py)
            usage += b',"sglext":' + spec_tokens_details_json(req.hist, cfg.k)
        elif self._spec_metrics:  # a top-level key beside usage, as vLLM's response model has it
            usage += b',"metrics":' + body_metrics_json(
                req.hist, cfg.k, req.steps, req.drafted, req.draft_tokens
            )
        end = b'"logprobs":null,"finish_reason":"%b","stop_reason":null}],"usage":%b}' % (
            req.finish_reason.encode(),
            usage,
        )
        return head + choice + end

    def _head(self, rid: str, kind: bytes) -> bytes:
        """A response's (or chunk's) bytes up to its choices: ``{"id", "object", "created", "model", "choices":[``."""
        return b'{"id":"%b","object":"%b","created":%d,"model":%b,"choices":[' % (
            rid.encode(),
            kind,
            self.api.created,
            self._model_json,
        )

    def _count_completed(self, req: SimRequest) -> None:
        if req.error is not None:
            return
        self._completed += 1
        limit = self.config.crash_after_requests
        if limit is not None and self._completed >= limit and self.crash is not None:
            log.error("simulated crash after %d requests (--crash-after-requests)", self._completed)
            # after the response has gone out: the handler returns first
            asyncio.get_running_loop().call_later(0.05, self.crash)


# ------------------------------------------------------------------------------------ running


def _default_crash() -> None:
    sys.stderr.flush()
    os._exit(70)


async def serve(
    config: SimConfig,
    stop: asyncio.Event,
    on_ready: Callable[[str, int], None] | None = None,
    *,
    crash: Callable[[], None] | None = _default_crash,
) -> None:
    """Run the server until ``stop`` is set; call ``on_ready(host, port)`` once bound."""
    if config.startup_delay_s > 0:
        log.info("simulated startup delay of %.3f s (--startup-delay)", config.startup_delay_s)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), config.startup_delay_s)
        if stop.is_set():
            return
    if config.fail_startup:
        raise SimStartupError("simulated startup failure (--fail-startup)")
    if config.multi_node and config.node_rank > 0:
        await _serve_worker(config, stop=stop, on_ready=on_ready)
        return
    cluster = HeadCluster(config) if config.multi_node else None
    # The server (tokenizer, corpus) is built before the head listens: built after, it held the event loop
    # while workers were already joining, and under load their heartbeats could miss a short --peer-timeout.
    server = SimService(config, crash=crash, cluster=cluster)
    if cluster is not None:
        if config.node_parallel == "dp":
            cluster.stats_of = server.rank_stats
        await cluster.start()
    for note in config.notes:
        log.info("%s", note)

    def describe(port: int) -> str:
        what = f"synthetic {config.scheme}" if config.synthetic else f"natural {config.method}"
        head = f" as the head of {config.nnodes} nodes ({config.node_parallel})" if config.multi_node else ""
        return (
            f"serving {config.served_model_name} (dialect {config.dialect}, K={config.k}, {what}) "
            f"on {config.host}:{port}{head}"
        )

    try:
        await run_app(
            server.make_app(),
            config.host,
            config.node_port,
            stop=stop,
            on_ready=on_ready,
            error=SimStartupError,
            describe=describe,
            broken=None if cluster is None else cluster.broken,
        )
        if cluster is not None and cluster.failed is not None:
            raise ClusterError(cluster.failed)
    finally:
        if cluster is not None:
            await cluster.close()


async def _serve_worker(
    config: SimConfig, *, stop: asyncio.Event, on_ready: Callable[[str, int], None] | None
) -> None:
    """A worker node (rank > 0): join the head, serve ``/health`` (and, ``dp``, this rank's metrics).

    Returns when ``stop`` is set; raises :class:`ClusterError` when the head refuses it or goes away.
    """
    link = WorkerLink(config)
    joining = asyncio.ensure_future(link.join())
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait([joining, stopping], return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    if not joining.done():
        joining.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await joining
        return
    joining.result()  # raises ClusterError when the join failed
    dialect = emitter_of(config.dialect)

    async def health(_request: web.Request) -> web.Response:
        if link.lost is not None:
            return web.Response(status=503, text=link.lost)
        return web.Response(status=200, text=f"worker rank {config.node_rank} of {config.nnodes}")

    async def metrics(_request: web.Request) -> web.Response:
        try:
            stats = await link.fetch_stats()
        except ClusterError as exc:
            return web.Response(status=503, text=str(exc))
        if stats is None:
            return web.Response(status=404, text="the head keeps no per-rank stats")
        registry = make_registry(dialect, stats, config)
        return web.Response(body=generate_latest(registry), content_type="text/plain", charset="utf-8")

    app = web.Application()
    app.router.add_get("/health", health)
    if config.node_parallel == "dp":
        app.router.add_get(dialect.metrics_path, metrics)

    async def mark(_request: web.Request, response: web.StreamResponse) -> None:
        response.headers[SIM_HEADER] = "1"

    app.on_response_prepare.append(mark)

    def describe(port: int) -> str:
        return f"worker rank {config.node_rank} of {config.nnodes} ({config.node_parallel}) on {config.host}:{port}"

    try:
        await run_app(
            app,
            config.host,
            config.node_port,
            stop=stop,
            on_ready=on_ready,
            error=SimStartupError,
            describe=describe,
            broken=link.broken,
        )
        if link.lost is not None:
            raise ClusterError(link.lost)
    finally:
        await link.close()
