"""The simulated engine's HTTP server: the OpenAI-compatible API plus each framework's extra endpoints.

Endpoints: ``GET /health``, ``GET /v1/models``, ``POST /v1/chat/completions`` and
``POST /v1/completions`` (streaming SSE and not), ``POST /tokenize`` and ``POST /detokenize`` (vLLM
style), ``GET /version``, and the dialect's metrics (vLLM and SGLang ``/metrics``, SGLang
``/server_info`` and ``/get_server_info``, TensorRT-LLM ``/prometheus/metrics`` plus JSON iteration
stats at ``/metrics``). Every response carries ``x-alflow-simulated: 1``; model names are prefixed
``sim/``. Bad input gets HTTP 400 with an OpenAI-style body
``{"error": {"message", "type", "param", "code"}}`` and the server keeps serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import random
import re
import socket
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import cast

import orjson
from aiohttp import web
from prometheus_client import generate_latest

from alflow.errors import AlflowError, InvalidInputError
from alflow.openai_api import ApiError, check_api_key
from alflow.openai_api import get_bool as _get_bool
from alflow.openai_api import get_float as _get_float
from alflow.openai_api import get_int as _get_int
from alflow.sim.acceptance import NaturalAcceptance, stable_seed
from alflow.sim.cluster import ClusterError, HeadCluster, WorkerLink
from alflow.sim.config import SGLANG_FIXED_TOKEN_ID, SimConfig
from alflow.sim.dialects import DIALECTS, make_registry, sglang_server_info
from alflow.sim.engine import Engine, EngineStats, SimRequest
from alflow.sim.tokenizer import Tokenizer, get_tokenizer

log = logging.getLogger(__name__)

SIM_HEADER = "x-alflow-simulated"
LISTENING_PREFIX = "alflow-sim listening on "
DEFAULT_COMPLETION_MAX_TOKENS = 16
_JSON = "application/json"
_NUMBER = re.compile(r"-?[\d,]*\.?\d+")


class SimStartupError(AlflowError):
    """The simulated server refused to start (``--fail-startup``) or could not bind."""


def _error_response(err: ApiError) -> web.Response:
    return web.Response(status=err.status, body=err.body(), content_type=_JSON)


# ------------------------------------------------------------------------------------ validation


def _message_text(content: object, index: int) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for part in content:
            if not isinstance(part, dict) or not isinstance(part.get("text", ""), str):
                raise ApiError(
                    400, f"messages[{index}].content parts must be objects with a text", "messages"
                )
            if part.get("type", "text") == "text":
                parts.append(cast(str, part.get("text", "")))
        return "".join(parts)
    raise ApiError(400, f"messages[{index}].content must be a string or a list of parts", "messages")


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


# ------------------------------------------------------------------------------------ output text


def _corpus_text(words: int = 6000) -> str:
    """Deterministic English-like filler with some numbers: the text the sim "generates"."""
    rng = random.Random(20240611)
    vocab_text = (
        "the model reads each token and the cache grows as the answer goes on so we check the "
        "numbers again before the next step because a draft may be wrong and then the target "
        "writes its own token instead which is why speed depends on how many drafts are accepted "
        "in every verify pass of the batch"
    )
    vocab = vocab_text.split()
    out: list[str] = []
    sentence: list[str] = []
    for _ in range(words):
        word = rng.choice(vocab)
        if rng.random() < 0.04:
            word = str(rng.randint(2, 999))
        sentence.append(word)
        if len(sentence) >= rng.randint(8, 18):
            out.append(" ".join(sentence).capitalize() + ".")
            sentence = []
    return " ".join(out)


@dataclass(frozen=True)
class TextSource:
    """Pre-escaped output text: JSON-string bytes and per-token byte offsets into them."""

    data: bytes
    offsets: list[int]

    @classmethod
    def of(cls, tokenizer: Tokenizer, ids: list[int]) -> TextSource:
        """Build from token ids whose text is ASCII (each token escapes on its own)."""
        offsets = [0]
        chunks: list[bytes] = []
        total = 0
        for tok in ids:
            frag = orjson.dumps(tokenizer.token_bytes(tok).decode("ascii", "replace"))[1:-1]
            chunks.append(frag)
            total += len(frag)
            offsets.append(total)
        return cls(b"".join(chunks), offsets)

    @property
    def size(self) -> int:
        """Number of tokens."""
        return len(self.offsets) - 1


# ------------------------------------------------------------------------------------ answer key


def load_answer_key(path: Path) -> dict[str, tuple[str, str]]:
    """GSM8K-style JSONL -> ``{question: (reasoning, final number)}`` (the number after ``####``)."""
    key: dict[str, tuple[str, str]] = {}
    with path.open("rb") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = orjson.loads(line)
                question, answer = row["question"], row["answer"]
            except (orjson.JSONDecodeError, KeyError, TypeError):
                raise InvalidInputError(
                    f"--answer-key {path}: line {lineno} is not a question/answer row"
                ) from None
            if not isinstance(question, str) or not isinstance(answer, str) or "####" not in answer:
                raise InvalidInputError(f"--answer-key {path}: line {lineno} has no '#### N' answer")
            reasoning, _, final = answer.rpartition("####")
            reasoning = re.sub(r"<<[^>]*>>", "", reasoning).strip()
            key[question.strip()] = (reasoning, final.strip().replace(",", ""))
    return key


def _ascii(text: str) -> str:
    return text.replace("\u2019", "'").encode("ascii", "replace").decode()


# ------------------------------------------------------------------------------------ server


class SimServer:
    """One simulated server: engine, tokenizer, dialect and the aiohttp application."""

    def __init__(
        self,
        config: SimConfig,
        *,
        crash: Callable[[], None] | None = None,
        cluster: HeadCluster | None = None,
    ) -> None:
        self.config = config
        self.engine = Engine(config)
        # multi-node dp: one engine per node rank (rank 0's is self.engine); requests go round-robin
        self.engines = [self.engine]
        if config.multi_node and config.node_parallel == "dp":
            self.engines += [
                Engine(replace(config, seed=config.seed + rank, step_log=None))
                for rank in range(1, config.nnodes)
            ]
        self._next_engine = 0
        self.cluster = cluster
        self.tokenizer = get_tokenizer()
        self.dialect = DIALECTS[config.dialect]
        self.registry = make_registry(self.dialect, self.engine.stats, config)
        self.crash = crash
        self.created = int(time.time())
        self.model = config.served_model_name
        self._model_json = orjson.dumps(self.model)
        self._boot = os.urandom(4).hex()
        self._counter = 0
        self._completed = 0
        self._fault_rng = random.Random(stable_seed("faults", config.seed))
        self._corpus = TextSource.of(self.tokenizer, self.tokenizer.encode(_corpus_text()))
        self._fixed = TextSource.of(self.tokenizer, [SGLANG_FIXED_TOKEN_ID] * 64)
        self._natural = NaturalAcceptance(config.method, config.k, config.acceptance_quality, config.seed)
        self._rates = lru_cache(maxsize=4096)(self._natural.conditional_rates)
        self.answer_key = load_answer_key(config.answer_key) if config.answer_key is not None else {}
        # where reasoning text streams: vLLM delta.reasoning, SGLang delta.reasoning_content,
        # TensorRT-LLM both (DOMAIN.md section 8)
        self._reasoning_keys: tuple[bytes, bytes] = {
            "vllm": (b"reasoning", b""),
            "sglang": (b"reasoning_content", b""),
            "trtllm": (b"reasoning", b"reasoning_content"),
        }[config.dialect]
        self._answer_sources: dict[tuple[str, bool], tuple[TextSource, int, int]] = {}

    # -------------------------------------------------------------- app

    def make_app(self) -> web.Application:
        """The aiohttp application with every route of the configured dialect."""
        app = web.Application(middlewares=[self._errors, self._auth], client_max_size=64 * 1024 * 1024)
        app.on_response_prepare.append(self._mark_simulated)
        app.on_startup.append(self._on_startup)
        app.on_shutdown.append(self._on_shutdown)
        r = app.router
        r.add_get("/health", self._health)
        r.add_get("/health_generate", self._health)
        r.add_get("/version", self._version)
        r.add_get("/v1/models", self._models)
        r.add_post("/v1/chat/completions", self._chat)
        r.add_post("/v1/completions", self._completions)
        r.add_post("/tokenize", self._tokenize)
        r.add_post("/detokenize", self._detokenize)
        r.add_get(self.dialect.metrics_path, self._metrics)
        if self.config.dialect == "sglang":
            r.add_get("/server_info", self._server_info)
            r.add_get("/get_server_info", self._server_info)
        if self.config.dialect == "trtllm":
            r.add_get("/metrics", self._trtllm_json_stats)
        return app

    async def _on_startup(self, _app: web.Application) -> None:
        for engine in self.engines:
            engine.start()

    async def _on_shutdown(self, _app: web.Application) -> None:
        for engine in self.engines:
            await engine.stop()

    def rank_stats(self, rank: int) -> EngineStats:
        """The stats of node rank ``rank``'s engine (``dp`` mode; what that node's metrics show)."""
        return self.engines[rank].stats

    def _pick_engine(self) -> Engine:
        """The engine of the next request: the ranks in turn (one engine unless multi-node ``dp``)."""
        if len(self.engines) == 1:
            return self.engine
        engine = self.engines[self._next_engine % len(self.engines)]
        self._next_engine += 1
        return engine

    @staticmethod
    async def _mark_simulated(_request: web.Request, response: web.StreamResponse) -> None:
        response.headers[SIM_HEADER] = "1"

    @web.middleware
    async def _errors(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        try:
            return await handler(request)
        except ApiError as err:
            return _error_response(err)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            return _error_response(ApiError(exc.status, exc.reason or "error"))
        except (asyncio.CancelledError, ConnectionResetError):
            raise
        except Exception as exc:
            log.exception("unexpected error in %s %s", request.method, request.path)
            return _error_response(ApiError(500, f"internal error: {exc}"))

    @web.middleware
    async def _auth(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        """VLLM's ``--api-key``: /v1/* answers 401 without ``Authorization: Bearer <key>``."""
        check_api_key(request.path, request.headers.get("Authorization"), self.config.api_key)
        return await handler(request)

    # -------------------------------------------------------------- small endpoints

    async def _health(self, _request: web.Request) -> web.Response:
        for engine in self.engines:
            if engine.failed is not None:
                return web.Response(status=503, text=f"engine failed: {engine.failed}")
        if self.cluster is not None and not self.cluster.complete:
            return web.Response(status=503, text=self.cluster.status())
        return web.Response(status=200)

    async def _version(self, _request: web.Request) -> web.Response:
        cfg = self.config
        synthetic = (
            {"scheme": cfg.scheme, "al": cfg.synthetic_al, "rates": cfg.synthetic_rates}
            if cfg.synthetic
            else None
        )
        return web.json_response(
            {"version": "alflow-sim", "simulated": True, "k": cfg.k, "synthetic_acceptance": synthetic}
        )

    async def _models(self, _request: web.Request) -> web.Response:
        data = {
            "object": "list",
            "data": [
                {
                    "id": self.model,
                    "object": "model",
                    "created": self.created,
                    "owned_by": "alflow-sim",
                    "root": self.model,
                    "parent": None,
                    "max_model_len": self.config.max_model_len,
                }
            ],
        }
        return web.Response(body=orjson.dumps(data), content_type=_JSON)

    async def _metrics(self, _request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.registry), content_type="text/plain", charset="utf-8")

    async def _server_info(self, _request: web.Request) -> web.Response:
        return web.Response(
            body=orjson.dumps(sglang_server_info(self.engine.stats, self.config)), content_type=_JSON
        )

    async def _trtllm_json_stats(self, _request: web.Request) -> web.Response:
        iterations = self.engine.stats.iterations
        items = list(iterations)
        iterations.clear()
        return web.Response(body=orjson.dumps(items), content_type=_JSON)

    async def _read_json(self, request: web.Request) -> dict[str, object]:
        raw = await request.read()
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise ApiError(400, f"request body is not valid JSON: {exc}") from None
        if not isinstance(body, dict):
            raise ApiError(400, f"request body must be a JSON object, got {type(body).__name__}")
        return body

    async def _tokenize(self, request: web.Request) -> web.Response:
        body = await self._read_json(request)
        tk = self.tokenizer
        if "messages" in body:
            messages = self._messages(body)
            ids = tk.chat_ids(messages, add_generation_prompt=_get_bool(body, "add_generation_prompt", True))
        elif isinstance(body.get("prompt"), str):
            ids = tk.encode(cast(str, body["prompt"]))
            if _get_bool(body, "add_special_tokens", True):
                ids.insert(0, tk.bos_id)
        else:
            raise ApiError(400, "give a string prompt or messages", "prompt")
        return web.json_response(
            {"count": len(ids), "max_model_len": self.config.max_model_len, "tokens": ids}
        )

    async def _detokenize(self, request: web.Request) -> web.Response:
        body = await self._read_json(request)
        tokens = body.get("tokens")
        if not isinstance(tokens, list):
            raise ApiError(400, "tokens must be a list of token ids", "tokens")
        try:
            ids = self.tokenizer.check_ids(tokens)
        except InvalidInputError as exc:
            raise ApiError(400, str(exc), "tokens") from None
        return web.json_response({"prompt": self.tokenizer.decode(ids)})

    # -------------------------------------------------------------- generation

    def _messages(self, body: dict[str, object]) -> list[tuple[str, str]]:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ApiError(400, "messages must be a non-empty list", "messages")
        out: list[tuple[str, str]] = []
        for i, msg in enumerate(messages):
            if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
                raise ApiError(400, f"messages[{i}] must be an object with a string role", "messages")
            out.append((cast(str, msg["role"]), _message_text(msg.get("content"), i)))
        return out

    def _parse(self, body: dict[str, object], *, chat: bool) -> _Parsed:
        model = body.get("model")
        if model is not None:
            if not isinstance(model, str):
                raise ApiError(400, f"model must be a string, got {model!r}", "model")
            if model not in (self.model, self.config.model_name, self.model.removeprefix("sim/")):
                raise ApiError(404, f"The model `{model}` does not exist.", "model")
        tk = self.tokenizer
        if chat:
            messages = self._messages(body)
            n_prompt = len(tk.chat_ids(messages))
            text = "\n".join(content for _, content in messages)
            users = [content for role, content in messages if role == "user"]
            last_user = users[-1] if users else text
        else:
            prompt = body.get("prompt")
            if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
                prompt = prompt[0]
            if isinstance(prompt, str):
                n_prompt = 1 + tk.count(prompt)
                text = last_user = prompt
            elif isinstance(prompt, list) and prompt:
                try:
                    ids = tk.check_ids(prompt)
                except InvalidInputError as exc:
                    raise ApiError(400, f"prompt: {exc}", "prompt") from None
                n_prompt = len(ids)
                text = last_user = tk.decode(ids, skip_special_tokens=True)
            else:
                raise ApiError(400, "prompt must be a string or a non-empty list of token ids", "prompt")
        n = _get_int(body, "n", low=1, default=1)
        if n != 1:
            raise ApiError(400, "the simulator supports n=1 only", "n")
        limit = self.config.max_model_len
        if n_prompt >= limit:
            raise ApiError(
                400,
                f"This model's maximum context length is {limit} tokens. However, your prompt has "
                f"{n_prompt} tokens. Please reduce the length of the input.",
                "prompt" if not chat else "messages",
            )
        default_max = limit - n_prompt if chat else DEFAULT_COMPLETION_MAX_TOKENS
        max_tokens = _get_int(body, "max_tokens", low=1, default=None)
        if chat and max_tokens is None:
            max_tokens = _get_int(body, "max_completion_tokens", low=1, default=None)
        max_tokens = default_max if max_tokens is None else max_tokens
        if n_prompt + max_tokens > limit:
            raise ApiError(
                400,
                f"This model's maximum context length is {limit} tokens. However, you requested "
                f"{n_prompt + max_tokens} tokens ({n_prompt} in the input, {max_tokens} in the completion). "
                "Please reduce the length of the input or completion.",
                "max_tokens",
            )
        min_tokens = cast(int, _get_int(body, "min_tokens", low=0, default=0))
        if min_tokens > max_tokens:
            raise ApiError(
                400, f"min_tokens={min_tokens} must not exceed max_tokens={max_tokens}", "min_tokens"
            )
        temperature = _get_float(body, "temperature", 1.0, 0.0, 100.0)
        _get_float(body, "top_p", 1.0, 0.0, 1.0)
        _get_int(body, "top_k", low=-1, default=-1)
        seed = _get_int(body, "seed", low=-(1 << 63), default=None)
        stream = _get_bool(body, "stream", False)
        options = body.get("stream_options")
        include_usage = False
        if options is not None:
            if not stream:
                raise ApiError(400, "stream_options can only be set when stream is true", "stream_options")
            if not isinstance(options, dict):
                raise ApiError(400, "stream_options must be an object", "stream_options")
            include_usage = _get_bool(cast(dict[str, object], options), "include_usage", False)
        for name in ("stop", "logit_bias"):
            value = body.get(name)
            if value is not None and not isinstance(value, str | list | dict):
                raise ApiError(400, f"{name} has the wrong type: {type(value).__name__}", name)
        kwargs = body.get("chat_template_kwargs")
        if kwargs is not None and not isinstance(kwargs, dict):
            raise ApiError(400, "chat_template_kwargs must be an object", "chat_template_kwargs")
        # thinking: Qwen3-style {"enable_thinking": true} or DeepSeek-style {"thinking": true}; off by default
        thinking = (
            chat
            and isinstance(kwargs, dict)
            and any(kwargs.get(k) is True for k in ("enable_thinking", "thinking"))
        )
        return _Parsed(
            prompt_ids_count=n_prompt,
            text=text,
            last_user=last_user,
            max_tokens=max_tokens,
            min_tokens=min_tokens,
            ignore_eos=_get_bool(body, "ignore_eos", False),
            temperature=temperature,
            seed=seed,
            stream=stream,
            include_usage=include_usage,
            thinking=thinking,
        )

    def _find_question(self, text: str) -> str | None:
        """The key question that occurs last in ``text`` (the prompt's last question), if any."""
        best: str | None = None
        best_at = -1
        for window in (text[-4000:], text):
            for question in self.answer_key:
                at = window.rfind(question)
                if at > best_at:
                    best, best_at = question, at
            if best is not None:
                return best
        return None

    def _answer_source(self, question: str) -> tuple[TextSource, int, int]:
        """Reply text for a key question: brief reasoning and ``#### N`` (right with P, seeded)."""
        rng = random.Random(stable_seed("answer", self.config.seed, question))
        correct = rng.random() < self.config.answer_accuracy
        cached = self._answer_sources.get((question, correct))
        if cached is not None:
            return cached
        reasoning, final = self.answer_key[question]
        number = final
        if not correct:
            try:
                value = float(final)
                delta = rng.choice([-3, -2, -1, 1, 2, 5, 10])
                number = str(int(value) + delta) if value.is_integer() else f"{value + delta:g}"
            except ValueError:
                number = final + "1"
        steps = "\n".join(line for line in reasoning.splitlines()[-3:] if line.strip())
        if not correct:
            steps = _NUMBER.sub(lambda m: m.group() if rng.random() < 0.7 else str(rng.randint(1, 99)), steps)
        thought = self.tokenizer.encode(_ascii(f"Let's solve this step by step.\n{steps}\n"))
        ids = thought + self.tokenizer.encode(_ascii(f"The answer is {number}.\n#### {number}"))
        filler = self.tokenizer.encode(" " + _corpus_text(400))
        source = TextSource.of(self.tokenizer, ids + filler)
        self._answer_sources[(question, correct)] = (source, len(ids), len(thought))
        return source, len(ids), len(thought)

    def _build(self, p: _Parsed, *, chat: bool) -> SimRequest:
        cfg = self.config
        self._counter += 1
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{self._boot}{self._counter:06d}"
        # a request seed or greedy sampling makes a request reproducible from its text alone
        reproducible = p.seed is not None or p.temperature == 0.0
        req_seed = stable_seed("req", cfg.seed, p.seed, p.text, 0 if reproducible else self._counter)
        rng = random.Random(req_seed)
        source = self._fixed if cfg.fixed_token_output else self._corpus
        start = rng.randrange(source.size)
        eos_at: int | None = None
        reasoning = 0
        if self.answer_key and not cfg.synthetic:
            question = self._find_question(p.last_user)
            if question is not None:
                source, eos_at, reasoning = self._answer_source(question)
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
        head = b'{"id":"%b","object":"%b","created":%d,"model":%b,"choices":[' % (
            rid.encode(),
            b"chat.completion.chunk" if chat else b"text_completion",
            self.created,
            self._model_json,
        )
        if p.stream:
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
            if p.include_usage:
                n_prompt = p.prompt_ids_count

                def tail(completion: int) -> bytes:
                    return b'data: %b],"usage":%b}\n\n' % (head, _usage(n_prompt, completion))

                req.tail = tail
        return req

    async def _generate(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        body = await self._read_json(request)
        parsed = self._parse(body, chat=chat)
        cfg = self.config
        if cfg.error_rate > 0 and self._fault_rng.random() < cfg.error_rate:
            raise ApiError(500, "simulated internal server error (--error-rate)")
        if self.cluster is not None and not self.cluster.complete:
            raise ApiError(503, f"not serving yet: {self.cluster.status()}")
        engine = self._pick_engine()
        if engine.failed is not None:
            raise ApiError(500, f"the engine has failed: {engine.failed}")
        req = self._build(parsed, chat=chat)
        try:
            if parsed.stream:
                resp = web.StreamResponse(
                    status=200, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
                )
                chunked = request.version >= (1, 1)
                if chunked:
                    resp.enable_chunked_encoding()
                await resp.prepare(request)
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
                req.chunked = chunked
                engine.submit(req)
                assert req.done is not None
                await req.done
                transport = request.transport
                if transport is not None and not transport.is_closing():
                    await resp.write_eof()
                return resp
            engine.submit(req)
            assert req.done is not None
            await req.done
            if req.error is not None:
                raise ApiError(500, f"request aborted: {req.error}")
            content = b"".join(req.parts)
            usage = _usage(parsed.prompt_ids_count, req.emitted)
            head = b'{"id":"%b","object":"%b","created":%d,"model":%b,"choices":[{"index":0,' % (
                req.rid.encode(),
                b"chat.completion" if chat else b"text_completion",
                self.created,
                self._model_json,
            )
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
            out = (
                head
                + choice
                + b'"logprobs":null,"finish_reason":"%b","stop_reason":null}],"usage":%b}'
                % (
                    req.finish_reason.encode(),
                    usage,
                )
            )
            return web.Response(body=out, content_type=_JSON)
        finally:
            if req.done is not None:
                engine.abort(req)
                self._count_completed(req)

    def _count_completed(self, req: SimRequest) -> None:
        if req.error is not None:
            return
        self._completed += 1
        limit = self.config.crash_after_requests
        if limit is not None and self._completed >= limit and self.crash is not None:
            log.error("simulated crash after %d requests (--crash-after-requests)", self._completed)
            # after the response has gone out: the handler returns first
            asyncio.get_running_loop().call_later(0.05, self.crash)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=True)

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=False)


def _usage(prompt: int, completion: int) -> bytes:
    return b'{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d}' % (
        prompt,
        prompt + completion,
        completion,
    )


# ------------------------------------------------------------------------------------ running


def _default_crash() -> None:
    sys.stderr.flush()
    os._exit(70)


async def serve(
    config: SimConfig,
    *,
    stop: asyncio.Event,
    on_ready: Callable[[str, int], None] | None = None,
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
    cluster: HeadCluster | None = None
    if config.multi_node:
        cluster = HeadCluster(config)
        await cluster.start()
    server = SimServer(config, crash=crash, cluster=cluster)
    if cluster is not None and config.node_parallel == "dp":
        cluster.stats_of = server.rank_stats
    runner = web.AppRunner(server.make_app(), handler_cancellation=True, access_log=None)
    await runner.setup()
    try:
        port = await _listen(runner, config)
        for note in config.notes:
            log.info("%s", note)
        log.info(
            "serving %s (dialect %s, K=%d, %s) on %s:%d%s",
            config.served_model_name,
            config.dialect,
            config.k,
            f"synthetic {config.scheme}" if config.synthetic else f"natural {config.method}",
            config.host,
            port,
            f" as the head of {config.nnodes} nodes ({config.node_parallel})" if config.multi_node else "",
        )
        if on_ready is not None:
            on_ready(config.host, port)
        await _until_stopped(stop, None if cluster is None else cluster.broken)
        if cluster is not None and cluster.failed is not None:
            raise ClusterError(cluster.failed)
    finally:
        await runner.cleanup()
        if cluster is not None:
            await cluster.close()


async def _listen(runner: web.AppRunner, config: SimConfig) -> int:
    """Start listening on ``--host`` and this node's port; the bound port (``--port 0`` picks one)."""
    site = web.TCPSite(runner, config.host, config.node_port)
    try:
        await site.start()
    except OSError as exc:
        raise SimStartupError(f"cannot listen on {config.host}:{config.node_port}: {exc}") from None
    for addr in runner.addresses:
        if isinstance(addr, tuple) and len(addr) >= 2:
            return int(addr[1])
    return config.node_port


async def _until_stopped(stop: asyncio.Event, broken: asyncio.Event | None) -> None:
    """Wait until ``stop`` is set or (multi-node) the group breaks."""
    if broken is None:
        await stop.wait()
        return
    waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(broken.wait())]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waits:
            waiter.cancel()


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
    dialect = DIALECTS[config.dialect]

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
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        port = await _listen(runner, config)
        log.info(
            "worker rank %d of %d (%s) on %s:%d",
            config.node_rank,
            config.nnodes,
            config.node_parallel,
            config.host,
            port,
        )
        if on_ready is not None:
            on_ready(config.host, port)
        await _until_stopped(stop, link.broken)
        if link.lost is not None:
            raise ClusterError(link.lost)
    finally:
        await runner.cleanup()
        await link.close()


def listening_line(host: str, port: int) -> str:
    """The one line the server prints on stdout once bound (``alflow-sim listening on URL``)."""
    shown = f"[{host}]" if ":" in host else host
    return f"{LISTENING_PREFIX}http://{shown}:{port}"
