"""Client overhead of alflow's load generator: CPU per streamed chunk, achieved chunk rate, ITL error.

Run from the repository root (prints a table; not a test):

    .venv/bin/python benchmarks/client_overhead.py [--concurrency 64,256,1024] [--aiperf /tmp/aiperf-venv/bin/aiperf]

Two loads, each at every concurrency:

- ``sim-ts0``: the simulated engine (``python -m alflow.sim serve --time-scale 0``, K=3, synthetic
  AL 2.5): steps as fast as it can; one network write per request per step.
- ``fixed-10ms``: a trivial raw-asyncio server in this file: one chunk (one token, one network write)
  per stream every 10 ms, so the offered rate is ``100 x concurrency`` chunks/s; it records the
  ``perf_counter_ns`` of every write, which gives the ITL error of each client.

Servers run niced (``nice -n 10``) in their own process so the client cannot starve them on two
cores. Clients, each in its own process (CPU of the client's process tree from ``wait4``, minus
the CPU of the same client doing one tiny run, i.e. start-up and imports):

- ``alflow``: ``alflow.loadgen.run_load`` (records with every chunk timestamp, orjson, usage) on
  its default fast transport (CPU: the load; peak RSS twice: ``load``, the client process at the end of the
  load, every plugin's count reader loaded, as a point reads the counts; ``point``, after the records frame and
  client summary a point builds from them, as ``alflow.measure`` does, which loads polars), reads dated by the kernel's receive stamps; ``alflow-clock``: the same
  transport dated by the clock at each read (the stamps' own cost is the difference between the two,
  measured in the same run); ``alflow-aiohttp``: the same on the aiohttp transport;
- ``bare``: a bare aiohttp read loop with no bookkeeping (counts ``data:`` lines, no JSON);
- ``aiperf``: ``aiperf profile`` from a throwaway venv (``--aiperf PATH``), with
  ``--use-server-token-count`` and a tokenizer directory made locally.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MODEL = "sim/llama-3.3-70b"

# ------------------------------------------------------------------------------------------------
# The trivial fixed-delay server (run as: client_overhead.py --serve-fixed DELAY_MS)


class _FixedServer:
    """HTTP/1.1 keep-alive; POST streams ``max_tokens`` chunks, one per tick; GET /emits dumps times."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.active: list[list[Any]] = []  # [transport, remaining, prompt, emitted, usage_prompt]
        self.emits: dict[str, list[int]] = {}

    async def tick(self) -> None:
        loop = asyncio.get_running_loop()
        next_t = loop.time()
        head = b'data: {"id":"x","object":"text_completion","model":"m","choices":[{"index":0,"text":" tok"}]}\n\n'
        chunk = b"%x\r\n%b\r\n" % (len(head), head)
        while True:
            next_t += self.delay_s
            await asyncio.sleep(max(0.0, next_t - loop.time()))
            still: list[list[Any]] = []
            clock = time.perf_counter_ns
            for st in self.active:
                tr = st[0]
                if tr.is_closing():
                    continue
                tr.write(chunk)
                self.emits[st[2]].append(clock())  # the moment of this stream's write
                st[1] -= 1
                st[3] += 1
                if st[1] <= 0:
                    usage = (
                        b'data: {"id":"x","choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,'
                        b'"total_tokens":%d}}\n\ndata: [DONE]\n\n' % (st[4], st[3], st[3] + st[4])
                    )
                    tr.write(b"%x\r\n%b\r\n0\r\n\r\n" % (len(usage), usage))
                else:
                    still.append(st)
            self.active = still

    def protocol(self) -> asyncio.Protocol:
        server = self

        class Proto(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                self.tr = transport
                self.buf = b""

            def data_received(self, data: bytes) -> None:
                self.buf += data
                while True:
                    end = self.buf.find(b"\r\n\r\n")
                    if end < 0:
                        return
                    head = self.buf[:end].decode("latin-1")
                    length = 0
                    for line in head.split("\r\n")[1:]:
                        k, _, v = line.partition(":")
                        if k.strip().lower() == "content-length":
                            length = int(v.strip())
                    if len(self.buf) < end + 4 + length:
                        return
                    body = self.buf[end + 4 : end + 4 + length]
                    self.buf = self.buf[end + 4 + length :]
                    self.handle(head.split(" ")[0], head.split(" ")[1], body)

            def handle(self, method: str, path: str, body: bytes) -> None:
                tr = self.tr
                if method == "GET":
                    if path == "/emits":
                        data = json.dumps(server.emits).encode()
                    else:
                        data = json.dumps({"data": [{"id": MODEL}]}).encode()
                    tr.write(  # type: ignore[attr-defined]
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%b"
                        % (len(data), data)
                    )
                    return
                req = json.loads(body)
                prompt = req.get("prompt")
                key = prompt if isinstance(prompt, str) else json.dumps(prompt)
                server.emits[key] = []
                n_prompt = len(prompt) if isinstance(prompt, list) else max(1, len(str(prompt).split()))
                tr.write(  # type: ignore[attr-defined]
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                )
                server.active.append([tr, int(req.get("max_tokens", 16)), key, 0, n_prompt])

        return Proto()


async def _serve_fixed(delay_ms: float) -> None:
    srv = _FixedServer(delay_ms / 1000.0)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(srv.protocol, "127.0.0.1", 0, backlog=4096)
    port = server.sockets[0].getsockname()[1]
    print(f"PORT {port}", flush=True)
    await srv.tick()


# ------------------------------------------------------------------------------------------------
# Clients (each run as: client_overhead.py --client NAME --url URL --concurrency C --num N --osl L)


def _loop_factory() -> Any:
    """uvloop's event loop when installed and not disabled by ``--loop asyncio``."""
    if ARGS.loop == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def _bare_prompts(num: int, isl: int) -> list[list[int]]:
    """A plain client's random prompts (``--isl``): token-id lists drawn as alflow draws them, held as lists."""
    rng = random.Random(0)
    low = max(1, math.ceil(isl * 0.8))
    return [[rng.randrange(100, 20_000) for _ in range(rng.randint(low, isl))] for _ in range(num)]


def _body(i: int, osl: int, prompt: list[int] | None = None) -> dict[str, Any]:
    return {
        "model": MODEL,
        "prompt": f"request number {i} please continue" if prompt is None else prompt,
        "max_tokens": osl,
        "min_tokens": osl,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def _peak_rss_mb() -> float:
    """This process's peak resident set so far, in MB (``ru_maxrss`` is KiB on Linux)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def _client_alflow(url: str, conc: int, num: int, osl: int, out: Path, transport: str = "fast") -> None:
    sys.path.insert(0, str(ROOT))
    from alflow.datasets.random_tokens import random_sessions
    from alflow.datasets.types import Session, Turn
    from alflow.loadgen import LoadSpec, Target, run_load
    from alflow.metrics.readers import count_readers

    sessions = [
        Session(
            f"s{i}",
            (Turn(f"request number {i} please continue", max_tokens=osl, min_tokens=osl, ignore_eos=True),),
        )
        for i in range(num)
    ]
    if ARGS.isl:  # the prompts of `alflow bench --dataset random` and M2, as alflow draws and holds them
        sessions = [
            replace(s, session_id=f"s{i}")
            for i, s in enumerate(random_sessions(num, isl=ARGS.isl, osl=osl, seed=0))
        ]
    from alflow.loadgen.fast import FastTransport

    own = FastTransport(kernel_stamps=False) if transport == "fast-clock" else None
    cpu0 = time.process_time()
    res = await run_load(
        sessions,
        Target(url, MODEL, endpoint="completions", counts=count_readers(None)),  # as a point reads the counts
        LoadSpec(
            concurrency=conc, keep_text=False, transport="aiohttp" if transport == "aiohttp" else "fast"
        ),
        transport=own,
    )
    if own is not None:
        await own.close()
    cpu = time.process_time() - cpu0
    load_rss_mb = _peak_rss_mb()  # the load generator's own peak: no frame library loaded yet
    # what a point does next with its records (alflow.measure): the frame and the client summary, in the peak
    from alflow.loadgen.frames import records_frame
    from alflow.metrics.client import summarize

    post0 = time.process_time()
    summarize(records_frame(res.records), duration_s=max(res.duration_s, 1e-9))
    post_cpu = time.process_time() - post0  # taken out of the CPU figures: they stay the load's
    rss_mb = _peak_rss_mb()  # before this file's own bookkeeping below
    # keyed as the fixed server keys its emits (the prompt); with --isl the ITL error is not computed
    chunks = (
        {}
        if ARGS.isl
        else {f"request number {r.session_id[1:]} please continue": r.chunk_ns for r in res.records}
    )
    failed = sum(1 for r in res.records if not r.ok)
    errors = sorted({r.error for r in res.records if r.error})[:3]
    out.write_text(  # noqa: ASYNC240  (once, after the run)
        json.dumps(
            {
                "chunks": sum(len(r.chunk_ns) for r in res.records),
                "duration_s": res.duration_s,
                "failed": failed,
                "errors": errors,
                "inproc_cpu_s": cpu,
                "peak_rss_mb": rss_mb,
                "load_rss_mb": load_rss_mb,
                "post_cpu_s": post_cpu,
                "chunk_ns": chunks,
            }
        )
    )


async def _client_bare(url: str, conc: int, num: int, osl: int, out: Path) -> None:
    import aiohttp
    import orjson

    sem = asyncio.Semaphore(conc)
    counts = [0]
    failed = [0]

    prompts = _bare_prompts(num, ARGS.isl) if ARGS.isl else None

    async def one(http: aiohttp.ClientSession, i: int) -> None:
        body = orjson.dumps(_body(i, osl, None if prompts is None else prompts[i]))
        try:
            async with sem, http.post(url + "/v1/completions", data=body) as resp:
                n = 0
                async for data in resp.content.iter_any():
                    n += data.count(b"data: {")
                counts[0] += n - 1  # minus the usage event
                if resp.status != 200:
                    failed[0] += 1
        except aiohttp.ClientError:
            failed[0] += 1

    cpu0 = time.process_time()
    t0 = time.perf_counter()
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn, auto_decompress=False, read_bufsize=2**18) as http:
        await asyncio.gather(*(one(http, i) for i in range(num)))
    out.write_text(  # noqa: ASYNC240  (once, after the run)
        json.dumps(
            {
                "chunks": counts[0],
                "duration_s": time.perf_counter() - t0,
                "failed": failed[0],
                "inproc_cpu_s": time.process_time() - cpu0,
                "peak_rss_mb": _peak_rss_mb(),
            }
        )
    )


# ------------------------------------------------------------------------------------------------
# Driver


def _start_server(cmd: list[str]) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        ["nice", "-n", "10", *cmd], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    assert proc.stdout is not None
    deadline = time.time() + 30
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith("PORT "):
            return proc, int(line.split()[1])
        if line.startswith("alflow-sim listening on "):
            return proc, int(line.strip().rsplit(":", 1)[1])
    proc.kill()
    raise RuntimeError(f"server did not start: {cmd}")


def _run_client(argv: list[str]) -> tuple[float, int, float]:
    """Run a client process; return (CPU seconds of its process tree, exit code, peak RSS in MB)."""
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode:
        print(f"  client failed ({proc.returncode}): {err[-400:]}", file=sys.stderr)
    return ru.ru_utime + ru.ru_stime, proc.returncode, ru.ru_maxrss / 1024  # ru_maxrss: KiB on Linux


def _client_argv(name: str, url: str, conc: int, num: int, osl: int, out: Path) -> list[str]:
    return [sys.executable, __file__, "--client", name, "--url", url, "--concurrency-one", str(conc),
            "--num", str(num), "--osl", str(osl), "--result", str(out), "--loop", ARGS.loop,
            "--isl", str(ARGS.isl)]  # fmt: skip


def _make_tokenizer(dirpath: Path) -> bool:
    """A tiny word-level tokenizer directory for aiperf (made locally, nothing downloaded)."""
    script = (
        "from tokenizers import Tokenizer, models, pre_tokenizers\n"
        "from transformers import PreTrainedTokenizerFast\n"
        "import sys\n"
        "vocab = {'[UNK]': 0, '[BOS]': 1, '[EOS]': 2}\n"
        "for i, w in enumerate(('the of and to in is you that it he was for on are as with his they at be this '"
        "'from have or one had by word but not what all were we when your can said there use an each which she '"
        "'do how their if will up other about out many then them these so some her would make like him into time '"
        "'has look two more write go see number no way could people my than first water been call who oil its now '"
        "'find long down day did get come made may part tok request please continue').split()):\n"
        "    vocab[w] = i + 3\n"
        "tk = Tokenizer(models.WordLevel(vocab, unk_token='[UNK]'))\n"
        "tk.pre_tokenizer = pre_tokenizers.Whitespace()\n"
        "fast = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token='[UNK]', bos_token='[BOS]', eos_token='[EOS]')\n"
        "fast.save_pretrained(sys.argv[1])\n"
    )
    aiperf_py = Path(ARGS.aiperf).parent / "python"
    r = subprocess.run(
        [str(aiperf_py), "-c", script, str(dirpath)], capture_output=True, text=True, check=False
    )
    if r.returncode:
        print(f"tokenizer for aiperf not made: {r.stderr[-300:]}", file=sys.stderr)
    return r.returncode == 0


def _aiperf_argv(url: str, conc: int, num: int, osl: int, tok: Path, art: Path) -> list[str]:
    return [
        ARGS.aiperf, "profile", "--model", MODEL, "--url", url, "--endpoint-type", "completions", "--streaming",
        "--concurrency", str(conc), "--request-count", str(num), "--tokenizer", str(tok),
        "--synthetic-input-tokens-mean", "8", "--synthetic-input-tokens-stddev", "0",
        "--output-tokens-mean", str(osl), "--output-tokens-stddev", "0",
        "--extra-inputs", "ignore_eos:true", "--extra-inputs", f"min_tokens:{osl}",
        "--use-server-token-count", "--artifact-dir", str(art), "--ui-type", "none",
    ]  # fmt: skip


def _aiperf_chunks(art: Path) -> tuple[int | None, float | None]:
    """(total output tokens, duration s) from aiperf's JSON export, when present."""
    for f in art.rglob("*aiperf*.json"):
        with contextlib.suppress(Exception):
            data = json.loads(f.read_text())
            tput = data.get("output_token_throughput", {}).get("avg")
            count = data.get("output_token_count", {}) or {}
            reqs = data.get("request_count", {}).get("avg")
            if tput and count.get("avg") and reqs:
                total = count["avg"] * reqs
                return int(total), total / tput
    return None, None


def _itl_error_ms(
    client_chunks: dict[str, list[int]], emits: dict[str, list[int]]
) -> tuple[float, float] | None:
    """Median and p99 of |client ITL - server emit gap| (ms) over matched requests."""
    errs: list[float] = []
    for key, ts in client_chunks.items():
        srv = emits.get(key)
        if not srv or len(srv) != len(ts):
            continue
        for j in range(1, len(ts)):
            errs.append(abs((ts[j] - ts[j - 1]) - (srv[j] - srv[j - 1])) / 1e6)
    if not errs:
        return None
    errs.sort()
    return statistics.median(errs), errs[min(len(errs) - 1, int(0.99 * len(errs)))]


def _fetch_emits(port: int) -> dict[str, list[int]]:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/emits", timeout=30) as resp:
        return json.loads(resp.read())


def _clients(tok: Path) -> list[str]:
    """The clients asked for; aiperf only where it can run the same load (its tokenizer made, no --isl)."""
    clients = ["alflow", "alflow-clock", "alflow-aiohttp", "bare"] + (["aiperf"] if ARGS.aiperf else [])
    if ARGS.clients:
        clients = [c for c in clients if c in ARGS.clients.split(",")]
    if "aiperf" in clients and ARGS.isl:
        print("aiperf left out: it draws its own prompts, not --isl's", file=sys.stderr)
        clients.remove("aiperf")
    if "aiperf" in clients and not _make_tokenizer(tok):
        clients.remove("aiperf")
    return clients


def main() -> None:
    concs = [int(c) for c in ARGS.concurrency.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="alflow-overhead-"))
    tok = tmp / "tokenizer"
    clients = _clients(tok)
    rows: list[dict[str, Any]] = []
    loads = {
        "sim-ts0": [sys.executable, "-m", "alflow.sim", "serve", "--port", "0", "--dialect", "vllm", "--k", "3",
                    "--synthetic-al", "2.5", "--time-scale", "0", "--max-num-seqs", "4096", "--log-level", "WARNING"],
        "fixed-10ms": [sys.executable, __file__, "--serve-fixed", "10"],
    }  # fmt: skip
    for load, cmd in loads.items():
        if ARGS.loads and load not in ARGS.loads.split(","):
            continue
        for conc in concs:
            num = max(conc * ARGS.requests_per_slot, 8)
            osl = ARGS.osl
            for client in clients:
                proc, port = _start_server(cmd)
                url = f"http://127.0.0.1:{port}"
                try:
                    # start-up cost of this client: one tiny run
                    tiny = tmp / f"tiny-{client}.json"
                    if client == "aiperf":
                        base_cpu, _, _ = _run_client(
                            _aiperf_argv(url, 1, 1, 4, tok, tmp / f"art-tiny-{load}-{conc}")
                        )
                    else:
                        base_cpu, _, _ = _run_client(_client_argv(client, url, 1, 1, 4, tiny))
                        if tiny.exists():  # its summary's CPU is taken out, as the measured run's is
                            base_cpu -= json.loads(tiny.read_text()).get("post_cpu_s", 0.0)
                    res_path = tmp / f"res-{load}-{conc}-{client}.json"
                    t0 = time.perf_counter()
                    if client == "aiperf":
                        art = tmp / f"art-{load}-{conc}"
                        cpu, rc, rss = _run_client(_aiperf_argv(url, conc, num, osl, tok, art))
                        chunks, dur = _aiperf_chunks(art)
                        if dur is None:
                            dur = time.perf_counter() - t0
                        res: dict[str, Any] = {"chunks": chunks, "duration_s": dur, "failed": None}
                    else:
                        cpu, rc, rss = _run_client(_client_argv(client, url, conc, num, osl, res_path))
                        res = json.loads(res_path.read_text()) if res_path.exists() else {}
                    row: dict[str, Any] = {"load": load, "concurrency": conc, "client": client, "rc": rc}
                    chunks = res.get("chunks")
                    dur = res.get("duration_s")
                    row["chunks"] = chunks
                    # the load's own peak where the client says it; the process's includes this file's bookkeeping
                    row["peak_rss_mb"] = res.get("peak_rss_mb", rss)
                    row["process_rss_mb"] = rss
                    row["load_rss_mb"] = res.get(
                        "load_rss_mb", row["peak_rss_mb"]
                    )  # bare: its peak is its load
                    row["failed"] = res.get("failed")
                    cpu -= res.get("post_cpu_s", 0.0)
                    row["cpu_s"] = cpu - base_cpu
                    row["us_per_chunk"] = (cpu - base_cpu) / chunks * 1e6 if chunks else None
                    row["inproc_us_per_chunk"] = (
                        res["inproc_cpu_s"] / chunks * 1e6 if chunks and "inproc_cpu_s" in res else None
                    )
                    row["achieved_chunks_s"] = chunks / dur if chunks and dur else None
                    row["cores"] = (cpu - base_cpu) / dur if dur else None
                    row["offered_chunks_s"] = 100 * conc if load == "fixed-10ms" else None
                    if load == "fixed-10ms" and client.startswith("alflow") and res.get("chunk_ns"):
                        err = _itl_error_ms(res["chunk_ns"], _fetch_emits(port))
                        row["itl_err_median_ms"], row["itl_err_p99_ms"] = err if err else (None, None)
                    rows.append(row)
                    print(json.dumps(row), file=sys.stderr, flush=True)
                finally:
                    proc.terminate()
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(10)
                    if proc.poll() is None:
                        proc.kill()
    shutil.rmtree(tmp, ignore_errors=True)
    _aiperf_chunks_from_peers(rows)
    _print_table(rows)


def _aiperf_chunks_from_peers(rows: list[dict[str, Any]]) -> None:
    """aiperf reports tokens, not chunks: use the chunk count the other clients saw for the same load.

    The loads are deterministic in chunks per request (fixed-10ms: one token per chunk; the sim at
    AL 2.5: about 80 chunks per 200 tokens), so the per-chunk CPU compares like with like.
    """
    for r in rows:
        if r["client"] != "aiperf" or not r.get("chunks"):
            continue
        peers = [
            p["chunks"]
            for p in rows
            if p["client"] != "aiperf" and p["load"] == r["load"] and p["concurrency"] == r["concurrency"]
            and p.get("chunks") and not p.get("failed")
        ]  # fmt: skip
        if not peers:
            continue
        tokens = r["chunks"]
        chunks = int(statistics.median(peers))
        dur = tokens / r["achieved_chunks_s"] if r.get("achieved_chunks_s") else None
        r["chunks"] = chunks
        r["us_per_chunk"] = r["cpu_s"] / chunks * 1e6
        r["achieved_chunks_s"] = chunks / dur if dur else None


def _fmt(v: Any, spec: str = ".1f") -> str:
    return "-" if v is None else format(v, spec)


def _print_table(rows: list[dict[str, Any]]) -> None:
    head = (f"{'load':<11}{'conc':>6} {'client':<15}{'chunks':>9}{'fail':>6}{'us/chunk':>10}{'(in-proc)':>10}"
            f"{'achieved/s':>12}{'offered/s':>11}{'cores':>7}{'RSS MB load/point':>18}{'ITL err med/p99 ms':>22}")  # fmt: skip
    print(head)
    print("-" * len(head))
    for r in rows:
        itl = (
            f"{_fmt(r.get('itl_err_median_ms'), '.3f')} / {_fmt(r.get('itl_err_p99_ms'), '.3f')}"
            if "itl_err_median_ms" in r
            else ""
        )
        print(
            f"{r['load']:<11}{r['concurrency']:>6} {r['client']:<15}{_fmt(r['chunks'], 'd') if r['chunks'] else '-':>9}"
            f"{_fmt(r['failed'], 'd') if r['failed'] is not None else '-':>6}{_fmt(r['us_per_chunk']):>10}"
            f"{_fmt(r['inproc_us_per_chunk']):>10}{_fmt(r['achieved_chunks_s'], '.0f'):>12}"
            f"{_fmt(r['offered_chunks_s'], '.0f'):>11}{_fmt(r['cores'], '.2f'):>7}"
            f"{_fmt(r.get('load_rss_mb'), '.0f') + ' / ' + _fmt(r.get('peak_rss_mb'), '.0f'):>18}{itl:>22}"
        )


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--concurrency", default="64,256,1024", help="comma-separated concurrencies")
    p.add_argument("--loads", default="", help="subset of sim-ts0,fixed-10ms")
    p.add_argument("--osl", type=int, default=200, help="output tokens per request")
    p.add_argument(
        "--isl",
        type=int,
        default=0,
        help="random token-id prompts of up to this many tokens (0: a short text)",
    )
    p.add_argument("--requests-per-slot", type=int, default=2, help="requests = this x concurrency")
    p.add_argument("--clients", default="", help="subset of alflow,alflow-clock,alflow-aiohttp,bare,aiperf")
    p.add_argument("--aiperf", default="", help="path of an aiperf executable (throwaway venv)")
    p.add_argument("--loop", default="uvloop", choices=["uvloop", "asyncio"], help="client event loop")
    # internal modes
    p.add_argument("--serve-fixed", type=float, default=None, help=argparse.SUPPRESS)
    p.add_argument("--client", default=None, help=argparse.SUPPRESS)
    p.add_argument("--url", default=None, help=argparse.SUPPRESS)
    p.add_argument("--concurrency-one", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--num", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--result", default=None, help=argparse.SUPPRESS)
    return p.parse_args()


_TRANSPORTS = {"alflow": "fast", "alflow-clock": "fast-clock", "alflow-aiohttp": "aiohttp"}
"""The alflow clients: the fast transport with kernel receive stamps (the default), the same dated by the clock
at each read (``FastTransport(kernel_stamps=False)``: the stamps' own cost is the difference), and aiohttp."""


if __name__ == "__main__":
    ARGS = _parse()
    if ARGS.serve_fixed is not None:
        asyncio.run(_serve_fixed(ARGS.serve_fixed))
    elif ARGS.client in _TRANSPORTS or ARGS.client == "bare":
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            args = (ARGS.url, ARGS.concurrency_one, ARGS.num, ARGS.osl, Path(ARGS.result))
            if ARGS.client == "bare":
                runner.run(_client_bare(*args))
            else:
                runner.run(_client_alflow(*args, transport=_TRANSPORTS[ARGS.client]))
    else:
        main()
