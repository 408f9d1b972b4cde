"""Random-token prompts with fixed input and output lengths (the non-speculative reference setup).

Input length is drawn uniformly in ``[ISL * range_ratio, ISL]`` (DOMAIN.md section 5), output
length is fixed at OSL with ``ignore_eos`` and ``min_tokens = max_tokens = OSL``. Prompts are
token-id lists for the completions endpoint; for the chat endpoint :func:`detokenize_sessions`
turns them into text through the server's ``/detokenize`` (vLLM style), and the chat endpoint wraps
that text in the model's chat template (without the template, AL is inflated). Everything is
reproducible from ``seed``.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import replace

import aiohttp
import orjson

from alflow.datasets.types import Session, Turn
from alflow.errors import AlflowError, InvalidInputError
from alflow.util.httpread import MAX_API_BYTES, read_bounded
from alflow.util.redact import redact_url, redact_urls_in_text

DEFAULT_VOCAB_SIZE = 20_000
"""Token ids are drawn below this by default: it fits every common model's vocabulary and the simulator's
(about 20,600 ids), so ``alflow bench --dataset random`` works against ``alflow sim serve`` as it is and
sends the same kind of prompts as M2's :class:`alflow.config.RandomWorkload`."""
DEFAULT_TOKEN_LOW = 100
_POOL_MAX = 1 << 18
"""Token ranges up to this size share one int object per id across prompts (:func:`random_sessions`)."""


def random_sessions(
    num_prompts: int,
    *,
    isl: int,
    osl: int,
    range_ratio: float = 0.8,
    seed: int = 0,
    vocab_size: int = DEFAULT_VOCAB_SIZE,
    token_low: int = DEFAULT_TOKEN_LOW,
) -> list[Session]:
    """``num_prompts`` single-turn sessions of random token ids in ``[token_low, vocab_size)``."""
    if num_prompts < 1:
        raise InvalidInputError(f"num_prompts={num_prompts} must be at least 1")
    if isl < 1 or osl < 1:
        raise InvalidInputError(f"isl={isl} and osl={osl} must both be at least 1")
    if not 0.0 < range_ratio <= 1.0:
        raise InvalidInputError(f"range_ratio={range_ratio} must be in (0, 1]")
    if not 0 <= token_low < vocab_size:
        raise InvalidInputError(f"token range [{token_low}, {vocab_size}) is empty")
    rng = random.Random(seed)
    low_len = max(1, math.ceil(isl * range_ratio))
    span = vocab_size - token_low
    # one int object per token id, shared by every prompt: a prompt then costs a pointer per token, not a new int
    # (10,240 prompts of ~920 tokens: 80 MB instead of 364 MB, measured); the same draws as randrange(token_low, vocab_size)
    pool = list(range(token_low, vocab_size)) if span <= _POOL_MAX else None
    sessions: list[Session] = []
    for i in range(num_prompts):
        n = rng.randint(low_len, isl)
        if pool is not None:
            ids = tuple([pool[rng.randrange(span)] for _ in range(n)])
        else:
            ids = tuple([token_low + rng.randrange(span) for _ in range(n)])
        turn = Turn(prompt=ids, max_tokens=osl, min_tokens=osl, ignore_eos=True, input_tokens_hint=n)
        sessions.append(Session(session_id=f"random-{seed}-{i}", turns=(turn,), category="random"))
    return sessions


_COMMON_WORDS = (
    "the of and to in is it that for on was with as be at by this had not are but from or have an they "
    "which one you were her all she there would their we him been has when who will more no if out so "
    "said what up its about into than them can only other new some could time these two may then do first "
    "any my now such like our over man me even most made after also did many before must through back "
    "years where much your way well down should because each just those people how too little state good "
    "very make world still own see men work long get here between both life being under never day same "
    "another know while last might us great old year off come since against go came right used take three"
)
TEXT_WORDS: tuple[str, ...] = tuple(_COMMON_WORDS.split())
"""Common English words, each one token in the BPE vocabularies of the models benchmarked (a leading space makes
``" the"`` one token): a random prompt as text for a server whose completions endpoint takes text only."""


def as_text_sessions(sessions: Sequence[Session]) -> list[Session]:
    """``sessions`` with each token-id prompt as text: token id ``t`` becomes word ``t mod len(TEXT_WORDS)``.

    For a framework whose ``/v1/completions`` takes a string prompt only and has no ``/detokenize`` (ATOM): the
    prompt keeps its length in words (about that many tokens: :data:`TEXT_WORDS`) and its randomness; the server's
    ``usage.prompt_tokens`` records what its tokenizer made of it.
    """
    out: list[Session] = []
    for session in sessions:
        turns = tuple(
            replace(turn, prompt=" ".join(TEXT_WORDS[t % len(TEXT_WORDS)] for t in turn.prompt))
            if not isinstance(turn.prompt, str)
            else turn
            for turn in session.turns
        )
        out.append(replace(session, turns=turns))
    return out


async def detokenize_sessions(
    sessions: Sequence[Session],
    base_url: str,
    model: str,
    *,
    timeout_s: float = 60.0,
    parallel: int = 16,
    headers: Mapping[str, str] | None = None,
) -> list[Session]:
    """Replace token-id prompts by their text via the server's ``POST /detokenize``.

    ``headers`` go with every request (the API key's ``Authorization``); error texts carry the URL
    without credentials.
    """
    url = base_url.rstrip("/") + "/detokenize"
    shown = redact_url(url)
    sem = asyncio.Semaphore(parallel)
    send = {"Content-Type": "application/json", **(headers or {})}

    async def one(http: aiohttp.ClientSession, turn: Turn) -> Turn:
        if isinstance(turn.prompt, str):
            return turn
        body = orjson.dumps({"model": model, "tokens": list(turn.prompt)})
        async with sem, http.post(url, data=body, headers=send) as resp:
            if resp.status != 200:
                text = redact_urls_in_text((await resp.content.read(200)).decode(errors="replace"))
                raise AlflowError(
                    f"POST {shown} answered HTTP {resp.status}: {text} (random prompts for the chat endpoint are "
                    "detokenized by the server; use --endpoint completions to send token ids)"
                )
            raw = await read_bounded(resp, MAX_API_BYTES, f"POST {shown}")
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError:  # a proxy's login page, an event stream
            data = None
        prompt = data.get("prompt") if isinstance(data, dict) else None
        if not isinstance(prompt, str):
            raise AlflowError(f"POST {shown} returned no JSON object with a 'prompt' string")
        return replace(turn, prompt=prompt)

    timeout = aiohttp.ClientTimeout(total=timeout_s)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as http:
            turns = await asyncio.gather(
                *(asyncio.gather(*(one(http, t) for t in s.turns)) for s in sessions)
            )
            return [replace(s, turns=tuple(t)) for s, t in zip(sessions, turns, strict=True)]
    except TimeoutError:
        raise AlflowError(
            f"could not detokenize random prompts at {shown}: no answer within {timeout_s:g} s"
        ) from None
    except aiohttp.ClientError as exc:
        why = redact_urls_in_text(str(exc) or type(exc).__name__)
        raise AlflowError(f"could not detokenize random prompts at {shown}: {why}") from None
