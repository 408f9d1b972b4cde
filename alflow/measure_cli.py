"""Measurement commands: ``alflow bench`` and ``alflow metrics snapshot``.

``register(app)`` adds them to a Typer app (the root ``alflow`` command calls it). Errors in the
user's input are one line on stderr (``error: ...``) with exit code 2; a run with failed requests
still writes its outputs, then says how many failed and exits with code 1.

``alflow bench`` streams a workload (SPEED-Bench, GSM8K or random tokens) at a server, scrapes its
Prometheus metrics before (after warm-up) and after the measured phase and in the background, and
reports client metrics (keys as ``vllm bench serve``) plus the server's spec-decode statistics.
With ``--out DIR`` it writes ``records.parquet``, ``snapshots.json`` and ``summary.json``; records
are written even when the run is aborted.

``--api-key`` (default: ``$OPENAI_API_KEY``) goes to the server as ``Authorization: Bearer <key>``
with every request (streams, ``/v1/models``, ``/detokenize``, SGLang's server info) and nowhere else:
it is never written or printed. URLs are stored and printed without credentials
(:func:`alflow.redact.redact_url`), error messages included.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import sys
import time
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, TypeVar, cast
from urllib.parse import urlparse

import aiohttp
import orjson
import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from alflow import jsonutil
from alflow.acceptance.stats import SpecStats
from alflow.acceptance.synthetic import K_MAX, K_MIN
from alflow.datasets.custom import DEFAULT_MAX_TOKENS, load_custom
from alflow.datasets.gsm8k import load_gsm8k
from alflow.datasets.random_tokens import (
    DEFAULT_TOKEN_LOW,
    DEFAULT_VOCAB_SIZE,
    detokenize_sessions,
    random_sessions,
)
from alflow.datasets.speed_bench import load_speed_bench
from alflow.datasets.types import Session
from alflow.errors import AlflowError, InvalidInputError
from alflow.loadgen.client import auth_headers
from alflow.loadgen.endpoints import Sampling
from alflow.loadgen.records import RequestRecord, write_records
from alflow.loadgen.runner import DEFAULT_STALL_TIMEOUT_S, LoadSpec, Target
from alflow.measure import measure
from alflow.metrics.client import SLO, GpuLayout, check_percentiles
from alflow.metrics.dialects import (
    Dialect,
    MissingMetricsError,
    candidate_metrics_urls,
    detect,
    get_dialect,
    sglang_server_info_al,
)
from alflow.metrics.prometheus import (
    PromQLWindow,
    ScrapeError,
    Snapshot,
    SnapshotWindow,
    scrape,
    scrape_all,
)
from alflow.redact import redact_data, redact_url, redact_urls_in_text
from alflow.workloads import file_sha256

log = logging.getLogger(__name__)
T = TypeVar("T")

_out = Console(soft_wrap=True)
_err = Console(stderr=True, soft_wrap=True)


class DatasetName(StrEnum):
    """Workloads ``alflow bench`` can send."""

    speed_bench = "speed-bench"
    gsm8k = "gsm8k"
    random = "random"
    custom = "custom"


class EndpointName(StrEnum):
    """OpenAI-compatible endpoints."""

    chat = "chat"
    completions = "completions"


class ArrivalName(StrEnum):
    """Arrival processes for ``--request-rate``."""

    poisson = "poisson"
    constant = "constant"


class TransportName(StrEnum):
    """Streaming HTTP clients."""

    fast = "fast"
    aiohttp = "aiohttp"


class Thinking(StrEnum):
    """Per-request thinking switch (``chat_template_kwargs``)."""

    default = "default"
    on = "on"
    off = "off"


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on uvloop's event loop when installed (about 1.5x less CPU per streamed chunk)."""
    try:
        import uvloop
    except ImportError:
        factory = None
    else:
        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(coro)


def _fail(message: str, code: int = 2, secrets: tuple[str | None, ...] = ()) -> typer.Exit:
    """Print ``error: message`` (URLs without credentials, ``secrets`` values masked) and exit with ``code``."""
    text = redact_urls_in_text(message, [s for s in secrets if s])
    _err.print(f"error: {text}", markup=False, highlight=False)
    return typer.Exit(code=code)


def _dumps(data: object) -> bytes:
    return jsonutil.dumps(data).encode()


class _RichProgress:
    """The load generator's progress sink on the terminal (stderr)."""

    def __init__(self, progress: Progress) -> None:
        self._p = progress
        self._task: Any = None

    def start(self, total: int | None, description: str) -> None:
        if self._task is not None:
            self._p.remove_task(self._task)
        self._task = self._p.add_task(description, total=total)

    def advance(self) -> None:
        if self._task is not None:
            self._p.advance(self._task)


@contextlib.contextmanager
def _progress(enabled: bool) -> Iterator[_RichProgress | None]:
    if not enabled:
        yield None
        return
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=_err, transient=True) as p:
        yield _RichProgress(p)


@dataclass
class _BenchArgs:
    base_url: str
    endpoint: str
    model: str | None
    dataset: DatasetName
    input_file: Path | None
    categories: list[str]
    isl: int
    osl: int
    range_ratio: float
    vocab_size: int
    num_shots: int
    shots_file: Path | None
    seed: int
    spec: LoadSpec
    sampling: Sampling
    max_tokens: int | None
    metrics_urls: list[str]
    dialect: str
    no_metrics: bool
    scrape_interval_s: float
    k: int | None
    prometheus_url: str | None
    prometheus_selector: str
    gpus: GpuLayout
    slo: SLO
    percentiles: list[float]
    out: Path | None
    progress: bool
    extra: dict[str, Any] = field(default_factory=dict)
    api_key: str | None = field(default=None, repr=False)

    @property
    def headers(self) -> dict[str, str]:
        """The API key's ``Authorization`` header (empty without a key)."""
        return auth_headers(self.api_key)


def _load_sessions(a: _BenchArgs, num_prompts: int) -> tuple[list[Session], list[Session] | None]:
    """The workload and, for random prompts, separate warm-up prompts (a different seed)."""
    if a.dataset is DatasetName.random:
        work = random_sessions(
            num_prompts, isl=a.isl, osl=a.osl, range_ratio=a.range_ratio, seed=a.seed, vocab_size=a.vocab_size
        )
        warm = (
            random_sessions(
                a.spec.warmup,
                isl=a.isl,
                osl=a.osl,
                range_ratio=a.range_ratio,
                seed=a.seed + 1_000_003,
                vocab_size=a.vocab_size,
            )
            if a.spec.warmup
            else None
        )
        return work, warm
    if a.input_file is None:
        raise InvalidInputError(f"--dataset {a.dataset.value} needs --input-file")
    if a.dataset is DatasetName.speed_bench:
        kwargs = {} if a.max_tokens is None else {"max_tokens": a.max_tokens}
        return load_speed_bench(a.input_file, categories=a.categories or None, **kwargs), None
    if a.categories:
        raise InvalidInputError("--category applies to --dataset speed-bench only")
    if a.dataset is DatasetName.custom:
        return load_custom(a.input_file, max_tokens=a.max_tokens), None
    kwargs2 = {} if a.max_tokens is None else {"max_tokens": a.max_tokens}
    return load_gsm8k(a.input_file, num_shots=a.num_shots, shots_path=a.shots_file, **kwargs2), None


async def _served_model(
    http: aiohttp.ClientSession, base_url: str, model: str | None, headers: dict[str, str]
) -> str:
    """Check the server answers; the model is ``model`` or the first of ``GET /v1/models``."""
    url = base_url.rstrip("/").removesuffix("/v1") + "/v1/models"
    shown = redact_url(url)
    try:
        async with http.get(url, timeout=aiohttp.ClientTimeout(total=30), headers=headers) as resp:
            status = resp.status
            raw = await resp.read()
    except (aiohttp.ClientError, TimeoutError) as exc:
        why = redact_urls_in_text(str(exc or type(exc).__name__))
        raise AlflowError(f"cannot reach {redact_url(base_url)}: {why}") from None
    if status in (401, 403):
        raise AlflowError(
            f"GET {shown} answered HTTP {status}: the server wants an API key "
            f"({'the one given was refused' if headers else 'give --api-key or set OPENAI_API_KEY'})"
        )
    if model is not None:
        return model
    if status != 200:
        raise AlflowError(f"GET {shown} answered HTTP {status}: give --model")
    try:
        return str(orjson.loads(raw)["data"][0]["id"])
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
        raise AlflowError(f"GET {shown} lists no model: give --model") from None


async def _resolve_metrics(
    http: aiohttp.ClientSession, a: _BenchArgs
) -> tuple[tuple[str, ...], Dialect] | None:
    """The metrics URLs and dialect, or None (with a warning) when the server exposes none.

    Several ``--metrics-url`` are one server's endpoints (nodes, data-parallel ranks): all must
    answer, and their counters are summed. Without one, the dialect's usual paths are tried.
    """
    if a.no_metrics:
        return None
    if a.metrics_urls:
        given = tuple(a.metrics_urls)
        snap = await scrape_all(given, session=http)
        return given, get_dialect(a.dialect) if a.dialect != "auto" else detect(snap)
    problems: list[str] = []
    for url in candidate_metrics_urls(a.base_url, a.dialect):
        try:
            snap = await scrape(url, session=http)
            dialect = get_dialect(a.dialect) if a.dialect != "auto" else detect(snap)
        except (ScrapeError, MissingMetricsError) as exc:
            problems.append(str(exc))
            continue
        return (url,), dialect
    _err.print(
        "warning: no spec-decode metrics found (" + "; ".join(problems) + "): server-side stats skipped",
        markup=False,
        highlight=False,
    )
    return None


def _stats_or_error(fn: Any, *args: Any, **kwargs: Any) -> tuple[SpecStats | None, str | None]:
    try:
        return fn(*args, **kwargs), None
    except AlflowError as exc:
        return None, str(exc)


async def _bench(a: _BenchArgs) -> tuple[dict[str, Any], bool]:
    """Run one benchmark; returns (summary, all requests ok)."""
    spec = a.spec
    num_prompts = spec.num_prompts or (10 * spec.concurrency if a.dataset is DatasetName.random else 0)
    sessions, warm = _load_sessions(a, num_prompts or 1)
    if spec.num_prompts is None and a.dataset is DatasetName.random and spec.duration_s is None:
        spec = replace(spec, num_prompts=num_prompts)
    sink: list[RequestRecord] = []
    async with aiohttp.ClientSession() as http:
        model = await _served_model(http, a.base_url, a.model, a.headers)
        target = Target(a.base_url, model, endpoint=a.endpoint, sampling=a.sampling, api_key=a.api_key)
        if a.endpoint == "chat" and any(not isinstance(t.prompt, str) for s in sessions for t in s.turns):
            sessions = await detokenize_sessions(sessions, a.base_url, model, headers=a.headers)
            if warm:
                warm = await detokenize_sessions(warm, a.base_url, model, headers=a.headers)
        metrics = await _resolve_metrics(http, a)
        try:
            with _progress(a.progress) as prog:
                m = await measure(
                    sessions,
                    target,
                    spec,
                    metrics_url=None if metrics is None else metrics[0],
                    dialect=None if metrics is None else metrics[1],
                    k=a.k,
                    warmup_sessions=warm,
                    scrape_interval_s=a.scrape_interval_s,
                    gpus=a.gpus,
                    slo=a.slo,
                    percentiles=a.percentiles,
                    progress=prog,
                    sink=sink,
                    session=http,
                )
        except BaseException:
            if a.out is not None:
                write_records(a.out / "records.parquet", sink)  # interrupted: keep what was recorded
            raise
        aborted = m.aborted
        spec_block: dict[str, Any] = {"dialect": None, "metrics_url": None}
        if metrics is not None and aborted is None:
            spec_block = {"metrics_url": " + ".join(metrics[0]), **m.spec_block()}
            if len(metrics[0]) > 1:
                spec_block["metrics_urls"] = list(metrics[0])
            if metrics[1].name == "sglang":
                with contextlib.suppress(AlflowError):
                    spec_block["sglang_server_info_avg_accept_length_lifetime"] = await sglang_server_info_al(
                        a.base_url, session=http, headers=a.headers
                    )
        snapshots = m.snapshots()
        if a.prometheus_url and aborted is None:
            window_p = PromQLWindow(
                a.prometheus_url, m.wall_start_s, time.time(), selector=a.prometheus_selector
            )
            dialect = (
                metrics[1]
                if metrics is not None
                else get_dialect(a.dialect if a.dialect != "auto" else "vllm")
            )
            stats_p, err_p = await asyncio.to_thread(_stats_or_error, dialect.spec_stats, window_p, k=a.k)
            spec_block["prometheus"] = {
                "url": a.prometheus_url,
                "stats": None if stats_p is None else stats_p.to_dict(),
                "error": err_p,
            }
    frame = m.records
    client = m.client
    summary = {
        **client,
        "model": model,
        "aborted": aborted,
        "spec_decode": spec_block,
        "config": {
            "base_url": a.base_url,
            "endpoint": a.endpoint,
            "dataset": a.dataset.value,
            "input_file": a.input_file,
            "input_sha256": file_sha256(a.input_file) if a.input_file is not None else None,
            "categories": a.categories,
            "concurrency": spec.concurrency,
            "request_rate": spec.request_rate,
            "arrival": spec.arrival,
            "num_prompts": spec.num_prompts,
            "duration_s": spec.duration_s,
            "warmup": spec.warmup,
            "isl": a.isl if a.dataset is DatasetName.random else None,
            "osl": a.osl if a.dataset is DatasetName.random else None,
            "range_ratio": a.range_ratio if a.dataset is DatasetName.random else None,
            "seed": a.seed,
            "sampling": _sampling_dict(a.sampling),
        },
    }
    # nothing stored or printed carries a credential: URLs lose theirs, the API key is masked anywhere
    summary = cast(dict[str, Any], redact_data(orjson.loads(_dumps(summary)), [a.api_key or ""]))
    if a.out is not None:
        a.out.mkdir(parents=True, exist_ok=True)
        write_records(a.out / "records.parquet", frame)
        (a.out / "snapshots.json").write_bytes(_dumps(snapshots))
        (a.out / "summary.json").write_bytes(_dumps(summary))
    if aborted is not None:
        raise AlflowError(aborted + (f" (partial records in {a.out / 'records.parquet'})" if a.out else ""))
    return summary, bool(client["all_ok"])


def _sampling_dict(s: Sampling) -> dict[str, Any]:
    out = {
        name: getattr(s, name)
        for name in ("max_tokens", "temperature", "top_p", "top_k", "min_tokens", "ignore_eos", "seed")
        if getattr(s, name) is not None
    }
    if s.chat_template_kwargs:
        out["chat_template_kwargs"] = dict(s.chat_template_kwargs)
    if s.extra_body:
        out["extra_body"] = dict(s.extra_body)
    return out


def _print_summary(s: dict[str, Any]) -> None:
    table = Table(title=f"alflow bench: {escape(str(s.get('model')))}", show_header=False)
    rows = [
        ("completed / failed", f"{s['completed']} / {s['failed']}"),
        ("duration (s)", f"{s['duration']:.3f}"),
        ("request throughput (req/s)", f"{s['request_throughput']:.3f}"),
        ("output throughput (tok/s)", f"{s['output_throughput']:.2f}"),
        ("total token throughput (tok/s)", f"{s['total_token_throughput']:.2f}"),
    ]
    for key, label in (
        ("ttft", "TTFT (ms)"),
        ("tpot", "TPOT (ms)"),
        ("itl", "ITL (ms)"),
        ("e2el", "E2E latency (ms)"),
    ):
        mean, med, p99 = s.get(f"mean_{key}_ms"), s.get(f"median_{key}_ms"), s.get(f"p99_{key}_ms")
        if mean is not None:
            rows.append((f"{label} mean / median / p99", f"{mean:.2f} / {med:.2f} / {p99:.2f}"))
    if s.get("median_interactivity_tokens_per_s") is not None:
        rows.append(("interactivity median (tok/s/user)", f"{s['median_interactivity_tokens_per_s']:.2f}"))
    if s.get("tokens_per_chunk_after_first") is not None:
        rows.append(("client tokens per chunk (after first)", f"{s['tokens_per_chunk_after_first']:.3f}"))
    spec = s.get("spec_decode") or {}
    stats = spec.get("stats")
    if stats and stats.get("al") is not None:
        rows.append((f"server AL ({spec['dialect']})", f"{stats['al']:.4f}  (drafts {stats['num_drafts']})"))
    elif spec.get("error"):
        rows.append(("server AL", f"unavailable: {spec['error']}"))
    for label, value in rows:
        table.add_row(label, Text(value))
    _out.print(table)


def _parse_floats(text: str, option: str) -> list[float]:
    try:
        return [float(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise InvalidInputError(f"{option} {text!r}: expected numbers separated by commas") from None


@dataclass(frozen=True)
class _Bound:
    """What an option allows: ``low`` (exclusive when ``open_low``) up to ``high`` (inclusive)."""

    low: float | None = None
    open_low: bool = False
    high: float | None = None

    def allows(self, value: float) -> bool:
        if not math.isfinite(value):
            return False
        if self.low is not None and (value <= self.low if self.open_low else value < self.low):
            return False
        return self.high is None or value <= self.high

    def describe(self, integer: bool) -> str:
        what = "an integer" if integer else "a finite number"
        if self.low is not None and self.high is not None:
            return f"{what} in {'(' if self.open_low else '['}{self.low:g}, {self.high:g}]"
        if self.low is not None:
            return f"{what} {'>' if self.open_low else '>='} {self.low:g}"
        return what


_AT_LEAST_1 = _Bound(1)
_NOT_NEGATIVE = _Bound(0)
_POSITIVE = _Bound(0, open_low=True)
_K_RANGE = _Bound(K_MIN, high=K_MAX)


def check_options(values: dict[str, tuple[float | None, _Bound]]) -> None:
    """Raise naming the first option whose value (None: not given) is outside what it allows."""
    for option, (value, bound) in values.items():
        if value is not None and not bound.allows(value):
            raise InvalidInputError(f"{option} {value:g}: must be {bound.describe(isinstance(value, int))}")


def check_out_dir(out: Path) -> None:
    """``--out`` must be a directory alflow can write that holds no earlier run (checked before any request)."""
    if out.exists() and not out.is_dir():
        raise InvalidInputError(f"--out {out}: is a file, not a directory")
    if out.is_dir():
        earlier = [name for name in _OUT_FILES if (out / name).exists()]
        if earlier:
            raise InvalidInputError(
                f"--out {out}: already holds a run ({', '.join(earlier)}); give a new directory or remove it"
            )
    existing = next(p for p in (out, *out.absolute().parents) if p.exists())
    if not existing.is_dir():
        raise InvalidInputError(f"--out {out}: {existing} is a file, so no directory can be made there")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise InvalidInputError(f"--out {out}: {existing} is not writable")


def _check_dialect(dialect: str) -> None:
    """``--dialect`` is ``auto`` or a known dialect (named in the error)."""
    if dialect != "auto":
        try:
            get_dialect(dialect)
        except InvalidInputError as exc:
            raise InvalidInputError(f"--dialect {dialect!r}: {exc}") from None


_OUT_FILES = ("records.parquet", "snapshots.json", "summary.json")


def bench(
    base_url: Annotated[str, typer.Option(help="Server base URL, e.g. http://127.0.0.1:8000.")],
    endpoint: Annotated[
        EndpointName, typer.Option(help="OpenAI endpoint to stream from.")
    ] = EndpointName.chat,
    model: Annotated[
        str | None, typer.Option(help="Served model name (default: the first of /v1/models).")
    ] = None,
    dataset: Annotated[DatasetName, typer.Option(help="Workload.")] = DatasetName.random,
    input_file: Annotated[
        Path | None,
        typer.Option(
            help="Dataset file: speed-bench or gsm8k JSONL, or custom JSONL (vllm bench serve's: 'prompt', "
            "optional 'output_tokens')."
        ),
    ] = None,
    category: Annotated[
        list[str] | None, typer.Option(help="SPEED-Bench category or entropy tier (repeatable).")
    ] = None,
    isl: Annotated[int, typer.Option(help="Random prompts: input length (tokens).")] = 1024,
    osl: Annotated[int, typer.Option(help="Random prompts: output length (tokens).")] = 1024,
    range_ratio: Annotated[
        float, typer.Option(help="Random prompts: input length drawn in [ISL*r, ISL].")
    ] = 0.8,
    vocab_size: Annotated[
        int, typer.Option(help="Random prompts: token ids drawn below this.")
    ] = DEFAULT_VOCAB_SIZE,
    num_shots: Annotated[int, typer.Option(help="GSM8K: few-shot examples from --shots-file.")] = 0,
    shots_file: Annotated[Path | None, typer.Option(help="GSM8K: train file for few-shot examples.")] = None,
    concurrency: Annotated[int, typer.Option(help="Most sessions in flight.")] = 1,
    request_rate: Annotated[
        float | None, typer.Option(help="Sessions per second (default: unlimited, capped by concurrency).")
    ] = None,
    arrival: Annotated[
        ArrivalName, typer.Option(help="Arrival process with --request-rate.")
    ] = ArrivalName.poisson,
    num_prompts: Annotated[
        int | None,
        typer.Option(help="Measured sessions (default: the dataset's rows; random: 10 x concurrency)."),
    ] = None,
    duration: Annotated[float | None, typer.Option(help="Measure for this many seconds instead.")] = None,
    warmup: Annotated[int, typer.Option(help="Warm-up sessions before the measured phase.")] = 0,
    timeout: Annotated[float, typer.Option(help="Per-request timeout in seconds.")] = 600.0,
    stall_timeout: Annotated[
        float,
        typer.Option(
            help="Abort when the server sends nothing on any open stream for this long (s); 0 = off."
        ),
    ] = DEFAULT_STALL_TIMEOUT_S,
    transport: Annotated[
        TransportName, typer.Option(help="HTTP client: fast (asyncio protocols) or aiohttp.")
    ] = TransportName.fast,
    seed: Annotated[int, typer.Option(help="Seed of random prompts and arrivals.")] = 0,
    max_tokens: Annotated[
        int | None,
        typer.Option(
            help="Output cap (default: speed-bench 4096, gsm8k 512, random --osl, custom: a row's output_tokens, "
            "else 256); with custom it overrides the rows' output_tokens."
        ),
    ] = None,
    temperature: Annotated[float | None, typer.Option(help="Sampling temperature.")] = None,
    top_p: Annotated[float | None, typer.Option(help="Sampling top_p.")] = None,
    top_k: Annotated[int | None, typer.Option(help="Sampling top_k.")] = None,
    min_tokens: Annotated[int | None, typer.Option(help="min_tokens sent with every request.")] = None,
    ignore_eos: Annotated[bool | None, typer.Option(help="Send ignore_eos (fixed output lengths).")] = None,
    thinking: Annotated[
        Thinking, typer.Option(help="chat_template_kwargs enable_thinking.")
    ] = Thinking.default,
    extra_body: Annotated[
        str | None, typer.Option(help="JSON object merged into every request body.")
    ] = None,
    metrics_url: Annotated[
        list[str] | None,
        typer.Option(
            help="Prometheus metrics URL (default: found); repeat it for a server with several endpoints "
            "(nodes, data-parallel ranks): their counters are summed."
        ),
    ] = None,
    dialect: Annotated[str, typer.Option(help="Metrics dialect: auto, vllm, sglang, trtllm.")] = "auto",
    no_metrics: Annotated[bool, typer.Option(help="Do not scrape server metrics.")] = False,
    scrape_interval: Annotated[float, typer.Option(help="Background scrape interval (s); 0 = off.")] = 1.0,
    k: Annotated[int | None, typer.Option(help="Speculative tokens K (for intervals and TRT-LLM).")] = None,
    prometheus_url: Annotated[
        str | None, typer.Option(help="Prometheus server scraping every node (multi-node).")
    ] = None,
    prometheus_selector: Annotated[str, typer.Option(help='PromQL label selector, e.g. {job="vllm"}.')] = "",
    tp: Annotated[int, typer.Option(help="Tensor-parallel size (per-GPU throughput).")] = 1,
    pp: Annotated[int, typer.Option(help="Pipeline-parallel size.")] = 1,
    cp: Annotated[int, typer.Option(help="Context-parallel size.")] = 1,
    dp: Annotated[int, typer.Option(help="Data-parallel replicas.")] = 1,
    nodes: Annotated[
        int, typer.Option(help="Nodes the server's GPUs sit on (reported; the GPU count is tp*pp*cp*dp).")
    ] = 1,
    slo_ttft_ms: Annotated[float | None, typer.Option(help="Goodput SLO on TTFT (ms).")] = None,
    slo_tpot_ms: Annotated[float | None, typer.Option(help="Goodput SLO on TPOT (ms).")] = None,
    slo_e2el_ms: Annotated[float | None, typer.Option(help="Goodput SLO on E2E latency (ms).")] = None,
    percentiles: Annotated[str, typer.Option(help="Percentiles to report.")] = "50,90,95,99",
    out: Annotated[
        Path | None, typer.Option(help="Write records.parquet, snapshots.json, summary.json.")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the summary as JSON on stdout.")] = False,
    progress: Annotated[bool, typer.Option(help="Show a progress bar on stderr.")] = True,
    api_key: Annotated[
        str | None,
        typer.Option(
            envvar="OPENAI_API_KEY",
            show_default=False,
            help="API key of a server started with --api-key, sent as 'Authorization: Bearer KEY' with every "
            "request; never stored or printed. Default: $OPENAI_API_KEY.",
        ),
    ] = None,
) -> None:
    """Stream a workload at a server; report client metrics and server spec-decode stats."""
    try:
        auth_headers(api_key)
        if api_key and urlparse(base_url).username is not None:
            raise InvalidInputError(
                "--base-url carries user:password@ and --api-key (or $OPENAI_API_KEY) is set: a request has one "
                "Authorization header; give one of them"
            )
        check_options(
            {
                "--isl": (isl, _AT_LEAST_1),
                "--osl": (osl, _AT_LEAST_1),
                "--range-ratio": (range_ratio, _Bound(0, open_low=True, high=1)),
                "--vocab-size": (vocab_size, _Bound(DEFAULT_TOKEN_LOW + 1)),
                "--num-shots": (num_shots, _NOT_NEGATIVE),
                "--concurrency": (concurrency, _AT_LEAST_1),
                "--request-rate": (request_rate, _POSITIVE),
                "--num-prompts": (num_prompts, _AT_LEAST_1),
                "--duration": (duration, _POSITIVE),
                "--warmup": (warmup, _NOT_NEGATIVE),
                "--timeout": (timeout, _POSITIVE),
                "--max-tokens": (max_tokens, _AT_LEAST_1),
                "--temperature": (temperature, _NOT_NEGATIVE),
                "--top-p": (top_p, _Bound(0, open_low=True, high=1)),
                "--top-k": (top_k, _Bound(-1)),
                "--min-tokens": (min_tokens, _NOT_NEGATIVE),
                "--scrape-interval": (scrape_interval, _NOT_NEGATIVE),
                "--k": (k, _K_RANGE),
                "--tp": (tp, _AT_LEAST_1),
                "--pp": (pp, _AT_LEAST_1),
                "--cp": (cp, _AT_LEAST_1),
                "--dp": (dp, _AT_LEAST_1),
                "--nodes": (nodes, _AT_LEAST_1),
                "--slo-ttft-ms": (slo_ttft_ms, _POSITIVE),
                "--slo-tpot-ms": (slo_tpot_ms, _POSITIVE),
                "--slo-e2el-ms": (slo_e2el_ms, _POSITIVE),
            }
        )
        pcts = check_percentiles(_parse_floats(percentiles, "--percentiles"), "--percentiles")
        if out is not None:
            check_out_dir(out)
        extra: dict[str, Any] = {}
        if extra_body:
            try:
                extra = orjson.loads(extra_body)
            except orjson.JSONDecodeError as exc:
                raise InvalidInputError(f"--extra-body is not valid JSON: {exc}") from None
            if not isinstance(extra, dict):
                raise InvalidInputError("--extra-body must be a JSON object")
        _check_dialect(dialect)
        template = None if thinking is Thinking.default else {"enable_thinking": thinking is Thinking.on}
        spec = LoadSpec(
            concurrency=concurrency,
            request_rate=request_rate,
            arrival=arrival.value,
            num_prompts=num_prompts,
            duration_s=duration,
            warmup=warmup,
            timeout_s=timeout,
            stall_timeout_s=stall_timeout or None,
            seed=seed,
            keep_text=dataset is not DatasetName.random,
            transport=transport.value,
        )
        spec.check()
        args = _BenchArgs(
            base_url=base_url,
            endpoint=endpoint.value,
            model=model,
            dataset=dataset,
            input_file=input_file,
            categories=category or [],
            isl=isl,
            osl=osl,
            range_ratio=range_ratio,
            vocab_size=vocab_size,
            num_shots=num_shots,
            shots_file=shots_file,
            seed=seed,
            spec=spec,
            sampling=Sampling(
                max_tokens=max_tokens or (osl if dataset is DatasetName.random else DEFAULT_MAX_TOKENS),
                temperature=temperature,
                top_p=top_p,
                top_k=top_k,
                min_tokens=min_tokens,
                ignore_eos=ignore_eos,
                chat_template_kwargs=template,
                extra_body=extra,
            ),
            max_tokens=max_tokens,
            metrics_urls=list(metrics_url or []),
            dialect=dialect,
            no_metrics=no_metrics,
            scrape_interval_s=scrape_interval,
            k=k,
            prometheus_url=prometheus_url,
            prometheus_selector=prometheus_selector,
            gpus=GpuLayout(tp=tp, pp=pp, cp=cp, dp=dp, nodes=nodes),
            slo=SLO(ttft_ms=slo_ttft_ms, tpot_ms=slo_tpot_ms, e2el_ms=slo_e2el_ms),
            percentiles=list(pcts),
            out=out,
            progress=progress and not json_out and sys.stderr.isatty(),
            api_key=api_key or None,
        )
        summary, all_ok = _run(_bench(args))
    except AlflowError as exc:
        raise _fail(str(exc), secrets=(api_key,)) from None
    if json_out:
        sys.stdout.buffer.write(_dumps(summary) + b"\n")
        sys.stdout.flush()
    else:
        _print_summary(summary)
    if not all_ok:
        raise _fail(
            f"{summary['failed']} of {summary['failed'] + summary['completed']} requests failed "
            f"(first: {next(iter(summary.get('errors') or {'?': 0}))}); these numbers are not a clean run",
            code=1,
            secrets=(api_key,),
        )


async def _snapshot(url: str | list[str], dialect_name: str) -> tuple[Snapshot, Dialect | None, str]:
    async with aiohttp.ClientSession() as http:
        if not isinstance(url, str):  # several endpoints of one server: all must answer, counters summed
            snap = await scrape_all(url, session=http)
            try:
                return snap, get_dialect(dialect_name) if dialect_name != "auto" else detect(snap), snap.url
            except MissingMetricsError:
                return snap, None, snap.url
        urls = [url] if urlparse_path(url) not in ("", "/") else candidate_metrics_urls(url, dialect_name)
        problems: list[str] = []
        for u in urls:
            try:
                snap = await scrape(u, session=http)
            except ScrapeError as exc:
                problems.append(str(exc))
                continue
            try:
                d = get_dialect(dialect_name) if dialect_name != "auto" else detect(snap)
            except MissingMetricsError:
                d = None
            return snap, d, u
        raise AlflowError("; ".join(problems))


def urlparse_path(url: str) -> str:
    """The path part of ``url`` (``""`` for a bare base URL)."""
    return urlparse(url).path


def snapshot(
    url: Annotated[
        list[str] | None,
        typer.Argument(
            help="Metrics URL, or a server base URL (metrics path found); several metrics URLs are one "
            "server's endpoints (nodes, data-parallel ranks): their counters are summed."
        ),
    ] = None,
    url_option: Annotated[
        list[str] | None,
        typer.Option(
            "--url", help="The same as the URL argument, as an option (repeatable; both may be given)."
        ),
    ] = None,
    dialect: Annotated[str, typer.Option(help="Metrics dialect: auto, vllm, sglang, trtllm.")] = "auto",
    k: Annotated[int | None, typer.Option(help="Speculative tokens K (for intervals and TRT-LLM).")] = None,
    all_samples: Annotated[bool, typer.Option("--all", help="Include every sample in --json.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")] = False,
) -> None:
    """Scrape a server's metrics once: spec-decode stats since server start (lifetime counters)."""
    try:
        check_options({"--k": (k, _K_RANGE)})
        urls = [*(url or []), *(url_option or [])]
        if not urls:
            raise InvalidInputError("give the metrics URL (or the server's base URL): URL or --url URL")
        _check_dialect(dialect)
        snap, d, used = _run(_snapshot(urls[0] if len(urls) == 1 else urls, dialect))
        empty = Snapshot(
            used,
            snap.wall_time_s,
            snap.mono_ns,
            {},
            {},
            tuple(Snapshot(u, snap.wall_time_s, snap.mono_ns, {}, {}) for u in snap.urls)
            if snap.parts
            else (),
        )
        stats, err = (
            (None, "no vllm:, sglang: or trtllm_ metrics")
            if d is None
            else _stats_or_error(d.spec_stats, SnapshotWindow(empty, snap), k=k)
        )
    except AlflowError as exc:
        raise _fail(str(exc)) from None
    data: dict[str, Any] = {
        "url": redact_url(used),
        "urls": [redact_url(u) for u in snap.urls],
        "wall_time_s": snap.wall_time_s,
        "dialect": None if d is None else d.name,
        "since_server_start": None if stats is None else stats.to_dict(),
        "error": err,
        "families": sorted(snap.families()),
    }
    if all_samples:
        data["samples"] = snap.to_dict()["samples"]
    if json_out:
        sys.stdout.buffer.write(_dumps(data) + b"\n")
        sys.stdout.flush()
        return
    table = Table(title=f"metrics at {escape(data['url'])}", show_header=False)
    table.add_row("dialect", data["dialect"] or "unknown")
    if stats is not None and stats.al is not None:
        table.add_row("AL since server start", f"{stats.al:.4f}")
        table.add_row("drafts / accepted", f"{stats.num_drafts} / {stats.accepted_tokens}")
        if stats.per_position_rates:
            table.add_row("per-position rates", ", ".join(f"{p:.3f}" for p in stats.per_position_rates))
    else:
        table.add_row("spec decode", Text(err or (stats.note if stats else "")))
    table.add_row("families", str(len(data["families"])))
    _out.print(table)


def register(app: typer.Typer) -> None:
    """Add ``bench`` and the ``metrics`` sub-app (``snapshot``) to ``app``."""
    app.command("bench")(bench)
    metrics_app = typer.Typer(
        help="Server metrics: scrape and read spec-decode counters.", no_args_is_help=True
    )
    metrics_app.command("snapshot")(snapshot)
    app.add_typer(metrics_app, name="metrics")
