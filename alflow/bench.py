"""One client benchmark of a running server: :func:`bench` (``alflow bench``) and :func:`snapshot_metrics`.

The command line (:mod:`alflow.cli.bench`) only parses options into a :class:`BenchRequest` and prints
the :class:`BenchResult`; everything between (workload, served model, metrics endpoint and dialect,
measurement, summary, files) happens here, so a library user gets the same run.

:func:`bench` streams a workload (SPEED-Bench, GSM8K, random tokens or a custom prompt file) at a server,
scrapes its Prometheus metrics before (after warm-up) and after the measured phase and in the background,
and returns client metrics (keys as ``vllm bench serve``) plus the server's spec-decode statistics.
``spec.processes`` > 1 (``--client-processes``) splits the load over that many client processes
(:mod:`alflow.loadgen.multiproc`); the summary's config records it as ``client_processes``.
With ``out`` it writes ``records.parquet``, ``snapshots.json`` and ``summary.json``; records are written
even when the run is aborted or interrupted.

The API key goes to the server as ``Authorization: Bearer <key>`` with every request (streams,
``/v1/models``, ``/detokenize``, a dialect's server info) and nowhere else: it is never written or
returned. URLs are stored without credentials (:func:`alflow.util.redact.redact_url`), error messages included.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar, cast
from urllib.parse import urlparse

import aiohttp
import orjson

from alflow.acceptance.stats import SpecStats
from alflow.datasets.custom import load_custom
from alflow.datasets.gsm8k import load_gsm8k
from alflow.datasets.random_tokens import DEFAULT_VOCAB_SIZE, detokenize_sessions, random_sessions
from alflow.datasets.speed_bench import load_speed_bench
from alflow.datasets.types import Session
from alflow.errors import AlflowError, InvalidInputError
from alflow.loadgen.client import auth_headers
from alflow.loadgen.endpoints import Sampling
from alflow.loadgen.frames import write_records
from alflow.loadgen.records import RequestRecord
from alflow.loadgen.spec import MAX_PROCESSES, LoadSpec, Progress, Target
from alflow.measure import measure
from alflow.metrics.client import SLO, GpuLayout
from alflow.metrics.dialects import Dialect, MissingMetricsError
from alflow.metrics.prometheus import (
    ScrapeError,
    Snapshot,
    SnapshotWindow,
    scrape,
    scrape_all,
)
from alflow.metrics.promql import PromQLStart, PromQLWindow, baseline_counters, promql_start
from alflow.metrics.readers import candidate_metrics_urls, detect, get_dialect
from alflow.util import eventloop, jsonutil
from alflow.util.fsutil import atomic_write_bytes
from alflow.util.httpread import MAX_API_BYTES, read_bounded
from alflow.util.names import check_identifier, check_path_name, shown
from alflow.util.redact import redact_body, redact_data, redact_url, redact_urls_in_text
from alflow.util.rows import dump_row
from alflow.workloads import check_prompt_memory, file_sha256

T = TypeVar("T")

OUT_FILES = ("records.parquet", "snapshots.json", "summary.json")
"""What a benchmark writes into its output directory."""


class DatasetName(StrEnum):
    """Workloads a benchmark can send."""

    speed_bench = "speed-bench"
    gsm8k = "gsm8k"
    random = "random"
    custom = "custom"


@dataclass(frozen=True)
class RandomPrompts:
    """Random-token prompts: input length drawn in ``[isl * range_ratio, isl]``, ``osl`` output tokens."""

    isl: int = 1024
    osl: int = 1024
    range_ratio: float = 0.8
    vocab_size: int = DEFAULT_VOCAB_SIZE
    """Token ids are drawn below this."""


@dataclass(frozen=True)
class BenchRequest:
    """Everything one benchmark run needs: the server, the workload, the load, metrics and outputs."""

    base_url: str
    spec: LoadSpec
    sampling: Sampling
    endpoint: str = "chat"
    model: str | None = None
    dataset: DatasetName = DatasetName.random
    input_file: Path | None = None
    categories: tuple[str, ...] = ()
    random: RandomPrompts = field(default_factory=RandomPrompts)
    num_shots: int = 0
    shots_file: Path | None = None
    seed: int = 0
    max_tokens: int | None = None
    """The user's output cap over the dataset's own (None: the dataset's)."""
    metrics_urls: tuple[str, ...] = ()
    """One server's metrics endpoints (summed); empty: found from ``base_url`` and the dialect."""
    dialect: str = "auto"
    no_metrics: bool = False
    scrape_interval_s: float = 1.0
    k: int | None = None
    prometheus_url: str | None = None
    prometheus_selector: str = ""
    gpus: GpuLayout = field(default_factory=GpuLayout)
    slo: SLO = field(default_factory=SLO)
    percentiles: tuple[float, ...] = (50.0, 90.0, 95.0, 99.0)
    out: Path | None = None
    api_key: str | None = field(default=None, repr=False)

    @property
    def headers(self) -> dict[str, str]:
        """The API key's ``Authorization`` header (empty without a key)."""
        return auth_headers(self.api_key)


@dataclass(frozen=True)
class BenchResult:
    """The run's summary (as stored in ``summary.json``, credentials removed) and whether every request succeeded."""

    summary: dict[str, Any]
    all_ok: bool
    out_error: str | None = None
    """Why ``--out`` could not be written after the load (a full disk, a folder removed): one line, else None."""


def run_coroutine(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on alflow's event loop (uvloop's when installed: about 1.5x less CPU per streamed chunk)."""
    return eventloop.run(coro)


def check_out_dir(out: Path) -> None:
    """``out`` must be a directory alflow can write that holds no earlier run (checked before any request).

    A path no system call can take (a name longer than the file system allows, a NUL:
    :func:`~alflow.util.names.check_path_name`) or cannot look at (a folder without search permission) is one line.
    """
    try:
        check_path_name(out, what="--out")
        _check_out_dir(out)
    except ValueError as exc:
        raise InvalidInputError(str(exc)) from None
    except OSError as exc:
        raise InvalidInputError(f"--out {shown(str(out))}: {exc.strerror or type(exc).__name__}") from None


def _check_out_dir(out: Path) -> None:
    """:func:`check_out_dir` of a path that system calls take."""
    if out.exists() and not out.is_dir():
        raise InvalidInputError(f"--out {out}: is a file, not a directory")
    if out.is_dir():
        earlier = [name for name in OUT_FILES if (out / name).exists()]
        if earlier:
            raise InvalidInputError(
                f"--out {out}: already holds a run ({', '.join(earlier)}); give a new directory or remove it"
            )
    existing = next(p for p in (out, *out.absolute().parents) if p.exists())
    if not existing.is_dir():
        raise InvalidInputError(f"--out {out}: {existing} is a file, so no directory can be made there")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise InvalidInputError(f"--out {out}: {existing} is not writable")


def check_dialect(dialect: str) -> None:
    """``dialect`` is ``auto`` or a known dialect (named in the error)."""
    if dialect != "auto":
        try:
            get_dialect(dialect)
        except InvalidInputError as exc:
            raise InvalidInputError(f"--dialect {dialect!r}: {exc}") from None


OPEN_FILES_MARGIN = 64
"""Open files a client process holds besides its streams' sockets: the interpreter, pipes, scrapes, output files."""


def check_random_prompts(isl: int, prompts: int, warmup: int, *, available: int | None = None) -> None:
    """Refuse (one line) random prompts that would fill more than half of the memory ``available`` (or this machine's).

    They are drawn before the first request and held in memory: too many would exhaust it before any request.
    At the largest concurrency the default 10 prompts per slot of 1,024 tokens are 671 M tokens (about 27 GB).
    """
    check_prompt_memory(
        (prompts + warmup) * isl,
        f"--num-prompts {prompts:,} and --warmup {warmup:,} random prompts of up to --isl {isl:,} tokens",
        "lower --num-prompts (default: 10 x --concurrency), --warmup or --isl",
        available=available,
    )


def check_open_files(spec: LoadSpec) -> None:
    """Make sure the busiest client process may open a socket per stream, or refuse in one line.

    When it needs more open files than this process's soft limit, the soft limit is raised to the hard one (as
    ``vllm bench serve`` does; client processes inherit it); when even the hard limit is short, the run is refused
    before any request: the streams beyond it would all fail with "Too many open files", and the run would measure
    a fraction of the load it was asked for.
    """
    try:
        import resource
    except ImportError:  # not POSIX: no such limit to check
        return
    one = 1 if spec.auto_processes else spec.processes  # auto: the warm-up runs in this process
    per_process = -(-spec.concurrency // one)
    need = per_process + OPEN_FILES_MARGIN
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or need <= soft:
        return
    if hard == resource.RLIM_INFINITY or need <= hard:
        raised = need if hard == resource.RLIM_INFINITY else hard
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
        if resource.getrlimit(resource.RLIMIT_NOFILE)[0] >= need:
            return
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    fits = max(1, limit - OPEN_FILES_MARGIN)
    processes = -(-spec.concurrency // fits)
    hint = (
        f"give --client-processes {processes} (or more) or raise the limit"
        if processes <= MAX_PROCESSES and not spec.auto_processes
        else "raise the limit"
    )
    raise InvalidInputError(
        f"--concurrency {spec.concurrency:,}: {per_process:,} streams in one client process need about {need:,} "
        f"open files, more than the {limit:,} this system allows a process (ulimit -n): {hint}"
    )


def check_dataset_options(r: BenchRequest) -> None:
    """Refuse an option that does not apply to ``r.dataset`` (one line naming it), before any work.

    ``--category`` selects SPEED-Bench categories, ``--num-shots`` and ``--shots-file`` are GSM8K's, and random
    prompts read no ``--input-file``: given with another dataset, each was silently ignored. A category holding a
    control or bidi character is refused as an identifier is.
    """
    ds = f"--dataset {r.dataset.value}"
    for category in r.categories:
        try:
            check_identifier(category, what="--category")
        except ValueError as exc:
            raise InvalidInputError(str(exc)) from None
    if r.categories and r.dataset is not DatasetName.speed_bench:
        raise InvalidInputError(
            f"--category {shown(r.categories[0])} does not apply to {ds}: --category applies to --dataset "
            "speed-bench only"
        )
    shots = [name for name, given in (("--num-shots", r.num_shots), ("--shots-file", r.shots_file)) if given]
    if shots and r.dataset is not DatasetName.gsm8k:
        raise InvalidInputError(f"{shots[0]} does not apply to {ds}: it applies to --dataset gsm8k only")
    if r.dataset is DatasetName.random and r.input_file is not None:
        raise InvalidInputError(
            f"--input-file {shown(str(r.input_file))} does not apply to {ds} (random token ids are drawn, no "
            "file is read): give --dataset speed-bench, gsm8k or custom"
        )
    if r.dataset is not DatasetName.random and r.input_file is None:
        raise InvalidInputError(f"{ds} needs --input-file")


def load_sessions(r: BenchRequest, num_prompts: int) -> tuple[list[Session], list[Session] | None]:
    """The workload and, for random prompts, separate warm-up prompts (a different seed)."""
    check_dataset_options(r)
    if r.dataset is DatasetName.random:
        p = r.random

        def draw(n: int, seed: int) -> list[Session]:
            return random_sessions(
                n, isl=p.isl, osl=p.osl, range_ratio=p.range_ratio, seed=seed, vocab_size=p.vocab_size
            )

        return draw(num_prompts, r.seed), draw(r.spec.warmup, r.seed + 1_000_003) if r.spec.warmup else None
    if r.input_file is None:  # checked above (for mypy)
        raise InvalidInputError(f"--dataset {r.dataset.value} needs --input-file")
    cap = {} if r.max_tokens is None else {"max_tokens": r.max_tokens}
    if r.dataset is DatasetName.speed_bench:
        return load_speed_bench(r.input_file, categories=list(r.categories) or None, **cap), None
    if r.dataset is DatasetName.custom:
        return load_custom(r.input_file, max_tokens=r.max_tokens), None
    return load_gsm8k(r.input_file, num_shots=r.num_shots, shots_path=r.shots_file, **cap), None


async def served_model(
    http: aiohttp.ClientSession,
    base_url: str,
    model: str | None,
    headers: dict[str, str],
    timeout_s: float = 30.0,
) -> str:
    """Check the server answers; the model is ``model`` or the first of ``GET /v1/models``."""
    url = base_url.rstrip("/").removesuffix("/v1") + "/v1/models"
    shown = redact_url(url)
    try:
        async with http.get(url, timeout=aiohttp.ClientTimeout(total=timeout_s), headers=headers) as resp:
            status = resp.status
            raw = await read_bounded(resp, MAX_API_BYTES, f"GET {shown}")
    except TimeoutError:  # connected, and no whole answer: not "cannot reach" (its str() is empty)
        raise AlflowError(f"GET {shown}: the server sent no complete answer within {timeout_s:g} s") from None
    except aiohttp.ClientError as exc:
        why = redact_urls_in_text(str(exc) or type(exc).__name__)
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


async def resolve_metrics(
    http: aiohttp.ClientSession, r: BenchRequest, warn: Callable[[str], None]
) -> tuple[tuple[str, ...], Dialect] | None:
    """The metrics URLs and dialect, or None (after ``warn``) when the server exposes none.

    Several metrics URLs are one server's endpoints (nodes, data-parallel ranks): all must answer, and
    their counters are summed. Without one, the dialect's usual paths are tried.
    """
    if r.no_metrics:
        return None
    if r.metrics_urls:
        snap = await scrape_all(r.metrics_urls, session=http)
        return r.metrics_urls, get_dialect(r.dialect) if r.dialect != "auto" else detect(snap)
    problems: list[str] = []
    for url in candidate_metrics_urls(r.base_url, r.dialect):
        try:
            snap = await scrape(url, session=http)
            dialect = get_dialect(r.dialect) if r.dialect != "auto" else detect(snap)
        except (ScrapeError, MissingMetricsError) as exc:
            problems.append(str(exc))
            continue
        return (url,), dialect
    warn("no spec-decode metrics found (" + "; ".join(problems) + "): server-side stats skipped")
    return None


def stats_or_error(
    fn: Callable[..., SpecStats], *args: Any, **kwargs: Any
) -> tuple[SpecStats | None, str | None]:
    """``fn(*args, **kwargs)``, or its alflow error's message."""
    try:
        return fn(*args, **kwargs), None
    except AlflowError as exc:
        return None, str(exc)


def sampling_dict(s: Sampling) -> dict[str, Any]:
    """The sampling parameters that were set, as stored in the summary's config."""
    out = {
        name: getattr(s, name)
        for name in ("max_tokens", "temperature", "top_p", "top_k", "min_tokens", "ignore_eos", "seed")
        if getattr(s, name) is not None
    }
    if s.chat_template_kwargs:
        out["chat_template_kwargs"] = dict(s.chat_template_kwargs)
    if s.extra_body:
        out["extra_body"] = redact_body(s.extra_body)  # sent as given; stored without its secrets
    return out


def _config_block(r: BenchRequest, spec: LoadSpec) -> dict[str, Any]:
    random = r.dataset is DatasetName.random
    return {
        "base_url": r.base_url,
        "endpoint": r.endpoint,
        "dataset": r.dataset.value,
        "input_file": r.input_file,
        "input_sha256": file_sha256(r.input_file) if r.input_file is not None else None,
        "categories": list(r.categories),
        "concurrency": spec.concurrency,
        "client_processes": spec.processes,
        "auto_client_processes": spec.auto_processes,
        "request_rate": spec.request_rate,
        "arrival": spec.arrival,
        "num_prompts": spec.num_prompts,
        "duration_s": spec.duration_s,
        "warmup": spec.warmup,
        "isl": r.random.isl if random else None,
        "osl": r.random.osl if random else None,
        "range_ratio": r.random.range_ratio if random else None,
        "seed": r.seed,
        "sampling": sampling_dict(r.sampling),
    }


class _PromQLBaseline:
    """``measure``'s ``after_baseline`` for ``--prometheus-url``: the window's start read from Prometheus.

    After warm-up it waits until Prometheus has scraped every series of the counters the baseline
    scrape found (:func:`~alflow.metrics.promql.promql_start`); without a baseline (no metrics
    endpoint) the window starts at the load's start. A failure is kept for the summary, never
    raised: the measured run goes on.
    """

    def __init__(self, r: BenchRequest, url: str) -> None:
        self.r = r
        self.url = url
        self.start: PromQLStart | None = None
        self.error: str | None = None

    async def __call__(self, baseline: Snapshot | None) -> None:
        if baseline is None:
            return
        after_s = time.time()
        counters = baseline_counters(baseline)
        try:
            self.start = await asyncio.to_thread(
                promql_start, self.url, counters, after_s, selector=self.r.prometheus_selector
            )
        except ScrapeError as exc:
            self.error = f"the window's start could not be read after warm-up: {exc}"


async def _promql_block(
    r: BenchRequest, url: str, start_s: float, detected: Dialect | None, baseline: _PromQLBaseline
) -> dict[str, Any]:
    """The run's spec-decode counts over its window from a Prometheus server (``--prometheus-url``)."""
    if baseline.error is not None:
        return {"url": url, "stats": None, "error": baseline.error}
    dialect = detected if detected is not None else None if r.dialect == "auto" else get_dialect(r.dialect)
    if dialect is None:
        return {
            "url": url,
            "stats": None,
            "error": "no metrics endpoint to detect the framework from: give --dialect",
        }
    window = PromQLWindow(url, start_s, time.time(), selector=r.prometheus_selector, start=baseline.start)
    stats, error = await asyncio.to_thread(stats_or_error, dialect.spec_stats, window, k=r.k)
    return {"url": url, "stats": None if stats is None else dump_row(stats), "error": error}


_STOPPED = (asyncio.CancelledError, KeyboardInterrupt, SystemExit)
"""How an interruption (Ctrl-C, SIGTERM) reaches the load."""


def _keep_interrupted(
    r: BenchRequest, sink: list[RequestRecord], exc: BaseException, warn: Callable[[str], None]
) -> None:
    """A load that did not end: its records so far written to ``--out``; an interruption says so in one line."""
    if r.out is not None:
        try:
            write_records(r.out / "records.parquet", sink)
        except OSError as err:
            warn(
                f"--out {shown(str(r.out))}: cannot write the records ({err.strerror or type(err).__name__})"
            )
            return
    if isinstance(exc, _STOPPED):  # an error says its own line
        kept = f"kept in {r.out / 'records.parquet'}" if r.out is not None else "not kept (no --out)"
        warn(f"interrupted before it ended: {len(sink)} requests recorded, {kept}; no summary written")


def _without_secrets(summary: dict[str, Any], api_key: str | None) -> dict[str, Any]:
    """``summary`` as it is stored and returned: no URL's credential, no API key, anywhere, keys included.

    ``errors`` is keyed by error texts (a server's answer may quote the key it got, R13-4): they are redacted as
    the records' ``error`` column is, texts that become alike counted together.
    """
    secrets = [api_key or ""]
    clean = cast(dict[str, Any], redact_data(orjson.loads(jsonutil.dumps_bytes(summary)), secrets))
    if isinstance(clean.get("errors"), dict):
        errors: dict[str, Any] = {}
        for text, count in clean["errors"].items():
            key = redact_urls_in_text(text, secrets)
            errors[key] = errors.get(key, 0) + count
        clean["errors"] = errors
    return clean


async def bench_async(
    r: BenchRequest, *, progress: Progress | None = None, warn: Callable[[str], None] = lambda _: None
) -> BenchResult:
    """Run one benchmark (see the module docstring); an aborted run raises after writing its records."""
    spec = r.spec
    num_prompts = spec.num_prompts or (10 * spec.concurrency if r.dataset is DatasetName.random else 0)
    is_random = r.dataset is DatasetName.random
    if is_random:
        check_random_prompts(r.random.isl, num_prompts, spec.warmup)
    check_open_files(spec)
    sessions, warm = ([], None) if is_random else load_sessions(r, num_prompts or 1)  # a file's errors first
    if spec.num_prompts is None and is_random and spec.duration_s is None:
        spec = replace(spec, num_prompts=num_prompts)
    sink: list[RequestRecord] = []
    async with aiohttp.ClientSession() as http:
        model = await served_model(http, r.base_url, r.model, r.headers)
        if is_random:  # drawn once the server answers: a minute of drawing must not end in "cannot reach"
            sessions, warm = load_sessions(r, num_prompts)
        target = Target(r.base_url, model, endpoint=r.endpoint, sampling=r.sampling, api_key=r.api_key)
        if r.endpoint == "chat" and any(not isinstance(t.prompt, str) for s in sessions for t in s.turns):
            sessions = await detokenize_sessions(sessions, r.base_url, model, headers=r.headers)
            if warm:
                warm = await detokenize_sessions(warm, r.base_url, model, headers=r.headers)
        metrics = await resolve_metrics(http, r, warn)
        promql_baseline = _PromQLBaseline(r, r.prometheus_url) if r.prometheus_url else None
        try:
            m = await measure(
                sessions,
                target,
                spec,
                metrics_url=None if metrics is None else metrics[0],
                dialect=None if metrics is None else metrics[1],
                k=r.k,
                warmup_sessions=warm,
                scrape_interval_s=r.scrape_interval_s,
                gpus=r.gpus,
                slo=r.slo,
                percentiles=list(r.percentiles),
                progress=progress,
                sink=sink,
                session=http,
                after_baseline=promql_baseline,
            )
        except BaseException as exc:
            _keep_interrupted(r, sink, exc, warn)
            raise
        aborted = m.aborted
        spec_block: dict[str, Any] = {"dialect": None, "metrics_url": None}
        if metrics is not None and aborted is None:
            spec_block = {"metrics_url": " + ".join(metrics[0]), **m.spec_block()}
            if len(metrics[0]) > 1:
                spec_block["metrics_urls"] = list(metrics[0])
            spec_block.update(await metrics[1].server_info(r.base_url, session=http, headers=r.headers))
        if r.prometheus_url and promql_baseline is not None and aborted is None:
            spec_block["prometheus"] = await _promql_block(
                r, r.prometheus_url, m.wall_start_s, None if metrics is None else metrics[1], promql_baseline
            )
    summary = {
        **dump_row(m.client),
        "model": model,
        "aborted": aborted,
        "spec_decode": spec_block,
        "config": _config_block(r, spec),
    }
    summary = _without_secrets(summary, r.api_key)
    out_error = None if r.out is None else _write_out(r.out, m.records, m.snapshots(), summary)
    if aborted is not None:
        kept = f" (partial records in {r.out / 'records.parquet'})" if r.out else ""
        raise AlflowError(aborted + (f"; {out_error}" if out_error else kept))
    if not summary.get("completed"):  # nothing measured is no clean run (a --duration shorter than a request)
        summary["all_ok"] = False
    return BenchResult(summary, m.client.all_ok and bool(summary.get("completed")), out_error)


def _write_out(out: Path, records: Any, snapshots: object, summary: dict[str, Any]) -> str | None:
    """Write the run's files into ``out``; None, or why they could not be (one line: the summary is still shown).

    ``out`` was checked before the load (:func:`check_out_dir`), but a disk can fill up or a folder go away since.
    """
    try:
        out.mkdir(parents=True, exist_ok=True)
        write_records(out / "records.parquet", records)
        atomic_write_bytes(
            out / "snapshots.json", jsonutil.dumps_bytes(snapshots)
        )  # whole or none: a full disk
        atomic_write_bytes(
            out / "summary.json", jsonutil.dumps_bytes(summary)
        )  # left a truncated file (round 17)
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        return f"--out {shown(str(out))}: cannot write the run's files ({why})"
    return None


def bench(
    r: BenchRequest, *, progress: Progress | None = None, warn: Callable[[str], None] = lambda _: None
) -> BenchResult:
    """:func:`bench_async` on its own event loop (uvloop's when installed)."""
    return run_coroutine(bench_async(r, progress=progress, warn=warn))


@dataclass(frozen=True)
class MetricsSnapshot:
    """One scrape of a server's metrics and what its spec-decode counters say since the server started."""

    snapshot: Snapshot
    url: str
    dialect: Dialect | None
    stats: SpecStats | None
    error: str | None


async def _scrape_with_dialect(urls: list[str], dialect_name: str) -> tuple[Snapshot, Dialect | None, str]:
    def find(snap: Snapshot) -> Dialect | None:
        try:
            return get_dialect(dialect_name) if dialect_name != "auto" else detect(snap)
        except MissingMetricsError:
            return None

    async with aiohttp.ClientSession() as http:
        if len(urls) > 1:  # several endpoints of one server: all must answer, counters summed
            snap = await scrape_all(urls, session=http)
            return snap, find(snap), snap.url
        url = urls[0]
        tries = [url] if urlparse(url).path not in ("", "/") else candidate_metrics_urls(url, dialect_name)
        problems: list[str] = []
        for u in tries:
            try:
                snap = await scrape(u, session=http)
            except ScrapeError as exc:
                problems.append(str(exc))
                continue
            return snap, find(snap), u
        raise AlflowError("; ".join(problems))


def snapshot_metrics(urls: list[str], dialect_name: str = "auto", k: int | None = None) -> MetricsSnapshot:
    """Scrape once: the metrics URL (or a base URL, the path found), or several endpoints of one server summed.

    Spec-decode statistics are lifetime counters (since the server started), read against an empty scrape.
    """
    if not urls:
        raise InvalidInputError("give the metrics URL (or the server's base URL): URL or --url URL")
    check_dialect(dialect_name)
    snap, dialect, used = run_coroutine(_scrape_with_dialect(urls, dialect_name))
    empty = Snapshot(
        used,
        snap.wall_time_s,
        snap.mono_ns,
        {},
        {},
        tuple(Snapshot(u, snap.wall_time_s, snap.mono_ns, {}, {}) for u in snap.urls) if snap.parts else (),
    )
    stats, err = (
        (None, "no vllm:, sglang: or trtllm_ metrics")
        if dialect is None
        else stats_or_error(dialect.spec_stats, SnapshotWindow(empty, snap), k=k)
    )
    return MetricsSnapshot(snap, used, dialect, stats, err)
