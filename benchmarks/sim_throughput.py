"""Benchmark of the simulated engine (a script, not a test): prints a table.

1. Throughput: one sim process pinned to one core (``--time-scale 0``, K=3, synthetic AL=3) and this
   client pinned to another core, concurrency 256, streaming chat completions with ``ignore_eos``;
   output tokens per second from the responses' usage.
2. Interactivity: ``--time-scale 1`` with the h200-llama70b and h200-moe-large profiles at concurrency 1; measured
   interactivity (1000 / TPOT_ms, median) next to the profile's prediction.

Usage: .venv/bin/python benchmarks/sim_throughput.py [--concurrency 256] [--max-tokens 1024] [--trials 3]
       [--client raw|aiohttp] [--skip-interactivity]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time

import aiohttp
import orjson

from alflow.sim.process import SimProcess
from alflow.sim.profiles import get_profile, predicted_tpot_s


async def _one(session: aiohttp.ClientSession, url: str, payload: bytes) -> tuple[int, float, float, float]:
    """Stream one request; return (completion tokens, start, first content time, end)."""
    start = time.perf_counter()
    first = 0.0
    tail = b""
    async with session.post(url, data=payload, headers={"Content-Type": "application/json"}) as resp:
        resp.raise_for_status()
        seen = 0
        async for chunk in resp.content.iter_any():
            seen += 1
            if seen == 2 and not first:
                first = time.perf_counter()
            tail = (tail + chunk)[-600:]
    end = time.perf_counter()
    at = tail.rfind(b'"usage":')
    usage = orjson.loads(tail[at + 8 : tail.index(b"}", at) + 1])
    return int(usage["completion_tokens"]), start, first or end, end


async def _run_load(base_url: str, concurrency: int, n_requests: int, max_tokens: int, prompt: str):
    url = base_url + "/v1/chat/completions"
    payload = orjson.dumps(
        {
            "model": "sim/bench",
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    )
    results: list[tuple[int, float, float, float]] = []
    queue = list(range(n_requests))
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=600)) as session:

        async def worker() -> None:
            while queue:
                queue.pop()
                results.append(await _one(session, url, payload))

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        t1 = time.perf_counter()
    return results, t1 - t0


class _RawStream(asyncio.Protocol):
    """A bare HTTP/1.1 keep-alive client for one connection: send, read to the last chunk, repeat."""

    def __init__(
        self, request: bytes, todo: list[int], results: list[int], done: asyncio.Future[None]
    ) -> None:
        self.request, self.todo, self.results, self.done = request, todo, results, done
        self.tail = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self._next()

    def _next(self) -> None:
        if not self.todo:
            assert self.transport is not None
            self.transport.close()
            if not self.done.done():
                self.done.set_result(None)
            return
        self.todo.pop()
        self.tail = b""
        assert self.transport is not None
        self.transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        tail = (self.tail + data)[-700:]
        self.tail = tail
        if tail.endswith(b"\r\n0\r\n\r\n") and b"data: [DONE]" in tail:
            at = tail.rfind(b'"usage":')
            usage = orjson.loads(tail[at + 8 : tail.index(b"}", at) + 1])
            self.results.append(int(usage["completion_tokens"]))
            self._next()

    def connection_lost(self, exc: Exception | None) -> None:  # noqa: ARG002 - asyncio protocol signature
        if not self.done.done():
            self.done.set_result(None)


async def _run_raw(
    host: str, port: int, concurrency: int, n_requests: int, max_tokens: int
) -> tuple[list[int], float]:
    """Throughput load with the bare client; returns (completion tokens per request, wall seconds)."""
    body = orjson.dumps(
        {
            "model": "sim/bench",
            "messages": [{"role": "user", "content": "benchmark prompt"}],
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    )
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    request = head.encode() + body
    loop = asyncio.get_running_loop()
    todo = list(range(n_requests))
    results: list[int] = []
    t0 = time.perf_counter()
    waits = []
    for _ in range(concurrency):
        done: asyncio.Future[None] = loop.create_future()
        await loop.create_connection(lambda d=done: _RawStream(request, todo, results, d), host, port)
        waits.append(done)
    await asyncio.gather(*waits)
    return results, time.perf_counter() - t0


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as fh:  # noqa: PTH123
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _trial(sim: SimProcess, args: argparse.Namespace) -> dict[str, float]:
    cpu0, client0 = _cpu_s(sim.pid), _cpu_s(os.getpid())
    if args.client == "raw":
        counts, wall = asyncio.run(
            _run_raw(sim.host, sim.port, args.concurrency, args.requests, args.max_tokens)
        )
    else:
        results, wall = asyncio.run(
            _run_load(sim.base_url, args.concurrency, args.requests, args.max_tokens, "benchmark prompt")
        )
        counts = [r[0] for r in results]
    server_cpu, client_cpu = _cpu_s(sim.pid) - cpu0, _cpu_s(os.getpid()) - client0
    tokens = sum(counts)
    return {
        "requests": len(counts),
        "output_tokens": tokens,
        "wall_s": wall,
        "tokens_per_s": tokens / wall,
        "server_cpu_share": server_cpu / wall,
        "client_cpu_share": client_cpu / wall,
        "tokens_per_server_cpu_s": tokens / server_cpu if server_cpu else float("nan"),
    }


def throughput(args: argparse.Namespace) -> list[dict[str, float]]:
    """Run ``args.trials`` throughput trials against one sim process pinned to one core."""
    sim_args = ["--dialect", "vllm", "--k", "3", "--synthetic-al", "3", "--time-scale", "0"]
    sim_args += ["--max-num-seqs", str(args.concurrency), "--model-name", "bench"]
    with SimProcess(sim_args) as sim:
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) >= 2:
            os.sched_setaffinity(sim.pid, {cpus[0]})
            os.sched_setaffinity(0, {cpus[1]})
        asyncio.run(_run_load(sim.base_url, args.concurrency, args.concurrency, 64, "warm up"))
        trials = [_trial(sim, args) for _ in range(args.trials)]
        os.sched_setaffinity(0, set(cpus))
    return trials


def interactivity(profile_name: str) -> dict[str, object]:
    """Concurrency 1 at --time-scale 1 (K=3, AL=3): measured and predicted interactivity."""
    profile = get_profile(profile_name)
    isl_prompt = "word " * 200
    out = 256
    sim_args = ["--dialect", "vllm", "--k", "3", "--synthetic-al", "3", "--time-scale", "1"]
    sim_args += ["--profile", profile.name, "--model-name", "bench"]
    with SimProcess(sim_args) as sim:
        results, _ = asyncio.run(_run_load(sim.base_url, 1, 6, out, isl_prompt))
    tpots = [(end - first) / (n - 1) for n, _start, first, end in results[1:]]
    tpot = statistics.median(tpots)
    # the prompt's token count under the sim's chat template
    from alflow.sim.tokenizer import get_tokenizer

    prompt_tokens = len(get_tokenizer().chat_ids([("user", isl_prompt)]))
    predicted = predicted_tpot_s(profile, 3, 3.0, prompt_tokens, out)
    return {
        "measured_interactivity": 1 / tpot,
        "predicted_interactivity": 1 / predicted,
        "ratio": predicted / tpot,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--max-tokens", type=int, default=1024)
    parser.add_argument("--requests", type=int, default=0, help="default: 3 x concurrency")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--skip-interactivity", action="store_true")
    parser.add_argument(
        "--client", choices=("raw", "aiohttp"), default="raw", help="bare asyncio HTTP client or aiohttp"
    )
    args = parser.parse_args()
    args.requests = args.requests or 3 * args.concurrency
    trials = throughput(args)
    best = max(trials, key=lambda t: t["tokens_per_s"])
    label = f"output tokens/s (c={args.concurrency}, K=3, AL=3)"
    rows = [
        ("client", args.client),
        ("requests per trial", f"{best['requests']:.0f}"),
        ("output tokens per trial", f"{best['output_tokens']:.0f}"),
    ]
    for n, t in enumerate(trials, start=1):
        rows.append((f"trial {n}: {label}", f"{t['tokens_per_s']:,.0f}"))
        rows.append(
            (
                f"trial {n}: server / client CPU busy",
                f"{t['server_cpu_share']:.2f} / {t['client_cpu_share']:.2f}",
            )
        )
    rows += [
        (f"median {label}", f"{statistics.median(t['tokens_per_s'] for t in trials):,.0f}"),
        (f"best {label}", f"{best['tokens_per_s']:,.0f}"),
        (
            "output tokens per server CPU-second (median)",
            f"{statistics.median(t['tokens_per_server_cpu_s'] for t in trials):,.0f}",
        ),
    ]
    if not args.skip_interactivity:
        for name in ("h200-llama70b", "h200-moe-large"):
            it = interactivity(name)
            rows += [
                (f"{name}: interactivity measured (c=1)", f"{it['measured_interactivity']:.1f}"),
                (f"{name}: interactivity predicted", f"{it['predicted_interactivity']:.1f}"),
                (f"{name}: measured / predicted", f"{1 / it['ratio']:.3f}"),
            ]
    print(f"{'metric':<44} {'value':>14}")
    for name, value in rows:
        print(f"{name:<44} {value:>14}")


if __name__ == "__main__":
    main()
