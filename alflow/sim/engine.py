"""The simulated engine: continuous batching with a step loop and speculative decoding.

One asyncio task runs the step loop. Each step:

1. admits waiting requests while fewer than ``max_num_seqs`` run (the rest queue);
2. takes the step's time from the profile (verify of the running batch plus prefill of the admitted
   prompts), times ``time_scale`` (0: no wait at all, just a yield to the event loop);
3. **verify**: every running request proposed K drafts and accepts ``a`` of them (synthetic sampler
   or natural per-request rates), emitting ``a + 1`` tokens in one SSE chunk;
4. **prefill**: every admitted request emits its first token (no drafts: it is not a verify step).

The hot path writes pre-framed bytes straight to each request's transport (one HTTP chunk per
request per step) from slices of a pre-escaped output text, so the per-token Python work is nil.

Counting (what the metrics dialects expose; see :class:`EngineStats`): ``num_drafts`` counts
(request, verify step) pairs; ``verify_tokens`` counts ``a + 1`` per pair *as drawn* (before a
request's last chunk is cut at ``max_tokens``), so ``verify_tokens / num_drafts`` is the AL exactly;
``generation_tokens`` counts tokens actually emitted (first tokens from prefill included), equal to
the sum of the responses' ``usage.completion_tokens``.

Step log (``--step-log``): one JSON line per verify step, ``{"step", "time_ns", "k", "requests",
"accepted"}``; ``time_ns`` is ``time.perf_counter_ns()`` at the end of the step (CLOCK_MONOTONIC on
Linux, so comparable with ``time.monotonic_ns()`` taken by another process on the same host).

At ``--time-scale 0`` the server leaves Nagle's algorithm on for streams (the kernel may coalesce
several SSE events into one TCP segment; timing carries no meaning there) and flushes with
``TCP_NODELAY`` before a response's last chunk.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import random
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import orjson

from alflow.acceptance.synthetic import AcceptanceSampler
from alflow.sim.acceptance import NaturalAcceptance, draw_natural, synthetic_sampler
from alflow.sim.config import SimConfig
from alflow.sim.profiles import Profile, get_profile
from alflow.sim.stats import EngineStats

log = logging.getLogger(__name__)

_DONE = b"data: [DONE]\n\n"


@dataclass(eq=False)
class SimRequest:
    """One request inside the engine (built by the server, driven by the step loop)."""

    rid: str
    prompt_tokens: int
    limit: int
    finish_reason: str
    stream: bool
    src: bytes
    offsets: list[int]
    pos: int
    prefix: bytes = b""
    suffix: bytes = b""
    frame_len: int = 0
    nagle_sock: Any = None
    draw: Callable[[], int] | None = None
    reasoning_left: int = 0
    reasoning_prefix: bytes = b""
    reasoning_mid: bytes = b""
    reasoning_parts: list[bytes] = field(default_factory=list)
    final_suffix: bytes = b""
    tail: Callable[[int], bytes] | None = None
    transport: asyncio.Transport | None = None
    chunked: bool = True
    temperature: float = 0.0
    rates: tuple[float, ...] = ()
    rng: random.Random | None = None
    stall_at: int | None = None
    stream_error_at: int | None = None
    parts: list[bytes] = field(default_factory=list)
    emitted: int = 0
    arrival_ns: int = 0
    last_ns: int = 0
    done: asyncio.Future[None] | None = None
    error: str | None = None
    finished: bool = False
    hist: list[int] = field(default_factory=list)
    """This request's verify steps by accepted drafts (``hist[a]``); summed into the stats when it finishes."""
    steps: list[int] | None = None
    """Accepted drafts of each verify step, in order (vLLM's ``detailed`` per-request metrics); None: not kept."""
    drafted: list[int] | None = None
    """Drafts proposed at each verify step, in order (kept with ``steps``)."""
    draft_tokens: int = 0
    """Drafts proposed over all its verify steps (K each, fewer on a short-draft step)."""


class SimEngine:
    """Continuous-batching step loop over :class:`SimRequest` objects (see the module docstring)."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.k = config.k
        self.profile: Profile = get_profile(config.profile)
        if config.multi_node and config.node_parallel == "tp":
            # one model across the nodes: the group's bandwidth and FLOPs, plus the inter-node cost
            self.profile = self.profile.across_nodes(config.nnodes)
        self.stats = EngineStats(k=config.k)
        self.waiting: collections.deque[SimRequest] = collections.deque()
        self.running: list[SimRequest] = []
        self.stalled: set[SimRequest] = set()
        self.sampler: AcceptanceSampler | None = None
        if config.synthetic:
            self.sampler = synthetic_sampler(
                config.scheme, config.k, config.synthetic_al, config.synthetic_rates, config.seed
            )
        # per-request schemes (vLLM, TensorRT-LLM): each request draws from its own seeded stream, so a
        # request's accept lengths do not depend on what else is in the batch; per-batch (SGLang): one
        # engine-level draw per step
        self.per_request = self.sampler is not None and self.sampler.granularity == "per-request"
        self.natural = NaturalAcceptance(config.method, config.k, config.acceptance_quality, config.seed)
        self._short = (
            random.Random(config.seed + 0x5D) if config.short_draft_share > 0 and config.k > 1 else None
        )
        """Draws which steps propose fewer than K drafts (``--short-draft-share``); None: every step proposes K."""
        self.record_iterations = False
        """Keep per-iteration stats (the server sets it for a dialect that serves them: TensorRT-LLM's)."""
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self.failed: Exception | None = None
        self._admitted: list[SimRequest] = []
        self._last_end = 0.0
        self._log: IO[bytes] | None = None
        self._step = 0
        self._context_tokens = 0
        self._prev_step_ns = 0
        if config.step_log is not None:
            self._log = Path(config.step_log).open("ab")  # noqa: SIM115 - closed in stop()

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> None:
        """Start the step loop on the running event loop."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name="alflow-sim-engine")

    async def stop(self) -> None:
        """Stop the step loop, abort what is left, close the step log."""
        self._closed = True
        self._wakeup.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for req in [*self.running, *self._admitted, *self.waiting, *self.stalled]:
            self._finish(req, "abort")
        if self._log is not None:
            self._log.close()
            self._log = None

    def request_draw(self, seed: int) -> Callable[[], int] | None:
        """A request's own draw of accepted drafts for per-request synthetic schemes (None otherwise).

        It is the acceptance package's sampler for the scheme, seeded for this request; its one-draw
        function is called directly when the sampler exposes it (``draw_one`` and ``rng``), which
        saves a list per draw on the hot path.
        """
        if not self.per_request:
            return None
        cfg = self.config
        smp = synthetic_sampler(cfg.scheme, cfg.k, cfg.synthetic_al, cfg.synthetic_rates, seed)
        draw_one, rng = getattr(smp, "draw_one", None), getattr(smp, "rng", None)
        if callable(draw_one) and isinstance(rng, random.Random):
            return functools.partial(draw_one, rng)
        return lambda: smp.draw_step(1)[0]

    def submit(self, req: SimRequest) -> None:
        """Queue a request; the step loop admits it when a slot is free."""
        req.done = asyncio.get_running_loop().create_future()
        req.hist = [0] * (self.k + 1)
        if self.config.per_request_spec_decode_metrics == "detailed":
            req.steps = []
            req.drafted = []
        req.frame_len = len(req.prefix) + len(req.suffix)
        req.arrival_ns = time.perf_counter_ns()
        self.stats.requests_received += 1
        self.stats.prompt_tokens += req.prompt_tokens
        self.waiting.append(req)
        self.stats.num_waiting = len(self.waiting)
        self._wakeup.set()

    def abort(self, req: SimRequest) -> None:
        """Remove a request whose client went away (or whose handler was cancelled)."""
        if req.finished:
            return
        if req in self.stalled:
            self.stalled.discard(req)
        with contextlib.suppress(ValueError):
            self.waiting.remove(req)
        self._finish(req, "abort")
        self.stats.num_waiting = len(self.waiting)
        self.stats.num_running = len(self.running) + len(self.stalled)
        self._wakeup.set()  # a slot may have been freed

    # ---------------------------------------------------------------- loop

    async def _run(self) -> None:
        try:
            while not self._closed:
                free = self.config.max_num_seqs - len(self.running) - len(self.stalled)
                if not self.running and not (self.waiting and free > 0):
                    self._last_end = 0.0  # idle: the next step starts from "now", not the old timeline
                    self._wakeup.clear()
                    await self._wakeup.wait()
                    continue
                await self._one_step()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # like a real engine death: /health turns 503 and every request in flight fails
            log.exception("engine step loop failed")
            self.failed = exc
            for req in [*self.running, *self._admitted, *self.waiting, *self.stalled]:
                if req.stream and req.done is not None and req.emitted > 0:
                    self._stream_error(req, f"the engine has failed: {exc}")
                req.error = f"engine failed: {exc}"
                self._finish(req, "abort")

    async def _one_step(self) -> None:
        cfg = self.config
        admitted: list[SimRequest] = []
        free = cfg.max_num_seqs - len(self.running) - len(self.stalled)
        while self.waiting and free > 0:
            req = self.waiting.popleft()
            if req.finished:
                continue
            admitted.append(req)
            free -= 1
        self._admitted = admitted  # not yet running: the failure path must see them too
        decode = [r for r in self.running if not r.finished]
        if cfg.time_scale > 0:
            prefill = sum(r.prompt_tokens for r in admitted)
            dt = (
                self.profile.step_s(len(decode), self.k, self._context_tokens, prefill, cfg.method)
                * cfg.time_scale
            )
            now = time.monotonic()
            # a busy engine keeps a continuous timeline, so sleep overshoot and scheduling hiccups do
            # not accumulate (it catches up); after idling, or when hopelessly behind, it restarts at now
            start = self._last_end if self._last_end and now - self._last_end < 1.0 else now
            end = start + dt
            self._last_end = end
            await asyncio.sleep(max(0.0, end - now))
        else:
            await asyncio.sleep(0)
        now_ns = time.perf_counter_ns()
        survivors: list[SimRequest] = []
        if decode:
            self._verify(decode, now_ns, survivors)
        for req in admitted:
            if req.finished:
                continue
            self._emit(req, 1, now_ns, first=True)
            if not req.finished and req.done is not None:
                if req.stall_at is not None and req.emitted >= req.stall_at:
                    self.stalled.add(req)
                else:
                    survivors.append(req)
        self.running = survivors
        self._context_tokens = sum(r.prompt_tokens + r.emitted for r in survivors)
        st = self.stats
        st.num_running = len(survivors) + len(self.stalled)
        st.num_waiting = len(self.waiting)

    def _drafts(self) -> int:
        """The drafts one request proposes at one step: K, or 1..K-1 on a short-draft step (``--short-draft-share``)."""
        short = self._short
        if short is not None and short.random() < self.config.short_draft_share:
            return short.randint(1, self.k - 1)
        return self.k

    def _verify(self, decode: list[SimRequest], now_ns: int, survivors: list[SimRequest]) -> None:
        k = self.k
        n = len(decode)
        if self.per_request:
            draws = [r.draw() if r.draw is not None else 0 for r in decode]
        elif self.sampler is not None:
            draws = self.sampler.draw_step(n)
        else:
            draws = [draw_natural(r.rates, r.rng) if r.rng is not None else 0 for r in decode]
        st = self.stats
        hist = st.accept_hist
        accepted = 0
        drafted_total = 0
        emit = self._emit
        stalled = self.stalled
        for req, drawn in zip(decode, draws, strict=True):
            d = self._drafts()
            a = min(drawn, d)  # a step accepts at most the drafts it proposed
            hist[a] += 1
            req.hist[a] += 1
            req.draft_tokens += d
            drafted_total += d
            if req.steps is not None and req.drafted is not None:
                req.steps.append(a)
                req.drafted.append(d)
            accepted += a
            if req.finished:
                continue
            emit(req, a + 1, now_ns, first=False)
            if not req.finished:
                if req.stall_at is not None and req.emitted >= req.stall_at:
                    stalled.add(req)
                else:
                    survivors.append(req)
        st.num_drafts += n
        st.draft_tokens += drafted_total
        st.accepted_tokens += accepted
        st.verify_tokens += accepted + n
        st.verify_steps += 1
        st.window_drafts += n
        st.window_tokens += accepted + n
        step_al = 1.0 + accepted / n
        st.last_step_al = step_al
        if st.verify_steps % self.config.sglang_window_steps == 0:
            st.window_al = st.window_tokens / st.window_drafts
            st.window_rate = (st.window_tokens - st.window_drafts) / (st.window_drafts * k)
            st.window_drafts = st.window_tokens = 0
        self._step += 1
        if self.record_iterations:
            st.iterations.append(
                {
                    "iter": self._step,
                    "iterLatencyMS": (now_ns - self._prev_step_ns) / 1e6 if self._prev_step_ns else 0.0,
                    "timestamp": time.time(),
                    "numActiveRequests": n,
                    "numQueuedRequests": len(self.waiting),
                    "maxNumActiveRequests": self.config.max_num_seqs,
                    "specDecodingStats": {
                        "numDraftTokens": n * k,
                        "numAcceptedTokens": accepted,
                        "numRequestsWithDraftTokens": n,
                        "acceptanceLength": step_al,
                    },
                }
            )
        self._prev_step_ns = now_ns
        if self._log is not None:
            self._log.write(
                orjson.dumps(
                    {
                        "step": self._step,
                        "time_ns": now_ns,
                        "k": k,
                        "requests": [r.rid for r in decode],
                        "accepted": draws,
                    }
                )
                + b"\n"
            )
            self._log.flush()

    def _emit(self, req: SimRequest, n: int, now_ns: int, *, first: bool) -> None:
        """Emit ``n`` tokens of ``req`` (cut at its limit) as one chunk; finish it at the limit."""
        remaining = req.limit - req.emitted
        last = n >= remaining
        if last:
            n = remaining
        if req.stream_error_at is not None and req.emitted + n >= req.stream_error_at:
            self._stream_error(req)
            return
        if req.reasoning_left > 0:
            self._emit_reasoning(req, n, now_ns, first=first, last=last)
            return
        frag = _take(req, n)
        self._count_emitted(req, n, now_ns, first=first)
        if req.stream:
            transport = req.transport
            if transport is None or transport.is_closing():
                self._finish(req, "abort")
                return
            if not last and req.chunked:
                # the hot path: one pre-framed HTTP chunk, one formatting operation
                transport.write(
                    b"%x\r\n%b%b%b\r\n" % (req.frame_len + len(frag), req.prefix, frag, req.suffix)
                )
            else:
                _write(req, req.prefix + frag + (_ending(req) if last else req.suffix))
        else:
            req.parts.append(frag)
        if last:
            self._finish(req, req.finish_reason)

    def _count_emitted(self, req: SimRequest, n: int, now_ns: int, *, first: bool) -> None:
        """``n`` more tokens emitted at ``now_ns``: the generation counter and the TTFT or inter-token latency."""
        req.emitted += n
        st = self.stats
        st.generation_tokens += n
        if first:
            st.ttft.observe((now_ns - req.arrival_ns) / 1e9)
        else:
            st.itl.observe((now_ns - req.last_ns) / 1e9)
        req.last_ns = now_ns

    def _emit_reasoning(self, req: SimRequest, n: int, now_ns: int, *, first: bool, last: bool) -> None:
        """The slow path while a request is still "thinking": reasoning (and maybe content) events."""
        n_reason = min(n, req.reasoning_left)
        req.reasoning_left -= n_reason
        rfrag = _take(req, n_reason)
        cfrag = _take(req, n - n_reason) if n > n_reason else b""
        self._count_emitted(req, n, now_ns, first=first)
        if not req.stream:
            req.reasoning_parts.append(rfrag)
            if cfrag:
                req.parts.append(cfrag)
        else:
            transport = req.transport
            if transport is None or transport.is_closing():
                self._finish(req, "abort")
                return
            body = req.reasoning_prefix + rfrag
            if req.reasoning_mid:
                body += req.reasoning_mid + rfrag
            body += req.suffix
            if last:
                body += req.prefix + cfrag + _ending(req)
            elif cfrag:
                body += req.prefix + cfrag + req.suffix
            _write(req, body)
        if last:
            self._finish(req, req.finish_reason)

    def _stream_error(
        self, req: SimRequest, message: str = "simulated error inside the stream (--stream-error-rate)"
    ) -> None:
        error = {"error": {"message": message, "type": "InternalServerError", "param": None, "code": 500}}
        body = b"data: " + orjson.dumps(error) + b"\n\n" + _DONE
        req.error = "stream error"
        _flush(req)
        if req.stream and req.transport is not None and not req.transport.is_closing():
            _write(req, body)
        self._finish(req, "abort")

    def _finish(self, req: SimRequest, reason: str) -> None:
        if req.finished:
            return
        req.finished = True
        st = self.stats
        st.requests_finished[reason] = st.requests_finished.get(reason, 0) + 1
        # request-level counters move now, as SGLang's and TensorRT-LLM's do at a request's end
        st.finished_requests += 1
        st.finished_output_tokens += req.emitted
        for a, n in enumerate(req.hist):
            st.finished_hist[a] += n
        if reason != "abort":
            st.e2e.observe((time.perf_counter_ns() - req.arrival_ns) / 1e9)
        else:
            req.error = req.error or "aborted"
        if req.done is not None and not req.done.done():
            req.done.set_result(None)


def _flush(req: SimRequest) -> None:
    """Send what is buffered now (TCP_NODELAY): no delayed-ACK wait at the end of a response."""
    if req.nagle_sock is not None:
        with contextlib.suppress(OSError):
            req.nagle_sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _ending(req: SimRequest) -> bytes:
    """A stream's last bytes after its last text: the finish, the tail (usage, metrics) and ``[DONE]`` (flushed)."""
    _flush(req)
    return req.final_suffix + (req.tail(req.emitted) if req.tail is not None else b"") + _DONE


def _write(req: SimRequest, body: bytes) -> None:
    """Write ``body`` to the request's transport (one HTTP chunk when chunked)."""
    assert req.transport is not None
    req.transport.write(b"%x\r\n%b\r\n" % (len(body), body) if req.chunked else body)


def _take(req: SimRequest, n: int) -> bytes:
    """The next ``n`` tokens of the request's pre-escaped text (wrapping around the source)."""
    pos = req.pos
    off = req.offsets
    size = len(off) - 1
    end = pos + n
    if end <= size:
        req.pos = end if end < size else 0
        return req.src[off[pos] : off[end]]
    wrap = end - size
    req.pos = wrap
    return req.src[off[pos] :] + req.src[: off[wrap]]
