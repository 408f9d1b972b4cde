"""``alflow bench`` and ``alflow metrics snapshot``: options in, a table or JSON out.

The run itself is :func:`alflow.bench.bench` (the command builds its :class:`~alflow.bench.BenchRequest`).
Errors in the user's input are one line on stderr (``error: ...``) with exit code 2, before any request;
a run with failed requests still writes its outputs, then says how many failed and exits with code 1.

``--api-key`` (default: ``$OPENAI_API_KEY``) goes to the server as ``Authorization: Bearer <key>``
and is never written or printed; URLs are printed without credentials.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Final, TypeVar
from urllib.parse import urlparse

import orjson
import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from alflow.acceptance.synthetic import K_MAX, K_MIN
from alflow.bench import (
    BenchRequest,
    BenchResult,
    DatasetName,
    RandomPrompts,
    bench_async,
    check_dataset_options,
    check_dialect,
    check_out_dir,
    run_coroutine,
    snapshot_metrics,
)
from alflow.cli.common import (
    POSITIVE,
    Bound,
    check_options,
    console,
    emit_json,
    err_console,
    fail,
    parse_floats,
    register_bounds,
    warn,
)
from alflow.cli.stopping import sigterm_as_exit
from alflow.config.base import MAX_CONCURRENCY, MAX_NODES, MAX_PARALLEL, MAX_PROMPTS, MAX_SEQUENCE_TOKENS
from alflow.datasets.custom import DEFAULT_MAX_TOKENS
from alflow.datasets.random_tokens import DEFAULT_TOKEN_LOW, DEFAULT_VOCAB_SIZE
from alflow.errors import AlflowError, InvalidInputError
from alflow.loadgen.client import auth_headers
from alflow.loadgen.endpoints import Sampling, check_extra_body
from alflow.loadgen.spec import (
    DEFAULT_STALL_TIMEOUT_S,
    MAX_PROCESSES,
    MAX_REQUEST_RATE,
    MAX_SECONDS,
    MIN_PROCESSES,
    MIN_REQUEST_RATE,
    LoadSpec,
)
from alflow.metrics.client import SLO, GpuLayout, check_percentiles
from alflow.reports.markdown import escape_controls
from alflow.util.names import check_identifier, shown
from alflow.util.redact import check_http_url, check_url_syntax, redact_url, url_problem
from alflow.util.rows import dump_row
from alflow.util.typer_options import command_of

T = TypeVar("T")
K_RANGE = Bound(K_MIN, high=K_MAX)
PROCESSES_RANGE = Bound(MIN_PROCESSES, high=MAX_PROCESSES)
MAX_TOKEN_ID = 2**31 - 1
"""Token ids and top-k are 32-bit integers in the serving frameworks; a larger one cannot be sent (JSON encoders
stop at 64 bits: a vocabulary of 1e21 used to end in a traceback)."""
# the size fields' bounds (issue #35): the flows' configuration limits (alflow.config.base), the run's clock
TOKENS = Bound(1, high=MAX_SEQUENCE_TOKENS)
SESSIONS = Bound(1, high=MAX_CONCURRENCY)
PROMPTS = Bound(1, high=MAX_PROMPTS)
WARMUP = Bound(0, high=MAX_PROMPTS)
SECONDS = Bound(0, open_low=True, high=MAX_SECONDS)
SECONDS_OR_OFF = Bound(0, high=MAX_SECONDS)
PARALLEL = Bound(1, high=MAX_PARALLEL)

BENCH_BOUNDS: Final = register_bounds(
    "bench",
    {
        "--isl": TOKENS,
        "--osl": TOKENS,
        "--range-ratio": Bound(0, open_low=True, high=1),
        "--vocab-size": Bound(DEFAULT_TOKEN_LOW + 1, high=MAX_TOKEN_ID + 1),
        "--num-shots": Bound(0),  # at most the shots file's examples (checked there)
        "--seed": Bound(0, high=2**63 - 1),  # stored as a JSON integer, read back exactly
        "--concurrency": SESSIONS,
        "--client-processes": PROCESSES_RANGE,
        "--request-rate": Bound(MIN_REQUEST_RATE, high=MAX_REQUEST_RATE),
        "--num-prompts": PROMPTS,
        "--duration": SECONDS,
        "--warmup": WARMUP,
        "--timeout": SECONDS,
        "--stall-timeout": SECONDS_OR_OFF,
        "--max-tokens": TOKENS,
        "--temperature": Bound(0),
        "--top-p": Bound(0, open_low=True, high=1),
        "--top-k": Bound(-1, high=MAX_TOKEN_ID),
        "--min-tokens": Bound(0, high=MAX_SEQUENCE_TOKENS),
        "--scrape-interval": SECONDS_OR_OFF,
        "--k": K_RANGE,
        "--tp": PARALLEL,
        "--pp": PARALLEL,
        "--cp": PARALLEL,
        "--dp": PARALLEL,
        "--nodes": Bound(1, high=MAX_NODES),
        "--slo-ttft-ms": POSITIVE,
        "--slo-tpot-ms": POSITIVE,
        "--slo-e2el-ms": POSITIVE,
    },
)
"""What each numeric option of ``alflow bench`` allows (checked before any work starts)."""


def register(app: typer.Typer) -> None:
    """Add ``bench`` and the ``metrics`` sub-app (``snapshot``) to ``app``."""
    app.command("bench")(command_of(BenchOptions, _bench))
    metrics_app = typer.Typer(
        help="Server metrics: scrape and read spec-decode counters.", no_args_is_help=True
    )
    metrics_app.command("snapshot")(snapshot_command)
    app.add_typer(metrics_app, name="metrics")


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
    with Progress(*columns, console=err_console, transient=True) as p:
        yield _RichProgress(p)


def _print_summary(s: dict[str, Any]) -> None:
    table = Table(title=f"alflow bench: {escape(escape_controls(s.get('model')))}", show_header=False)
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
        if mean is not None or (key == "itl" and s.get("itl_ms_note")):  # withheld figures are said so
            shown = " / ".join("not measurable" if v is None else f"{v:.2f}" for v in (mean, med, p99))
            rows.append((f"{label} mean / median / p99", shown))
    if s.get("itl_ms_note"):
        rows.append(("ITL note", str(s["itl_ms_note"])))
    timing = s.get("client_timing") or {}
    if timing:
        load = timing.get("client_load") or {}
        share = load.get("cpu_share")
        lag = load.get("lag_p99_ms")
        coalesced = timing.get("coalesced_share")
        rows.append((
            "client timing",
            f"{timing['verdict']}: stamps {timing['stamp_source']}, "
            f"coalesced chunks {'n/a' if coalesced is None else f'{coalesced:.1%}'}, "
            f"CPU {'n/a' if share is None else f'{share:.0%}'}, loop lag p99 {'n/a' if lag is None else f'{lag:.1f} ms'}, "
            f"streams in flight {load.get('in_flight_mean', 'n/a')} of {load.get('concurrency', 'n/a')}",
        ))  # fmt: skip
        if timing.get("reasons"):
            rows.append(("client-bound because", "; ".join(timing["reasons"])))
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
    for label, value in rows:  # server texts (errors, dialect, notes) as well: escaped, never markup
        table.add_row(Text(escape_controls(label)), Text(escape_controls(value)))
    console.print(table, soft_wrap=True)


def _extra_body(text: str | None) -> dict[str, Any]:
    """``--extra-body``: a JSON object (empty when not given)."""
    if not text:
        return {}
    try:
        extra = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise InvalidInputError(f"--extra-body is not valid JSON: {exc}") from None
    if not isinstance(extra, dict):
        raise InvalidInputError("--extra-body must be a JSON object")
    check_extra_body(extra)
    return extra


def _check_client_processes(processes: int, auto: bool, warmup: int, concurrency: int) -> None:
    """``--client-processes`` and ``--auto-client-processes`` against the warm-up and the concurrency."""
    if auto and (processes != 1 or warmup < 1):
        raise InvalidInputError(
            f"--auto-client-processes needs --client-processes 1 and --warmup of at least 1 "
            f"(got --client-processes {processes}, --warmup {warmup})"
        )
    if processes > concurrency:
        raise InvalidInputError(
            f"--client-processes {processes}: must not exceed --concurrency {concurrency} "
            "(each client process keeps at least one session in flight)"
        )


@dataclass(frozen=True)
class BenchOptions:
    """The options of the command, declared once (the command's signature is built from them)."""

    base_url: Annotated[str, typer.Option(help="Server base URL, e.g. http://127.0.0.1:8000.")]
    endpoint: Annotated[EndpointName, typer.Option(help="OpenAI endpoint to stream from.")] = (
        EndpointName.chat
    )
    model: Annotated[
        str | None, typer.Option(help="Served model name (default: the first of /v1/models).")
    ] = None
    dataset: Annotated[DatasetName, typer.Option(help="Workload.")] = DatasetName.random
    input_file: Annotated[
        Path | None,
        typer.Option(
            help="Dataset file: speed-bench or gsm8k JSONL, or custom JSONL (vllm bench serve's: 'prompt', "
            "optional 'output_tokens')."
        ),
    ] = None
    category: Annotated[
        list[str] | None, typer.Option(help="SPEED-Bench category or entropy tier (repeatable).")
    ] = None
    isl: Annotated[int, typer.Option(help="Random prompts: input length (tokens).")] = 1024
    osl: Annotated[int, typer.Option(help="Random prompts: output length (tokens).")] = 1024
    range_ratio: Annotated[
        float, typer.Option(help="Random prompts: input length drawn in [ISL*r, ISL].")
    ] = 0.8
    vocab_size: Annotated[int, typer.Option(help="Random prompts: token ids drawn below this.")] = (
        DEFAULT_VOCAB_SIZE
    )
    num_shots: Annotated[int, typer.Option(help="GSM8K: few-shot examples from --shots-file.")] = 0
    shots_file: Annotated[Path | None, typer.Option(help="GSM8K: train file for few-shot examples.")] = None
    concurrency: Annotated[int, typer.Option(help="Most sessions in flight.")] = 1
    request_rate: Annotated[
        float | None, typer.Option(help="Sessions per second (default: unlimited, capped by concurrency).")
    ] = None
    arrival: Annotated[ArrivalName, typer.Option(help="Arrival process with --request-rate.")] = (
        ArrivalName.poisson
    )
    num_prompts: Annotated[
        int | None,
        typer.Option(help="Measured sessions (default: the dataset's rows; random: 10 x concurrency)."),
    ] = None
    duration: Annotated[float | None, typer.Option(help="Measure for this many seconds instead.")] = None
    warmup: Annotated[int, typer.Option(help="Warm-up sessions before the measured phase.")] = 0
    timeout: Annotated[float, typer.Option(help="Per-request timeout in seconds.")] = 600.0
    stall_timeout: Annotated[
        float,
        typer.Option(
            help="Abort when the server sends nothing on any open stream for this long (s); 0 = off."
        ),
    ] = DEFAULT_STALL_TIMEOUT_S
    transport: Annotated[
        TransportName, typer.Option(help="HTTP client: fast (asyncio protocols) or aiohttp.")
    ] = TransportName.fast
    client_processes: Annotated[
        int,
        typer.Option(
            help=f"Client processes sharing the load ({MIN_PROCESSES}-{MAX_PROCESSES}, at most --concurrency; "
            "Linux): one Python process saturates near a thousand streams. Concurrency, prompts, warm-up and "
            "request rate are split between them."
        ),
    ] = 1
    auto_client_processes: Annotated[
        bool,
        typer.Option(
            "--auto-client-processes",
            help="Judge the client during the warm-up (CPU share, event-loop lag, streams in flight); when it is "
            "the bottleneck, split the measured phase over one process per core (needs --warmup).",
        ),
    ] = False
    seed: Annotated[int, typer.Option(help="Seed of random prompts and arrivals.")] = 0
    max_tokens: Annotated[
        int | None,
        typer.Option(
            help="Output cap (default: speed-bench 4096, gsm8k 512, random --osl, custom: a row's output_tokens, "
            "else 256); with custom it overrides the rows' output_tokens."
        ),
    ] = None
    temperature: Annotated[float | None, typer.Option(help="Sampling temperature.")] = None
    top_p: Annotated[float | None, typer.Option(help="Sampling top_p.")] = None
    top_k: Annotated[int | None, typer.Option(help="Sampling top_k.")] = None
    min_tokens: Annotated[int | None, typer.Option(help="min_tokens sent with every request.")] = None
    ignore_eos: Annotated[bool | None, typer.Option(help="Send ignore_eos (fixed output lengths).")] = None
    thinking: Annotated[Thinking, typer.Option(help="chat_template_kwargs enable_thinking.")] = (
        Thinking.default
    )
    extra_body: Annotated[str | None, typer.Option(help="JSON object merged into every request body.")] = None
    metrics_url: Annotated[
        list[str] | None,
        typer.Option(
            help="Prometheus metrics URL (default: found); repeat it for a server with several endpoints "
            "(nodes, data-parallel ranks): their counters are summed."
        ),
    ] = None
    dialect: Annotated[
        str, typer.Option(help="Metrics dialect: auto or a framework (alflow frameworks lists them).")
    ] = "auto"
    no_metrics: Annotated[bool, typer.Option(help="Do not scrape server metrics.")] = False
    scrape_interval: Annotated[
        float, typer.Option(help="Background scrape interval (s), at least 0.05; 0 = off.")
    ] = 1.0
    k: Annotated[int | None, typer.Option(help="Speculative tokens K (for intervals and TRT-LLM).")] = None
    prometheus_url: Annotated[
        str | None,
        typer.Option(
            help="Prometheus server scraping every node (multi-node): the window's counters are read from "
            "it after warm-up and after the load, each time once it has scraped every series again."
        ),
    ] = None
    prometheus_selector: Annotated[str, typer.Option(help='PromQL label selector, e.g. {job="vllm"}.')] = ""
    tp: Annotated[int, typer.Option(help="Tensor-parallel size (per-GPU throughput).")] = 1
    pp: Annotated[int, typer.Option(help="Pipeline-parallel size.")] = 1
    cp: Annotated[int, typer.Option(help="Context-parallel size.")] = 1
    dp: Annotated[int, typer.Option(help="Data-parallel replicas.")] = 1
    nodes: Annotated[
        int, typer.Option(help="Nodes the server's GPUs sit on (reported; the GPU count is tp*pp*cp*dp).")
    ] = 1
    slo_ttft_ms: Annotated[float | None, typer.Option(help="Goodput SLO on TTFT (ms).")] = None
    slo_tpot_ms: Annotated[float | None, typer.Option(help="Goodput SLO on TPOT (ms).")] = None
    slo_e2el_ms: Annotated[float | None, typer.Option(help="Goodput SLO on E2E latency (ms).")] = None
    percentiles: Annotated[str, typer.Option(help="Percentiles to report.")] = "50,90,95,99"
    out: Annotated[Path | None, typer.Option(help="Write records.parquet, snapshots.json, summary.json.")] = (
        None
    )
    json_out: Annotated[bool, typer.Option("--json", help="Print the summary as JSON on stdout.")] = False
    progress: Annotated[bool, typer.Option(help="Show a progress bar on stderr.")] = True
    api_key: Annotated[
        str | None,
        typer.Option(
            envvar="OPENAI_API_KEY",
            show_default=False,
            help="API key of a server started with --api-key, sent as 'Authorization: Bearer KEY' with every "
            "request; never stored or printed. Default: $OPENAI_API_KEY.",
        ),
    ] = field(default=None, repr=False)  # never shown


def _bench(o: BenchOptions) -> None:
    """Stream a workload at a server; report client metrics and server spec-decode stats."""
    try:
        request = _bench_request(o)
        check_dataset_options(request)  # an option the dataset does not use: refused, not ignored (round 17)
        with (
            _progress(o.progress and not o.json_out and sys.stderr.isatty()) as prog,
            sigterm_as_exit() as watch,
        ):
            result = run_coroutine(watch.run(bench_async(request, progress=prog, warn=warn)))
    except AlflowError as exc:
        raise fail(str(exc), secrets=(o.api_key,)) from None
    _report(result, json_out=o.json_out, api_key=o.api_key)


MIN_SCRAPE_INTERVAL_S: Final = 0.05
"""The shortest ``--scrape-interval`` but 0 (off): a shorter one scrapes the metrics endpoint back to back, loading
the server it measures (round 18, M7: 1e-9 was accepted)."""


def _check_scrape_interval(seconds: float) -> None:
    """``--scrape-interval`` 0 (off) or at least :data:`MIN_SCRAPE_INTERVAL_S` (the range is checked before)."""
    if 0 < seconds < MIN_SCRAPE_INTERVAL_S:
        raise InvalidInputError(
            f"--scrape-interval {seconds:g}: must be 0 (off) or at least {MIN_SCRAPE_INTERVAL_S:g} s (a shorter "
            "interval scrapes the metrics endpoint back to back, loading the server it measures)"
        )


def _check_token_range(o: BenchOptions) -> None:
    """``--min-tokens`` at most the output cap: ``--max-tokens``, or ``--osl`` for random prompts without it.

    A server refuses each request whose min_tokens exceeds max_tokens (vLLM: 400); round 18, M1: it was sent.
    """
    if o.min_tokens is None:
        return
    if o.max_tokens is not None:
        cap, name = o.max_tokens, "--max-tokens"
    elif o.dataset is DatasetName.random:
        cap, name = o.osl, "--osl"
    else:
        return
    if o.min_tokens > cap:
        raise InvalidInputError(
            f"--min-tokens {o.min_tokens}: must be at most {name} ({cap}): a server refuses a request "
            "whose min_tokens exceeds its max_tokens"
        )


def _check_urls(o: BenchOptions) -> None:
    """Every URL option a URL to send requests to (said without the URL: it may hold a password)."""
    given = [("--base-url", o.base_url), ("--prometheus-url", o.prometheus_url or "")]
    for name, url in [*given, *(("--metrics-url", u) for u in o.metrics_url or ())]:
        problem = url_problem(url)
        if problem:
            raise InvalidInputError(f"{name}: {problem}")
        if url or name != "--prometheus-url":
            check_url_syntax(url, name)  # an unclosed IPv6 bracket, a port out of range: not a traceback
        parts = urlparse(url)
        if (
            name != "--base-url"
            and (url or name == "--metrics-url")
            and (parts.scheme not in ("http", "https") or not parts.hostname)
        ):
            raise InvalidInputError(
                f"{name} {shown(redact_url(url))}: give an http(s)://HOST[:PORT]/PATH URL"
            )
    _check_base_url(o.base_url)


def _check_base_url(url: str) -> None:
    """``--base-url`` with an http(s) scheme and a host a resolver takes (``a..b`` reached it as a traceback)."""
    try:
        parts = urlparse(url)
        host = parts.hostname
    except ValueError as exc:
        raise InvalidInputError(f"--base-url {shown(redact_url(url))}: {exc}") from None
    if parts.query or parts.fragment:  # the endpoints' paths are appended: ?code=x/v1/models is no URL
        raise InvalidInputError(
            f"--base-url {shown(redact_url(url))}: give it without a query or fragment (the API's paths follow it)"
        )
    if parts.scheme not in ("http", "https") or not host:
        raise InvalidInputError(f"--base-url {shown(redact_url(url))}: give http(s)://HOST[:PORT][/PATH]")
    try:
        host.encode("idna")  # what the resolver will do: a label empty or over 63 characters raised there
    except UnicodeError:
        raise InvalidInputError(
            f"--base-url {shown(redact_url(url))}: the host {shown(host)} is no host name (a label is empty or "
            "longer than 63 characters)"
        ) from None


def _bench_request(o: BenchOptions) -> BenchRequest:
    """The options checked (one line naming a bad one, before any request) and made the run's request."""
    auth_headers(o.api_key)
    _check_urls(o)
    if o.model is not None:
        try:
            check_identifier(o.model, what="--model")
        except ValueError as exc:
            raise InvalidInputError(str(exc)) from None
    if o.api_key and urlparse(o.base_url).username is not None:
        raise InvalidInputError(
            "--base-url carries user:password@ and --api-key (or $OPENAI_API_KEY) is set: a request has one "
            "Authorization header; give one of them"
        )
    check_options({name: getattr(o, name[2:].replace("-", "_")) for name in BENCH_BOUNDS}, BENCH_BOUNDS)
    _check_token_range(o)
    _check_scrape_interval(o.scrape_interval)
    pcts = check_percentiles(parse_floats(o.percentiles, "--percentiles"), "--percentiles")
    if o.out is not None:
        check_out_dir(o.out)
    extra = _extra_body(o.extra_body)
    check_dialect(o.dialect)
    _check_client_processes(o.client_processes, o.auto_client_processes, o.warmup, o.concurrency)
    template = None if o.thinking is Thinking.default else {"enable_thinking": o.thinking is Thinking.on}
    spec = LoadSpec(
        concurrency=o.concurrency,
        request_rate=o.request_rate,
        arrival=o.arrival.value,
        num_prompts=o.num_prompts,
        duration_s=o.duration,
        warmup=o.warmup,
        timeout_s=o.timeout,
        stall_timeout_s=o.stall_timeout or None,
        seed=o.seed,
        keep_text=o.dataset is not DatasetName.random,
        transport=o.transport.value,
        processes=o.client_processes,
        auto_processes=o.auto_client_processes,
    )
    spec.check()
    return BenchRequest(
        base_url=o.base_url,
        endpoint=o.endpoint.value,
        model=o.model,
        dataset=o.dataset,
        input_file=o.input_file,
        categories=tuple(o.category or ()),
        random=RandomPrompts(isl=o.isl, osl=o.osl, range_ratio=o.range_ratio, vocab_size=o.vocab_size),
        num_shots=o.num_shots,
        shots_file=o.shots_file,
        seed=o.seed,
        spec=spec,
        sampling=Sampling(
            max_tokens=o.max_tokens or (o.osl if o.dataset is DatasetName.random else DEFAULT_MAX_TOKENS),
            temperature=o.temperature,
            top_p=o.top_p,
            top_k=o.top_k,
            min_tokens=o.min_tokens,
            ignore_eos=o.ignore_eos,
            chat_template_kwargs=template,
            extra_body=extra,
        ),
        max_tokens=o.max_tokens,
        metrics_urls=tuple(o.metrics_url or ()),
        dialect=o.dialect,
        no_metrics=o.no_metrics,
        scrape_interval_s=o.scrape_interval,
        k=o.k,
        prometheus_url=o.prometheus_url,
        prometheus_selector=o.prometheus_selector,
        gpus=GpuLayout(tp=o.tp, pp=o.pp, cp=o.cp, dp=o.dp, nodes=o.nodes),
        slo=SLO(ttft_ms=o.slo_ttft_ms, tpot_ms=o.slo_tpot_ms, e2el_ms=o.slo_e2el_ms),
        percentiles=tuple(pcts),
        out=o.out,
        api_key=o.api_key or None,
    )


def _report(result: BenchResult, *, json_out: bool, api_key: str | None) -> None:
    """Print the run's summary (JSON or tables); exit 1 when a request failed (the numbers are not a clean run)."""
    summary = result.summary
    if json_out:
        emit_json(summary)
    else:
        _print_summary(summary)
    if result.out_error is not None:  # the numbers are printed; the files they belong in are not written
        raise fail(f"{result.out_error}; the summary is printed above", secrets=(api_key,))
    if not summary.get("completed") and not summary.get("failed"):
        raise fail(
            "no request was measured (a --duration shorter than one request?): nothing to report", code=1
        )
    if not result.all_ok:
        raise fail(
            f"{summary['failed']} of {summary['failed'] + summary['completed']} requests failed "
            f"(first: {next(iter(summary.get('errors') or {'?': 0}))}); these numbers are not a clean run",
            code=1,
            secrets=(api_key,),
        )


def snapshot_command(
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
    dialect: Annotated[
        str, typer.Option(help="Metrics dialect: auto or a framework (alflow frameworks lists them).")
    ] = "auto",
    k: Annotated[int | None, typer.Option(help="Speculative tokens K (for intervals and TRT-LLM).")] = None,
    all_samples: Annotated[bool, typer.Option("--all", help="Include every sample in --json.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")] = False,
) -> None:
    """Scrape a server's metrics once: spec-decode stats since server start (lifetime counters)."""
    try:
        check_options({"--k": k}, BENCH_BOUNDS)
        for name, given in [*(("URL", u) for u in url or ()), *(("--url", u) for u in url_option or ())]:
            check_http_url(given, name)
        shot = snapshot_metrics([*(url or []), *(url_option or [])], dialect, k=k)
    except AlflowError as exc:
        raise fail(str(exc)) from None
    snap, stats, err = shot.snapshot, shot.stats, shot.error
    data: dict[str, Any] = {
        "url": redact_url(shot.url),
        "urls": [redact_url(u) for u in snap.urls],
        "wall_time_s": snap.wall_time_s,
        "dialect": None if shot.dialect is None else shot.dialect.name,
        "since_server_start": None if stats is None else dump_row(stats),
        "error": err,
        "families": sorted(snap.families()),
    }
    if all_samples:
        data["samples"] = dump_row(snap)["samples"]
    if json_out:
        emit_json(data)
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
    console.print(table, soft_wrap=True)
