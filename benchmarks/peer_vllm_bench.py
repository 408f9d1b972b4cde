"""alflow's client against its peer, ``vllm bench serve``, on one real vLLM server (CPU build, SmolLM2-135M).

Run from the repository root after ``bash scripts/setup.sh --vllm`` (prints a table; not a test):

    .venv/bin/python benchmarks/peer_vllm_bench.py [--isl 128] [--osl 64] [--concurrency 1,4]
        [--prompts-per-concurrency 8] [--repeats 1] [--json]

One vLLM server (the demo's: ``alflow_flows.demo.vllm_cpu_server``, n-gram drafting K = 3, bf16, eager, the
process runner from ``.venv-vllm``; prefix caching off, the recipe's default, so the client that goes
second does not find the first one's prompts cached) serves both clients with **the same prompts**: for each repeat and
concurrency the benchmark draws ``N = prompts-per-concurrency x concurrency`` random-token prompts of
``--isl`` tokens (alflow's ``random_sessions``), turns them into text through the server's
``/detokenize`` and writes them to one JSONL file in ``vllm bench serve``'s custom format. Both clients
read that file (``alflow bench --dataset custom``; ``vllm bench serve --dataset-name custom
--skip-chat-template --disable-shuffle``), send the texts in the file's order to ``/v1/completions``,
greedy, exactly ``--osl`` output tokens (``ignore_eos``), after a warm-up with the file's first
prompt. The server tokenizes the same text the same way for both, so the prompt tokens are equal (a
decoded random text re-tokenizes to about ``--isl`` tokens, not exactly; the table shows the mean).
Within a repeat the clients alternate (alflow first on even repeats, vLLM's first on odd ones) so a
drift of the shared CPU does not favour one of them. Before the pair, an unmeasured pass sends the
same file at the same concurrency (``--warmup-pass``, on by default): without it the client that went
first in a pair was the slower one in 8 of 10 pairs (the server meets each new prompt and batch shape
first in that client's run); ``--no-warmup-pass`` measures that effect.

Per client and concurrency:

- output throughput (tok/s) and the median TTFT, TPOT and ITL (ms), each as the client itself reports
  them (alflow's ``--json`` summary; ``vllm bench serve --save-result``'s JSON); both define TPOT per
  request as ``(e2el - ttft) / (output tokens - 1)`` and ITL as the gaps between streamed chunks;
- AL from the server's own counters (``vllm:spec_decode_*``) scraped just before and after the
  client's run: ``1 + accepted / drafts`` over exactly that client's window, through alflow's vLLM
  dialect (the same arithmetic for both clients); beside it the AL each client reports itself
  (``vllm bench serve`` reads the same counters before and after its run);
- alflow bench scrapes the server only before and after its measured phase here (``--scrape-interval
  0``, the default of this benchmark; alflow bench's own default scrapes ``/metrics`` every second,
  which costs a CPU-bound server some throughput: ``--scrape-interval 1`` measures that);
- client CPU: user + system CPU of the client's process tree, read from ``/proc`` every 0.25 s: in
  total, before the measured phase (interpreter start, imports, tokenizer loading, warm-up: vLLM's
  client imports torch), and per output token during the measured phase, from its first request's
  start to its last request's end (both clients time requests on ``time.perf_counter``, the
  CLOCK_MONOTONIC every process here shares).

Targets (issue #15): alflow's throughput and median TPOT within 3% of ``vllm bench serve``'s, the
same AL, and no more client CPU per token. Throughput is judged on the geometric mean of the per-repeat
paired ratios; median TPOT on the median over every measured request of all repeats, with a paired
bootstrap 95% interval: both clients send the same prompts in the same order with the same output
length, so request ``i`` of one and request ``i`` of the other met the same batches, and the bootstrap
resamples prompts (both clients' requests of a prompt together). At concurrency 4 a request's TPOT
depends on which requests shared its steps (100-800 ms on the CPU server), so resampling each client's
requests on its own says how spread the requests are, not how far apart the clients are. The server
and both clients share two CPU cores here: the client's CPU use is also the server's loss
(``--client-cpus`` pins the clients).

``--synthetic-al AL`` is M2's row: the server forces mean AL ``AL`` (synthetic acceptance; on the CPU build
through alflow's port of vLLM's kernel rule, the model drafting for itself), and both clients' AL and steps
must agree with each other and sit at the target.

``--server sim`` runs the same comparison on alflow's simulated engine (vLLM's dialect and counters,
n-gram K = 3, a GPU timing profile in real time): its step times are a function of the batch alone, so
what differs between the two clients' figures there is what the clients do, not the server's noise.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import json
import math
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp
import polars as pl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from alflow.config import (  # noqa: E402
    ProcessOptions,
    ServerConfig,
    SpecMethod,
    SpeculativeConfig,
    SyntheticAcceptance,
    server_config,
)
from alflow.datasets.random_tokens import detokenize_sessions, random_sessions  # noqa: E402
from alflow.frameworks.vllm import names as vllm_names  # noqa: E402
from alflow.metrics.client import per_request  # noqa: E402
from alflow.metrics.prometheus import Snapshot, SnapshotWindow, parse_exposition  # noqa: E402
from alflow.metrics.readers import get_dialect  # noqa: E402
from alflow.models import default_vllm_env, prepare_model  # noqa: E402
from alflow_flows.demo import VLLM_MODEL_ID, vllm_cpu_server  # noqa: E402
from alflow_infra import lifecycle  # noqa: E402

K = 3


@dataclass(frozen=True)
class ClientRun:
    """One client's measured run at one concurrency."""

    client: str
    concurrency: int
    repeat: int
    prompts: int
    completed: int
    input_tokens: int
    output_tokens: int
    output_throughput: float
    median_ttft_ms: float
    median_tpot_ms: float
    mean_tpot_ms: float
    median_itl_ms: float
    al: float | None
    """AL over the client's window from the benchmark's own scrapes, through alflow's vLLM dialect."""
    client_al: float | None
    """AL as the client itself reports it (alflow's spec_decode stats; vLLM's spec_decode_acceptance_length)."""
    drafts: int
    cpu_s: float
    """User + system CPU seconds of the client's whole run (start-up and warm-up included)."""
    phase_cpu_s: float
    """CPU seconds of the measured phase: from its first request's start to its last request's end."""
    startup_cpu_s: float
    """CPU seconds before the measured phase (interpreter, imports, tokenizer, warm-up)."""
    wall_s: float
    tpots_ms: tuple[float, ...] = ()
    """TPOT of every measured request in the prompt file's order (NaN where undefined or failed), as the
    client defines it: ``(e2el - ttft) / (output tokens - 1)``. Entry ``i`` of both clients is the same prompt."""
    server_mean_tpot_ms: float | None = None
    """The server's own mean TPOT over the client's window: vLLM's ``vllm:request_time_per_output_token_seconds``
    (per finished request ``(last token - first token) / (generation tokens - 1)`` on the engine's clock),
    ``sum / count`` between the scrapes; None where the server does not export it."""
    server_mean_ttft_ms: float | None = None
    """The server's own mean TTFT over the window (``vllm:time_to_first_token_seconds``), likewise."""
    server_requests: int = 0
    """Requests the server finished in the window (the TPOT histogram's count)."""


def _scrape(base_url: str) -> Snapshot:
    async def get() -> str:
        async with aiohttp.ClientSession() as http, http.get(base_url + "/metrics") as r:
            r.raise_for_status()
            return await r.text()

    return parse_exposition(asyncio.run(get()))


def _get_json(url: str) -> dict[str, Any]:
    async def get() -> dict[str, Any]:
        async with aiohttp.ClientSession() as http, http.get(url) as r:
            r.raise_for_status()
            data = await r.json()
            return data if isinstance(data, dict) else {}

    return asyncio.run(get())


def _server_mean_ms(before: Snapshot, after: Snapshot, family: str) -> tuple[float | None, int]:
    """Mean of histogram ``family`` (seconds) over the window between two scrapes, in ms, and its count."""
    window = SnapshotWindow(before, after)
    total, count = window.increase(family + "_sum"), window.increase(family + "_count")
    if total is None or not count:
        return None, 0
    return 1000.0 * total / count, int(count)


def _al(before: Snapshot, after: Snapshot) -> tuple[float | None, int]:
    """AL and speculative steps of the window between two scrapes (alflow's vLLM dialect)."""
    stats = get_dialect("vllm").spec_stats(SnapshotWindow(before, after), k=K)
    return stats.al, int(stats.num_drafts)


_TICK = os.sysconf("SC_CLK_TCK")
POLL_S = 0.25


def _tree_cpu(pid: int) -> float:
    """CPU seconds (user + system) of ``pid``, its reaped children and its live descendants, from /proc."""
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue  # exited meanwhile: its CPU is in its parent's cutime once reaped
        # after the command name: state, ppid, ... utime (index 11), stime, cutime, cstime (14)
        total += sum(int(x) for x in fields[11:15]) / _TICK
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
    return total


@dataclass(frozen=True)
class CpuTrace:
    """The client tree's CPU seconds sampled every ``POLL_S`` on ``time.perf_counter`` (CLOCK_MONOTONIC)."""

    times: tuple[float, ...]
    cpu: tuple[float, ...]

    def at(self, t: float) -> float:
        """CPU seconds used by ``t`` (linear between samples)."""
        k = bisect.bisect_left(self.times, t)
        if k == 0:
            return self.cpu[0]
        if k >= len(self.times):
            return self.cpu[-1]
        t0, t1, c0, c1 = self.times[k - 1], self.times[k], self.cpu[k - 1], self.cpu[k]
        return c0 + (c1 - c0) * (t - t0) / (t1 - t0) if t1 > t0 else c1

    def between(self, start: float, end: float) -> float:
        """CPU seconds used in ``[start, end]``."""
        return self.at(end) - self.at(start)


def _timed(
    argv: list[str], env: dict[str, str] | None = None, cpus: frozenset[int] | None = None
) -> tuple[float, float, str, CpuTrace]:
    """Run ``argv``: CPU seconds of its reaped process tree, wall seconds, stdout, and its CPU over time.

    Fails loudly with the client's stderr. The server is not a child of this process (the process
    runner's guard is), so only the client's tree is counted. Both clients time their requests with
    ``time.perf_counter`` (CLOCK_MONOTONIC, shared by every process here), so the trace gives the CPU
    of exactly their measured phase.
    """
    usage = os.times()
    before = usage.children_user + usage.children_system
    times: list[float] = []
    cpu: list[float] = []
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.monotonic()
        pin = None if cpus is None else (lambda: os.sched_setaffinity(0, cpus))
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env, cwd=ROOT, preexec_fn=pin)  # noqa: PLW1509
        try:
            while proc.poll() is None:
                times.append(time.perf_counter())
                cpu.append(_tree_cpu(proc.pid))
                time.sleep(POLL_S)
        except BaseException:  # interrupted (SIGTERM, Ctrl-C): no client is left behind
            proc.kill()
            proc.wait()
            raise
        wall = time.monotonic() - started
        usage = os.times()
        total = usage.children_user + usage.children_system - before
        times.append(time.perf_counter())
        cpu.append(total)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode(errors="replace")
    if proc.returncode != 0:
        raise SystemExit(f"error: {Path(argv[0]).name} exited {proc.returncode}:\n{stderr[-3000:]}")
    return total, wall, stdout, CpuTrace(tuple(times), tuple(cpu))


def _write_prompts(base_url: str, model: str, path: Path, n: int, isl: int, seed: int, vocab: int) -> None:
    """``n`` random-token prompts of ``isl`` tokens as text (the server's /detokenize), custom JSONL."""
    token_ids = random_sessions(n, isl=isl, osl=1, range_ratio=1.0, seed=seed, vocab_size=vocab)
    texts = asyncio.run(detokenize_sessions(token_ids, base_url, model))
    path.write_bytes(b"".join(json.dumps({"prompt": s.turns[0].prompt}).encode() + b"\n" for s in texts))


def _alflow_argv(
    base_url: str,
    model: str,
    prompts: Path,
    osl: int,
    conc: int,
    n: int,
    scrape_interval: float = 0.0,
    out: Path | None = None,
    extra_body: str | None = None,
) -> list[str]:
    return [
        str(Path(sys.executable).with_name("alflow")),
        "bench",
        "--base-url",
        base_url,
        "--model",
        model,
        "--endpoint",
        "completions",
        "--dataset",
        "custom",
        "--input-file",
        str(prompts),
        "--max-tokens",
        str(osl),
        "--concurrency",
        str(conc),
        "--num-prompts",
        str(n),
        "--warmup",
        "1",
        "--temperature",
        "0",
        "--ignore-eos",
        "--k",
        str(K),
        "--scrape-interval",
        str(scrape_interval),
        "--no-progress",
        "--json",
        *(["--out", str(out)] if out is not None else []),
        *(["--extra-body", extra_body] if extra_body else []),
    ]


def _vllm_argv(
    env: Path,
    base_url: str,
    model: str,
    model_dir: str,
    prompts: Path,
    osl: int,
    conc: int,
    n: int,
    out: Path,
) -> list[str]:
    return [
        str(env / "bin" / "vllm"),
        "bench",
        "serve",
        "--backend",
        "vllm",
        "--base-url",
        base_url,
        "--endpoint",
        "/v1/completions",
        "--model",
        model,
        "--tokenizer",
        model_dir,
        "--dataset-name",
        "custom",
        "--dataset-path",
        str(prompts),
        "--skip-chat-template",
        "--disable-shuffle",
        "--custom-output-len",
        str(osl),
        "--num-prompts",
        str(n),
        "--max-concurrency",
        str(conc),
        "--ignore-eos",
        "--num-warmups",
        "1",
        "--temperature",
        "0",
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "50",
        "--disable-tqdm",
        "--save-result",
        "--save-detailed",
        "--result-dir",
        str(out.parent),
        "--result-filename",
        out.name,
    ]


def _client_run(
    client: str,
    conc: int,
    n: int,
    repeat: int,
    summary: dict[str, Any],
    scrapes: tuple[Snapshot, Snapshot],
    measured: tuple[float, float],
    timing: tuple[float, float, CpuTrace],
    tpots_ms: tuple[float, ...],
) -> ClientRun:
    """One run from a client's summary (alflow's --json and vLLM's saved result share these key names).

    ``measured`` is the measured phase on ``time.perf_counter``; ``timing`` is (CPU, wall, CPU trace).
    """
    al, drafts = _al(*scrapes)
    server_tpot, server_requests = _server_mean_ms(*scrapes, vllm_names.VLLM_REQUEST_TPOT_SECONDS)
    server_ttft, _ = _server_mean_ms(*scrapes, vllm_names.VLLM_TTFT_SECONDS)
    cpu, wall, trace = timing
    return ClientRun(
        client,
        conc,
        repeat,
        n,
        int(summary["completed"]),
        int(summary["total_input_tokens"]),
        int(summary["total_output_tokens"]),
        float(summary["output_throughput"]),
        float(summary["median_ttft_ms"]),
        float(summary["median_tpot_ms"]),
        float(summary["mean_tpot_ms"]),
        float(summary["median_itl_ms"]),
        al,
        _client_al(summary),
        drafts,
        cpu,
        trace.between(*measured),
        trace.at(measured[0]),
        wall,
        tpots_ms,
        server_tpot,
        server_ttft,
        server_requests,
    )


def _client_al(summary: dict[str, Any]) -> float | None:
    """The AL the client reports: alflow's ``spec_decode.stats.al``, vLLM's ``spec_decode_acceptance_length``."""
    if "spec_decode" in summary:
        stats = (summary["spec_decode"] or {}).get("stats") or {}
        value = stats.get("al")
    else:
        value = summary.get("spec_decode_acceptance_length")
    return None if value is None else float(value)


def _alflow_run(
    base_url: str, prompts: Path, conc: int, n: int, repeat: int, args: argparse.Namespace, tmp: Path
) -> ClientRun:
    before = _scrape(base_url)
    out = tmp / f"alflow-c{conc}-r{repeat}"
    cpu, wall, stdout, trace = _timed(
        _alflow_argv(
            base_url,
            args.served,
            prompts,
            args.osl,
            conc,
            n,
            args.scrape_interval,
            out,
            args.alflow_extra_body,
        ),
        cpus=args.client_cpus,
    )
    after = _scrape(base_url)
    summary = json.loads(stdout)
    frame = pl.read_parquet(out / "records.parquet").filter(~pl.col("warmup"))
    first, last = frame["start_ns"].to_list(), frame["done_ns"].drop_nulls().to_list()
    measured = (min(first) / 1e9, max(last) / 1e9)
    tpots = _alflow_tpots(per_request(frame), n)
    return _client_run(
        "alflow bench", conc, n, repeat, summary, (before, after), measured, (cpu, wall, trace), tpots
    )


def _vllm_run(
    env: Path, base_url: str, model_dir: str, prompts: Path, conc: int, n: int, repeat: int,
    args: argparse.Namespace, tmp: Path,
) -> ClientRun:  # fmt: skip
    out = tmp / f"vllm-c{conc}-r{repeat}.json"
    before = _scrape(base_url)
    cpu, wall, _, trace = _timed(
        _vllm_argv(env, base_url, args.served, model_dir, prompts, args.osl, conc, n, out),
        _vllm_env(env),
        cpus=args.client_cpus,
    )
    after = _scrape(base_url)
    summary = json.loads(out.read_text())
    starts, latencies = summary["start_times"], summary["latencies"]
    measured = (min(starts), max(s + lat for s, lat in zip(starts, latencies, strict=True)))
    tpots = _vllm_tpots(summary)
    return _client_run(
        "vllm bench serve", conc, n, repeat, summary, (before, after), measured, (cpu, wall, trace), tpots
    )


def _alflow_tpots(requests: pl.DataFrame, n: int) -> tuple[float, ...]:
    """alflow's per-request TPOT (ms) by prompt: session ``custom-L`` is line ``L`` of the prompt file."""
    out = [math.nan] * n
    for session, ok, tpot in requests.select("session_id", "ok", "tpot_ms").iter_rows():
        line = int(str(session).removeprefix("custom-"))
        if ok and tpot is not None and 1 <= line <= n:
            out[line - 1] = float(tpot)
    return tuple(out)


def _vllm_tpots(result: dict[str, Any]) -> tuple[float, ...]:
    """``vllm bench serve``'s per-request TPOT (ms) by prompt (its lists keep the file's order with
    ``--disable-shuffle``): ``(latency - ttft) / (output_len - 1)``, NaN for a failed or one-token request."""
    errors = result.get("errors") or [""] * len(result["latencies"])
    rows = zip(result["latencies"], result["ttfts"], result["output_lens"], errors, strict=True)
    return tuple(
        1000.0 * (lat - ttft) / (out_len - 1) if out_len > 1 and not err else math.nan
        for lat, ttft, out_len, err in rows
    )


def _vllm_env(env: Path) -> dict[str, str]:
    out = dict(os.environ)
    out["PATH"] = f"{env / 'bin'}:{out.get('PATH', '')}"
    out["VIRTUAL_ENV"] = str(env)
    out.setdefault("HF_HUB_OFFLINE", "1")
    return out


def _median(values: list[float]) -> float:
    vals = sorted(values)
    mid = len(vals) // 2
    return vals[mid] if len(vals) % 2 else (vals[mid - 1] + vals[mid]) / 2


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.3f}" if b else "-"


def _paired_ratio(runs: list[ClientRun], conc: int, value: Callable[[ClientRun], float]) -> float:
    """Geometric mean over repeats of alflow's value / vLLM's value at ``conc``."""
    logs = []
    for repeat in sorted({r.repeat for r in runs if r.concurrency == conc}):
        pair = {r.client: value(r) for r in runs if r.concurrency == conc and r.repeat == repeat}
        if len(pair) == 2 and all(v > 0 for v in pair.values()):
            logs.append(math.log(pair["alflow bench"] / pair["vllm bench serve"]))
    return math.exp(sum(logs) / len(logs)) if logs else float("nan")


def _paired_tpots(runs: list[ClientRun], conc: int, per_server: bool = False) -> list[tuple[float, float]]:
    """(alflow's TPOT, vLLM's TPOT) of the same prompt in the same repeat, for every prompt both measured.

    ``per_server``: each TPOT divided by the server's own mean TPOT in that client's window (runs without
    it are left out), so what the server's speed did between the two windows cancels.
    """

    def tpots(r: ClientRun) -> tuple[float, ...]:
        if not per_server:
            return r.tpots_ms
        return tuple(t / r.server_mean_tpot_ms for t in r.tpots_ms) if r.server_mean_tpot_ms else ()

    by_key = {(r.client, r.repeat): tpots(r) for r in runs if r.concurrency == conc}
    pairs = []
    for (client, repeat), a in sorted(by_key.items()):
        v = by_key.get(("vllm bench serve", repeat))
        if client != "alflow bench" or v is None:
            continue
        pairs += [(x, y) for x, y in zip(a, v, strict=False) if math.isfinite(x) and math.isfinite(y)]
    return pairs


def _pooled_median_ratio(
    runs: list[ClientRun], conc: int, resamples: int = 2000, per_server: bool = False
) -> tuple[float, float, float]:
    """alflow's median TPOT over every measured request of every repeat / vLLM's, with a paired bootstrap 95% interval.

    At concurrency > 1 a request's TPOT depends on which other requests it shared steps with (from 100 to
    800 ms on the CPU server), so the median of a few requests moves by 10% between runs. But both
    clients send the same prompts in the same order with the same output length, so request ``i`` of
    one client and request ``i`` of the other met the same batches when the clients behave alike: the
    bootstrap resamples *prompts* (both clients' requests for a prompt together), which keeps that
    pairing; resampling the two sides independently (as this benchmark did before) reports the spread of
    the requests, not of the comparison. ``per_server``: on TPOTs relative to the server's own (see
    :func:`_paired_tpots`).
    """
    pairs = _paired_tpots(runs, conc, per_server)
    if not pairs:
        return float("nan"), float("nan"), float("nan")
    rng = random.Random(0)
    ratios = []
    for _ in range(resamples):
        sample = rng.choices(pairs, k=len(pairs))
        ratios.append(statistics.median(a for a, _ in sample) / statistics.median(v for _, v in sample))
    ratios.sort()
    return (
        statistics.median(a for a, _ in pairs) / statistics.median(v for _, v in pairs),
        ratios[int(0.025 * resamples)],
        ratios[int(0.975 * resamples) - 1],
    )


def _table(runs: list[ClientRun], concurrencies: list[int]) -> str:
    lines = [
        "| conc | client | in tok/req | tok/s | TTFT ms | TPOT ms | mean TPOT ms | server's mean TPOT ms "
        "| mean TPOT / server's | ITL ms | AL | client's AL | steps | CPU s | start-up CPU s | CPU ms/tok | runs |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    summary: list[str] = []
    for conc in concurrencies:
        agg: dict[str, dict[str, float]] = {}
        for client in ("alflow bench", "vllm bench serve"):
            rs = [r for r in runs if r.client == client and r.concurrency == conc]
            al_values = [r.al for r in rs if r.al is not None]
            tokens = sum(r.output_tokens for r in rs)
            a = {
                "isl": sum(r.input_tokens for r in rs) / max(1, sum(r.completed for r in rs)),
                "tps": _median([r.output_throughput for r in rs]),
                "ttft": _median([r.median_ttft_ms for r in rs]),
                "tpot": _median([r.median_tpot_ms for r in rs]),
                "mtpot": _median([r.mean_tpot_ms for r in rs]),
                "stpot": _median(st)
                if (st := [r.server_mean_tpot_ms for r in rs if r.server_mean_tpot_ms])
                else math.nan,
                "fid": _median(fid) if (fid := _fidelity(rs)) else math.nan,
                "itl": _median([r.median_itl_ms for r in rs]),
                "al": _median(al_values) if al_values else float("nan"),
                "cal": _median(cal)
                if (cal := [r.client_al for r in rs if r.client_al is not None])
                else float("nan"),
                "steps": sum(r.drafts for r in rs),
                "cpu_total": sum(r.cpu_s for r in rs),
                "startup": _median([r.startup_cpu_s for r in rs]),
                "cpu": 1000.0 * sum(r.phase_cpu_s for r in rs) / tokens if tokens else float("nan"),
            }
            agg[client] = a
            lines.append(
                f"| {conc} | {client} | {a['isl']:.1f} | {a['tps']:.2f} | {a['ttft']:.1f} | {a['tpot']:.2f} "
                f"| {a['mtpot']:.2f} | {a['stpot']:.2f} | {a['fid']:.3f} | {a['itl']:.2f} | {a['al']:.3f} | {a['cal']:.3f} | {a['steps']:.0f} | {a['cpu_total']:.2f} "
                f"| {a['startup']:.2f} | {a['cpu']:.2f} | {len(rs)} |"
            )
        x, y = agg["alflow bench"], agg["vllm bench serve"]
        ratios = " | ".join(
            _ratio(x[key], y[key])
            for key in ("isl", "tps", "ttft", "tpot", "mtpot", "stpot", "fid", "itl", "al", "cal")
        )
        lines.append(
            f"| {conc} | ratio alflow/vllm | {ratios} | | {_ratio(x['cpu_total'], y['cpu_total'])} "
            f"| {_ratio(x['startup'], y['startup'])} | {_ratio(x['cpu'], y['cpu'])} | |"
        )
        # paired by repeat (same prompts, adjacent in time; the order alternates, so with an even number of
        # repeats the position in the pair cancels): the geometric mean of the per-repeat ratios
        tps_ratio = _paired_ratio(runs, conc, lambda r: r.output_throughput)
        tpot_ratio = _paired_ratio(runs, conc, lambda r: r.median_tpot_ms)
        lines.append(
            f"| {conc} | paired ratio (geometric mean over repeats) | | {tps_ratio:.3f} | | {tpot_ratio:.3f} "
            "| | | | | | | | | | | |"
        )
        pooled, low, high = _pooled_median_ratio(runs, conc)
        lines.append(
            f"| {conc} | median over all requests of all repeats | | | | {pooled:.3f} [{low:.3f}, {high:.3f}] "
            "| | | | | | | | | | | |"
        )
        # the same against the server's own clock: throughput x the server's mean TPOT in the window (tokens per
        # server TPOT), each request's TPOT / the server's mean TPOT in its window
        tps_server = _paired_ratio(
            runs,
            conc,
            lambda r: r.output_throughput * r.server_mean_tpot_ms if r.server_mean_tpot_ms else 0.0,
        )
        norm, norm_low, norm_high = _pooled_median_ratio(runs, conc, per_server=True)
        if math.isfinite(norm):
            lines.append(
                f"| {conc} | against the server's own TPOT in each window | | {tps_server:.3f} | | "
                f"{norm:.3f} [{norm_low:.3f}, {norm_high:.3f}] | | | {_ratio(x['fid'], y['fid'])} "
                "| | | | | | | | |"
            )
        cpu_ok = x["cpu"] <= y["cpu"]
        summary.append(
            f"concurrency {conc}: throughput (paired) {tps_ratio:.3f}: within 3%: {_yes(tps_ratio)}; median TPOT "
            f"(all requests pooled) {pooled:.3f}, paired bootstrap 95% interval {low:.3f}-{high:.3f}: within 3%: "
            f"{_yes(pooled)}; AL {x['al']:.3f} vs {y['al']:.3f}; client CPU per token in the measured phase not above "
            f"vLLM's: {'yes' if cpu_ok else 'NO'}"
        )
        if math.isfinite(norm):
            summary.append(
                f"concurrency {conc}, against the server's own TPOT in each client's window (the server's speed "
                f"between the windows cancels): throughput {tps_server:.3f}: within 3%: {_yes(tps_server)}; median "
                f"TPOT {norm:.3f} ({norm_low:.3f}-{norm_high:.3f}): within 3%: {_yes(norm)}; mean TPOT / the "
                f"server's {x['fid']:.3f} vs {y['fid']:.3f}"
            )
    return "\n".join([*lines, "", *summary])


def _yes(ratio: float) -> str:
    """``yes`` when ``ratio`` is within 3% of 1, ``NO`` when not, ``-`` when there is none."""
    if not math.isfinite(ratio):
        return "-"
    return "yes" if abs(ratio - 1) <= 0.03 else "NO"


def _fidelity(runs: list[ClientRun]) -> list[float]:
    """Per run: the client's mean TPOT / the server's own mean TPOT over the same window.

    The server's figure is the engine's ``(last token - first token) / (tokens - 1)`` per finished request,
    the client's definition on the other end of the stream; its window also holds the client's one warm-up
    request (both clients send one). Equal ratios for both clients mean they measure the server alike, so a
    gap between their TPOTs is the server running differently in their windows, not the clients' clocks.
    """
    return [r.mean_tpot_ms / r.server_mean_tpot_ms for r in runs if r.server_mean_tpot_ms]


def _load_runs(path: Path) -> list[ClientRun]:
    """The runs a ``--save`` file holds; a ValueError naming the file when it is not such a file."""
    try:
        rows = json.loads(path.read_text())
        runs = [ClientRun(**{**row, "tpots_ms": tuple(row.get("tpots_ms") or ())}) for row in rows]
    except (OSError, ValueError, TypeError, AttributeError) as exc:
        raise ValueError(f"--report {path}: not a file of saved runs ({exc})") from None
    if not runs:
        raise ValueError(f"--report {path}: holds no runs")
    return runs


def _as_json(runs: list[ClientRun]) -> str:
    return json.dumps([asdict(r) for r in runs], indent=2) + "\n"


def _server(args: argparse.Namespace, model_dir: str) -> tuple[ServerConfig, str]:
    """The server both clients measure, and the model name it serves.

    ``vllm``: the demo's real vLLM CPU server. ``sim``: alflow's simulated engine in vLLM's dialect (n-gram
    K = 3, natural acceptance, the ``--sim-profile`` timing in real time): its step times are a
    deterministic function of the batch, so the clients' figures differ only by what the clients do.
    """
    synthetic = None if args.synthetic_al is None else SyntheticAcceptance(target_al=args.synthetic_al)
    if args.server == "sim":
        config = server_config(
            framework="sim",
            model="smollm2-135m",
            sim_dialect="vllm",
            speculative=SpeculativeConfig(method=SpecMethod.NGRAM, k=K),
            synthetic=synthetic,
            extra_args=("--profile", args.sim_profile, "--time-scale", f"{args.sim_time_scale:g}"),
        )
        return config, "sim/smollm2-135m"
    config = vllm_cpu_server(model_dir, k=K)
    if synthetic is not None:
        # M2's server: forced acceptance through alflow's CPU port; the model drafts for itself (n-gram proposes
        # nothing on random-token prompts, so no step could carry the forced length)
        config = config.model_copy(
            update={
                "speculative": SpeculativeConfig(method=SpecMethod.DRAFT_MODEL, k=K, draft_model=model_dir),
                "synthetic": synthetic,
            }
        )
    # prefix caching stays off (the recipe's default): the second client would find the first one's prompts cached
    assert not config.enable_prefix_caching
    return config, VLLM_MODEL_ID


def _measure(
    args: argparse.Namespace, env: Path, concurrencies: list[int], work: Path
) -> tuple[list[ClientRun], str]:
    """Start the server, run both clients per repeat and concurrency; the runs and the server's version."""
    model = prepare_model("smollm2", python=env / "bin" / "python")  # vllm bench serve's tokenizer
    config, args.served = _server(args, str(model.path))
    options = ProcessOptions(
        framework_env=str(env) if config.framework == "vllm" else None, log_dir=str(work / "logs")
    )
    runs: list[ClientRun] = []
    started = time.monotonic()
    with lifecycle.serving(config, options) as handle:
        base = handle.base_url
        version = _get_json(base + "/version").get("version", "?")
        print(
            f"{config.framework} {version} ready at {base} in {time.monotonic() - started:.0f} s",
            file=sys.stderr,
        )
        for repeat in range(args.repeats):
            for conc in concurrencies:
                n = args.prompts_per_concurrency * conc
                prompts = work / f"prompts-c{conc}-r{repeat}.jsonl"
                seed = args.seed + 1000 * repeat + conc
                _write_prompts(base, args.served, prompts, n, args.isl, seed, args.vocab)
                if args.warmup_pass:  # the server meets these prompts and batch shapes before the pair
                    warm = work / f"warmup-c{conc}-r{repeat}"
                    _timed(
                        _alflow_argv(base, args.served, prompts, args.osl, conc, n, 0.0, warm),
                        cpus=args.client_cpus,
                    )
                order = ("alflow", "vllm") if repeat % 2 == 0 else ("vllm", "alflow")
                for client in order:
                    if client == "alflow":
                        run = _alflow_run(base, prompts, conc, n, repeat, args, work)
                    else:
                        run = _vllm_run(env, base, str(model.path), prompts, conc, n, repeat, args, work)
                    runs.append(run)
                    if args.save:
                        args.save.write_text(_as_json(runs))
                    print(
                        f"{run.client} c={conc} r={repeat}: {run.output_throughput:.2f} tok/s, "
                        f"TPOT {run.median_tpot_ms:.1f} ms, AL {run.al}, {run.wall_s:.0f} s",
                        file=sys.stderr,
                    )
    return runs, f"{config.framework} {version}"


def _exit_on_sigterm(signum: int, _frame: object) -> None:
    """SIGTERM ends the benchmark like Ctrl-C: the running client is killed and the server stopped."""
    raise SystemExit(128 + signum)


def main() -> int:
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--isl", type=int, default=128, help="prompt tokens drawn per prompt (before detokenizing)"
    )
    parser.add_argument("--osl", type=int, default=64, help="output tokens per request (ignore_eos)")
    parser.add_argument("--concurrency", default="1,4", help="comma-separated concurrencies")
    parser.add_argument("--prompts-per-concurrency", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0, help="seed of the shared prompts (+1000 per repeat)")
    parser.add_argument(
        "--vocab", type=int, default=20000, help="the random prompts' token ids are drawn below this"
    )
    parser.add_argument(
        "--vllm-env", type=Path, default=None, help="the vLLM environment (default .venv-vllm)"
    )
    parser.add_argument(
        "--scrape-interval",
        type=float,
        default=0.0,
        help="alflow bench's background /metrics scrape interval (s); 0 (the default here) scrapes only before "
        "and after, as vllm bench serve does; alflow bench's own default is 1 s",
    )
    parser.add_argument("--save", type=Path, default=None, help="write the runs as JSON here after each run")
    parser.add_argument(
        "--keep",
        type=Path,
        default=None,
        help="keep the prompt files, each client's per-request output (alflow's records.parquet, vLLM's "
        "--save-detailed JSON) and the server log in this directory (default: a temporary one, removed)",
    )
    parser.add_argument(
        "--warmup-pass",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="before each pair, send the same prompt file once, unmeasured (default: on)",
    )
    parser.add_argument(
        "--server",
        choices=("vllm", "sim"),
        default="vllm",
        help="vllm: the real vLLM CPU server (default); sim: alflow's simulated engine in vLLM's dialect, whose step "
        "times depend only on the batch, so the two clients' figures differ only by what the clients do",
    )
    parser.add_argument(
        "--sim-profile",
        default="h200-llama70b",
        help="--server sim: the timing profile (alflow sim serve --profile)",
    )
    parser.add_argument(
        "--sim-time-scale",
        type=float,
        default=1.0,
        help="--server sim: 1 = the profile's real time, 2 = twice as slow",
    )
    parser.add_argument(
        "--client-cpus",
        default=None,
        help="pin both clients (and their children) to these CPUs, e.g. 1 or 0,1 (default: not pinned)",
    )
    parser.add_argument(
        "--alflow-extra-body",
        default=None,
        help="a JSON object alflow bench merges into every request (--extra-body), e.g. the fields vllm bench serve "
        'sends that alflow leaves to the server\'s defaults: \'{"repetition_penalty": 1.0, "logprobs": null}\'',
    )
    parser.add_argument(
        "--synthetic-al",
        type=float,
        default=None,
        help="M2's row: the server forces this mean AL (synthetic acceptance; on vLLM's CPU build through alflow's "
        "port, drafting with the model itself); default: real n-gram acceptance",
    )
    parser.add_argument("--json", action="store_true", help="print the runs as JSON instead of the table")
    parser.add_argument(
        "--report",
        type=Path,
        default=None,
        help="measure nothing: print the table of the runs a --save file holds",
    )
    args = parser.parse_args()
    if args.report is not None:
        try:
            runs = _load_runs(args.report)
        except ValueError as exc:
            parser.error(str(exc))
        print(_table(runs, sorted({r.concurrency for r in runs})))
        return 0
    if args.client_cpus is not None:
        try:
            args.client_cpus = frozenset(int(c) for c in args.client_cpus.split(",") if c.strip())
        except ValueError:
            parser.error(f"--client-cpus {args.client_cpus!r}: give CPU numbers, e.g. 1 or 0,1")
        allowed = os.sched_getaffinity(0)
        if not args.client_cpus or not args.client_cpus <= allowed:
            parser.error(
                f"--client-cpus {sorted(args.client_cpus)}: give CPUs this process may use: {sorted(allowed)}"
            )
    if args.synthetic_al is not None and not (
        math.isfinite(args.synthetic_al) and 1.0 <= args.synthetic_al <= K + 1
    ):
        parser.error(f"--synthetic-al {args.synthetic_al}: give a target AL in [1, K+1] = [1, {K + 1}]")
    if args.sim_time_scale <= 0 or not math.isfinite(args.sim_time_scale):
        parser.error(f"--sim-time-scale {args.sim_time_scale}: give a positive number")
    concurrencies = [int(c) for c in args.concurrency.split(",") if c.strip()]
    if not concurrencies or min(concurrencies) < 1:
        parser.error(f"--concurrency {args.concurrency!r}: give positive integers, e.g. 1,4")
    for name in ("isl", "osl", "prompts_per_concurrency", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} {getattr(args, name)}: give a positive integer")
    env = (args.vllm_env or default_vllm_env()).absolute()
    if not (env / "bin" / "vllm").is_file():
        parser.error(f"--vllm-env {env}: no bin/vllm there (run: bash scripts/setup.sh --vllm)")
    if args.keep is not None:
        if args.keep.exists() and any(args.keep.iterdir()):
            parser.error(f"--keep {args.keep}: the directory is not empty (give a new one)")
        args.keep.mkdir(parents=True, exist_ok=True)
        runs, version = _measure(args, env, concurrencies, args.keep.absolute())
    else:
        with tempfile.TemporaryDirectory(prefix="alflow-peer-") as tmp:
            runs, version = _measure(args, env, concurrencies, Path(tmp))
    if args.json:
        print(_as_json(runs), end="")
    else:
        served = (
            f"the simulated engine (alflow {version}, profile {args.sim_profile}, time scale {args.sim_time_scale:g})"
            if args.server == "sim"
            else f"SmolLM2-135M on {version} (CPU build)"
        )
        pinned = "" if args.client_cpus is None else f", clients pinned to CPUs {sorted(args.client_cpus)}"
        drafting = (
            f"ngram K={K}"
            if args.synthetic_al is None
            else f"{'ngram' if args.server == 'sim' else 'draft_model'} K={K}, synthetic acceptance at AL "
            f"{args.synthetic_al:g} (M2)"
        )
        print(
            f"\n{served}{pinned}, {drafting}, the same prompts for both clients "
            f"({args.isl} random tokens as text), OSL {args.osl}, {args.prompts_per_concurrency} x concurrency "
            f"prompts, {args.repeats} repeat(s), prefix caching off, alflow's background scrape every "
            f"{args.scrape_interval:g} s (0: off), {'an unmeasured pass before each pair' if args.warmup_pass else 'no warm-up pass'}, "
            "2 shared cores\n"
        )
        print(_table(runs, concurrencies))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
