"""Run GSM8K against a server through the load generator, with the synthetic-acceptance guard.

Accuracy means nothing with synthetic acceptance on (the server emits forced drafts, DOMAIN.md
section 3), so the evaluator refuses such a server: from what the caller knows of the launch
(``synthetic=True``) and from what the server reports about itself where it does (``/version``
and ``/server_info``: vLLM's config dump in dev mode, SGLang's server args, the sim's settings).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from alflow.errors import AlflowError, InvalidInputError
from alflow.evals.gsm8k import (
    EvalResult,
    PromptConfig,
    build_sessions,
    read_problems,
    score_reply,
    select_subset,
)
from alflow.loadgen.client import auth_headers
from alflow.loadgen.endpoints import Sampling
from alflow.loadgen.records import RequestRecord
from alflow.loadgen.runner import run_load
from alflow.loadgen.spec import DEFAULT_STALL_TIMEOUT_S, LoadAbortedError, LoadSpec, Target
from alflow.plugins import is_set, plugin_of, usable_names
from alflow.util.httpread import MAX_API_BYTES, read_bounded
from alflow.util.names import shown
from alflow.util.redact import redact_url, redact_urls_in_text

PROBE_PATHS = ("/version", "/server_info")
MAX_REFUSAL_CHARS = 200
"""How much of a server's refusal (an HTTP 4xx answer to every question) the error line quotes."""


class SyntheticAcceptanceOnError(AlflowError):
    """The server under evaluation forces acceptance: its replies are not the model's."""


def bundled_gsm8k(split: str) -> Path:
    """Path of the GSM8K split shipped with alflow (MIT licence beside it)."""
    if split not in ("test", "train"):
        raise InvalidInputError(f"GSM8K split {split!r} is not shipped; use 'test' or 'train'")
    return Path(str(resources.files("alflow.evals") / "data" / "gsm8k" / f"{split}.jsonl"))


def synthetic_evidence(info: Any, path: str = "") -> str | None:
    """Where a server's self-description shows synthetic acceptance switched on, or None.

    The keys are every framework plugin's ``synthetic_markers`` (vLLM's speculative-config keys, SGLang's and
    TensorRT-LLM's environment variables, ATOM's arguments), plus ``synthetic_acceptance`` (alflow's own engines);
    text is searched for vLLM's ``rejection_sample_method`` in either quoting.
    """
    markers: dict[str, Callable[[object], bool]] = {}
    for name in usable_names():  # read through the spec: this package never imports the registry
        markers.update(getattr(plugin_of(name), "synthetic_markers", {}))
    return _evidence(info, path, markers)


def _evidence(info: Any, path: str, markers: Mapping[str, Callable[[object], bool]]) -> str | None:
    if isinstance(info, Mapping):
        for key, value in info.items():
            here = f"{path}.{key}" if path else str(key)
            test = markers.get(key, is_set if key == "synthetic_acceptance" else None)
            if test is not None and test(value):
                return here
            found = _evidence(value, here, markers)
            if found:
                return found
    elif isinstance(info, list):
        for i, item in enumerate(info):
            found = _evidence(item, f"{path}[{i}]", markers)
            if found:
                return found
    elif isinstance(info, str) and any(
        marker in info
        for marker in ("rejection_sample_method='synthetic'", '"rejection_sample_method": "synthetic"')
    ):
        return path or "text"
    return None


async def probe_synthetic(
    base_url: str, timeout_s: float = 10.0, headers: Mapping[str, str] | None = None
) -> str | None:
    """Ask the server about itself; return where it reports synthetic acceptance, else None.

    ``headers`` carry the API key (SGLang's ``--api-key`` guards ``/server_info``).
    """
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        for path in PROBE_PATHS:
            url = base_url.rstrip("/") + path
            try:
                async with http.get(url, headers=headers) as resp:
                    if resp.status != 200:
                        continue
                    body = await read_bounded(resp, MAX_API_BYTES, f"GET {shown(redact_url(url))}")
            except aiohttp.ClientError:
                continue
            except (
                TimeoutError
            ):  # a server that takes the connection and never answers (round 14): not a traceback
                raise InvalidInputError(
                    f"--base-url {shown(redact_url(base_url))}: no answer within {timeout_s:g} s (asked {path} "
                    "about synthetic acceptance)"
                ) from None
            try:
                info = orjson.loads(body)
            except orjson.JSONDecodeError:
                continue
            found = synthetic_evidence(info)
            if found:
                return f"{path}: {found}"
    return None


def _check_answered(records: Iterable[RequestRecord], where: str, timeout_s: float) -> None:
    """An error when no question got an answer: a dead server is no accuracy verdict (round 15: "accuracy 0").

    Said as what happened: a request the server refused (HTTP 4xx: a ``--temperature`` it does not take) is its
    status and the start of its error answer; a timeout is the ``--timeout``; anything else the first failure.
    """
    sent = list(records)
    if any(r.error is None for r in sent):
        return
    tally = f"{len(sent)} of {len(sent)} requests failed"
    refused = next((r for r in sent if r.http_status is not None and 400 <= r.http_status < 500), None)
    if refused is not None:
        status = refused.http_status
        answer = (refused.error or "").partition(f"answered HTTP {status}: ")[2]
        answer = redact_urls_in_text(answer)[:MAX_REFUSAL_CHARS].strip()  # redacted whole, then cut
        raise AlflowError(
            f"{where}: the server answered {status}: {answer or '(no text)'} ({tally}); no scores"
        )
    first = next((r.error for r in sent if r.error), "no request was sent")
    if first.startswith("timed out"):
        raise AlflowError(
            f"{where}: no answer to any question within --timeout {timeout_s:g} s ({tally}; the first: {first}); "
            "no scores"
        )
    raise AlflowError(f"{where}: no question was answered ({tally}; the first: {first}); no scores")


@dataclass(frozen=True)
class Gsm8kRequest:
    """Everything one GSM8K evaluation needs."""

    base_url: str
    model: str
    test_path: Path | None = None
    train_path: Path | None = None
    prompt: PromptConfig = field(default_factory=PromptConfig)
    limit: int | None = None
    concurrency: int = 64
    temperature: float = 0.0
    top_p: float | None = None
    top_k: int | None = None
    chat_template_kwargs: Mapping[str, Any] | None = None
    timeout_s: float = 600.0
    """Each question's bound (``eval gsm8k --timeout``), as ``bench --timeout``."""
    stall_timeout_s: float | None = DEFAULT_STALL_TIMEOUT_S
    """The run ends when no open stream got an event for this long (``--stall-timeout``; None: off), as in bench."""
    synthetic: bool | None = None
    check_server: bool = True
    api_key: str | None = field(default=None, repr=False)
    """Sent as ``Authorization: Bearer <key>`` with the probes and every question (never shown or stored)."""


async def evaluate_gsm8k(request: Gsm8kRequest) -> EvalResult:
    """Ask every (or a seeded subset of) GSM8K question and score the replies."""
    if request.synthetic:
        raise SyntheticAcceptanceOnError(
            f"refusing to evaluate accuracy on {redact_url(request.base_url)}: its launch has synthetic acceptance on, "
            "so replies are forced drafts, not the model's output; start it with synthetic acceptance off"
        )
    if request.check_server:
        found = await probe_synthetic(request.base_url, headers=auth_headers(request.api_key))
        if found:
            raise SyntheticAcceptanceOnError(
                f"refusing to evaluate accuracy on {redact_url(request.base_url)}: the server reports synthetic "
                f"acceptance on ({found}); start it with synthetic acceptance off"
            )
    test_path = request.test_path or bundled_gsm8k("test")
    train_path = request.train_path or bundled_gsm8k("train")
    population = read_problems(test_path, split="test")
    problems = select_subset(population, request.limit, request.prompt.seed)
    shots = read_problems(train_path, split="train") if request.prompt.num_shots else []
    sessions = build_sessions(problems, shots, request.prompt)
    sampling = Sampling(
        max_tokens=request.prompt.max_tokens,
        temperature=request.temperature,
        top_p=request.top_p,
        top_k=request.top_k,
        chat_template_kwargs=request.chat_template_kwargs,
    )
    started = time.perf_counter()
    spec = LoadSpec(
        concurrency=request.concurrency,
        num_prompts=len(sessions),
        timeout_s=request.timeout_s,
        stall_timeout_s=request.stall_timeout_s,
    )
    where = f"--base-url {shown(redact_url(request.base_url))}"
    try:
        load = await run_load(
            sessions, Target(request.base_url, request.model, "chat", sampling, api_key=request.api_key), spec
        )
    except (
        LoadAbortedError
    ) as exc:  # a stalled server (round 15): no accuracy verdict of questions not answered
        raise AlflowError(f"{where}: {exc}; no scores") from None
    by_id = {r.session_id: r for r in load.records if not r.warmup}
    _check_answered(by_id.values(), where, request.timeout_s)
    results = []
    for problem in problems:
        record = by_id.get(problem.problem_id)
        if record is None:
            results.append(score_reply(problem, None, "no request was sent"))
        else:
            results.append(score_reply(problem, record.text, record.error))
    notes = []
    if request.limit is not None and len(problems) < len(population):
        notes.append(
            f"seeded subset: {len(problems)} of {len(population)} questions (seed {request.prompt.seed})"
        )
    return EvalResult(
        model=request.model,
        results=tuple(results),
        num_shots=request.prompt.num_shots,
        seed=request.prompt.seed,
        limit=request.limit,
        population=len(population),
        duration_s=time.perf_counter() - started,
        notes=tuple(notes),
    )
