"""Timing truth of alflow's client under CPU contention: its ITL and TTFT against the server's own write times.

Run from the repository root (prints a table; not a test):

    .venv/bin/python benchmarks/timing_truth.py [--concurrency 256] [--osl 200] [--levels none,burn]
        [--burners 2] [--aiperf /tmp/aiperf-venv/bin/aiperf]

The server is ``benchmarks/client_overhead.py --serve-fixed 10`` (one token per stream every 10 ms, one network
write each, started niced in its own process): it records the ``perf_counter_ns`` of every write (``GET
/emits``, keyed by prompt; every request here has its own prompt). ``perf_counter_ns`` is ``CLOCK_MONOTONIC``
on Linux, the clock of the client's records, so the two processes' times compare directly.

Load levels: ``none`` (nothing else running) and ``burn`` (``--burners`` busy-loop processes, bounded in time
and killed at the end, so the machine's load average is about 4 to 6 on two cores). With ``--pin`` (default)
the server runs alone on the last CPU in its own session and the client and burners share the others: the
burners then starve the client, not the server, whose gaps stay a steady truth (a starved server catches up
in bursts). Clients, per level:

- ``alflow-kernel``: ``alflow.loadgen.run_load`` on its default fast transport, which dates each read by its
  kernel receive stamp (``SO_TIMESTAMPNS``, :mod:`alflow.loadgen.rxstamp`);
- ``alflow-clock``: the same with ``FastTransport(kernel_stamps=False)``: the process's clock at each read;
- ``aiperf`` (only with ``--aiperf PATH``): ``aiperf profile`` as ``client_overhead.py`` drives it; its
  ``inter_chunk_latency`` per request from ``profile_export.jsonl`` (matched to the server's streams through
  ``inputs.json`` where the prompts are unique, else compared as pooled distributions).

Columns (ms; an error is the client's value minus the truth):

- ``true p50/p99``: percentiles of the server's gaps between consecutive writes of a stream;
- ``ITL p50 err``, ``ITL p99 err``: the client's ITL percentile minus the true one (same streams);
- ``|gap err| p50/p99``: percentiles of |client gap - server gap| paired gap by gap;
- ``TTFT err``: median of (client first token - server first write);
- ``coal%``: output chunks that share their timestamp with the previous or next chunk of the same request
  (read together: coalesced), over all chunks;
- ``stamps``: the records' ``stamp_source`` counts; ``runq``: mean runnable tasks during the run
  (``/proc/loadavg``); ``load1``: the 1-minute load average after it;
- ``cpu``, ``lag p99``, ``in-flight``: the run's ``client_load`` (:mod:`alflow.loadgen.monitor`);
  ``measurable`` and ``verdict``: :func:`alflow.loadgen.timing.client_timing` of the run.

TCP merges segments that wait in the receive queue and the merged one carries the newest stamp, so within one
coalesced read only the newest event is exact: kernel stamps fix the gap *before* a late read, not the zero
gaps inside it.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import importlib.util
import itertools
import json
import os
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SERVER_SCRIPT = ROOT / "benchmarks" / "client_overhead.py"
MODEL = "sim/llama-3.3-70b"
SERVER_CPUS: set[int] | None = None
"""With ``--pin``: the server's CPU (the last one); the client and the burners get the others."""
CLIENT_CPUS: set[int] | None = None
TARGETS = (
    "targets at load average ~5: median ITL error < 0.5 ms and p99 ITL error < 2 ms with kernel stamps; "
    "without them every affected percentile flagged"
)
_BURN = (
    "import os, sys, time\n"
    "end, parent = time.monotonic() + float(sys.argv[1]), int(sys.argv[2])\n"
    "while time.monotonic() < end and os.getppid() == parent:\n"
    "    for _ in range(200000):\n"
    "        pass\n"
)


# ------------------------------------------------------------------------------------------------
# Processes: each in its own process group, killed with it; none outlives this script


def _spawn(cmd: list[str], cpus: set[int] | None = None, **kwargs: Any) -> subprocess.Popen[Any]:
    def child() -> None:  # before exec: SIGKILL when this script dies (PR_SET_PDEATHSIG), however it ends
        with contextlib.suppress(Exception):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
        if cpus:
            os.sched_setaffinity(0, cpus)

    # A new session is a new scheduler autogroup (kernel.sched_autogroup_enabled): nice then has no effect
    # against this process, but the group's weight on its CPUs is its own. A pinned server gets one (else this
    # group's weight, spread over its CPUs by load, leaves the server a few % of its CPU against any other
    # session there); the rest share this process's group (process_group=0), where nice acts as in a shell.
    group = {"start_new_session": True} if cpus is not None and cpus == SERVER_CPUS else {"process_group": 0}
    return subprocess.Popen(cmd, preexec_fn=child, **group, **kwargs)  # noqa: PLW1509


def _stop(proc: subprocess.Popen[Any]) -> None:
    """Terminate ``proc``'s whole process group (then kill it) and reap ``proc``."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # children that outlived the leader (aiperf's workers)
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


def _start_server(delay_ms: float, nice: int) -> tuple[subprocess.Popen[Any], int]:
    cmd = ["nice", "-n", str(nice), sys.executable, str(SERVER_SCRIPT), "--serve-fixed", str(delay_ms)]
    proc = _spawn(cmd, SERVER_CPUS, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                break
            line = proc.stdout.readline()
            if not line:
                break
            if line.startswith("PORT "):
                return proc, int(line.split()[1])
    except BaseException:
        _stop(proc)
        raise
    _stop(proc)
    raise RuntimeError(f"the fixed-delay server did not start: {cmd}")


def _start_burners(n: int, max_s: float, nice: int) -> list[subprocess.Popen[Any]]:
    procs: list[subprocess.Popen[Any]] = []
    try:
        for _ in range(n):
            cmd = ["nice", "-n", str(nice), sys.executable, "-c", _BURN, str(max_s), str(os.getpid())]
            procs.append(_spawn(cmd, CLIENT_CPUS, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    except BaseException:
        for p in procs:
            _stop(p)
        raise
    return procs


class _RunQueue(threading.Thread):
    """Samples the runnable task count (``/proc/loadavg``, 4th field) every 100 ms while a client runs."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.samples: list[int] = []
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(0.1):
            with contextlib.suppress(OSError, ValueError, IndexError):
                running = Path("/proc/loadavg").read_text().split()[3].split("/")[0]
                self.samples.append(int(running) - 1)  # less this sampler itself

    def stop(self) -> float | None:
        self._halt.set()
        self.join()
        return statistics.fmean(self.samples) if self.samples else None


def _server_tools() -> Any:
    """``benchmarks/client_overhead.py`` as a module (its emits fetch and its aiperf command line)."""
    spec = importlib.util.spec_from_file_location("client_overhead", SERVER_SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------------------------------------
# What each client saw, per stream


@dataclass
class Stream:
    """One request as a client saw it, and the server's write times for its prompt."""

    key: str | None
    """The prompt (the server's /emits key); None when unknown or shared by several requests."""
    ok: bool
    first_ns: float | None
    """The client's first output chunk, on the ``perf_counter_ns`` clock."""
    gaps_ns: list[float]
    """Client gaps between consecutive output chunks."""
    emits: list[int] | None = None


@dataclass
class Outcome:
    """One client run."""

    streams: list[Stream]
    stamps: Counter[str] = field(default_factory=Counter)
    client_load: Any = None
    measurable: str = "n/a"
    verdict: str = "n/a"
    error: str | None = None


def _prompt(i: int) -> str:
    return f"request number {i} please continue"


def _run_alflow(url: str, conc: int, num: int, osl: int, kernel: bool) -> Outcome:
    from alflow.datasets.types import Session, Turn
    from alflow.loadgen import LoadSpec, Target, run_load
    from alflow.loadgen.fast import FastTransport
    from alflow.loadgen.frames import records_frame
    from alflow.loadgen.timing import client_timing
    from alflow.util import eventloop

    prompts = [_prompt(i) for i in range(num)]
    sessions = [
        Session(f"s{i}", (Turn(p, max_tokens=osl, min_tokens=osl, ignore_eos=True),))
        for i, p in enumerate(prompts)
    ]
    target = Target(url, MODEL, endpoint="completions")
    spec = LoadSpec(concurrency=conc, keep_text=False, stall_timeout_s=120.0, timeout_s=900.0)

    async def go() -> Any:
        # alflow-kernel: run_load's own default transport; alflow-clock: one without kernel stamps
        transport = None if kernel else FastTransport(target.headers, kernel_stamps=False)
        try:
            return await run_load(sessions, target, spec, transport=transport)
        finally:
            if transport is not None:
                await transport.close()

    res = eventloop.run(go())
    streams = []
    for r in res.records:
        if r.warmup:
            continue
        ts = r.chunk_ns
        first = float(ts[0]) if ts else None
        gaps = [float(b - a) for a, b in itertools.pairwise(ts)]
        streams.append(Stream(prompts[int(r.session_id[1:])], r.ok, first, gaps))
    out = Outcome(streams, Counter(r.stamp_source or "none" for r in res.records if not r.warmup))
    out.client_load = res.client_load
    timing = client_timing(records_frame(res.records), res.client_load)
    out.verdict = timing.verdict
    out.measurable = "yes" if timing.itl_measurable else "no"
    return out


def _run_aiperf(url: str, conc: int, num: int, osl: int, tmp: Path, run_id: str) -> Outcome:
    tools = _server_tools()
    tools.ARGS = argparse.Namespace(aiperf=ARGS.aiperf, loop="uvloop")  # what its helpers read
    tok = tmp / "tokenizer"
    if not tok.exists() and not tools._make_tokenizer(tok):
        return Outcome([], error="no tokenizer for aiperf")
    art = tmp / f"aiperf-{run_id}"
    argv = tools._aiperf_argv(url, conc, num, osl, tok, art)
    with (tmp / f"aiperf-{run_id}.log").open("w") as log:
        proc = _spawn(argv, stdout=log, stderr=subprocess.STDOUT)
        try:
            rc = proc.wait(ARGS.aiperf_timeout_s)
        except subprocess.TimeoutExpired:
            rc = -1
        finally:
            _stop(proc)
    records = sorted(art.rglob("profile_export.jsonl"))
    if not records:
        return Outcome([], error=f"aiperf exited {rc} without profile_export.jsonl (log: {log.name})")
    prompt_of: dict[str, str] = {}
    with contextlib.suppress(StopIteration, OSError, ValueError, KeyError, IndexError, TypeError):
        inputs = json.loads(next(art.rglob("inputs.json")).read_text())
        for d in inputs["data"]:
            p = d["payloads"][0].get("prompt")
            prompt_of[d["session_id"]] = p if isinstance(p, str) else json.dumps(p)
    counts = Counter(prompt_of.values())
    offset = time.time_ns() - time.perf_counter_ns()  # aiperf's request_start_ns is wall-clock time
    streams = []
    for line in records[0].read_text().splitlines():
        with contextlib.suppress(ValueError, KeyError, TypeError, AttributeError):
            rec = json.loads(line)
            meta, metrics = rec.get("metadata") or {}, rec.get("metrics") or {}
            icl = (metrics.get("inter_chunk_latency") or {}).get("value") or []
            ttft = (metrics.get("time_to_first_token") or {}).get("value")
            start = meta.get("request_start_ns")
            first = start + ttft * 1e6 - offset if start is not None and ttft is not None else None
            key = prompt_of.get(meta.get("conversation_id", ""))
            key = key if key is not None and counts[key] == 1 else None
            streams.append(Stream(key, rec.get("error") is None, first, [float(g) * 1e6 for g in icl]))
    return Outcome(streams, Counter({"aiperf-clock": len(streams)}))


# ------------------------------------------------------------------------------------------------
# Statistics


def _pct(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default) of sorted ``values``."""
    pos = (len(values) - 1) * q
    low = int(pos)
    high = min(low + 1, len(values) - 1)
    return values[low] + (values[high] - values[low]) * (pos - low)


def _stats(out: Outcome, emits: dict[str, list[int]]) -> dict[str, Any]:
    for s in out.streams:
        s.emits = emits.get(s.key) if s.key is not None else None
    ok = [s for s in out.streams if s.ok]
    matched = [s for s in ok if s.emits and len(s.emits) >= 2]
    row: dict[str, Any] = {"ok": len(ok), "n": len(out.streams), "matched": len(matched)}
    # same streams on both sides where they match; else (aiperf without unique prompts) pooled distributions
    sources = [s.emits for s in matched] if matched else list(emits.values())
    true = sorted(float(b - a) for e in sources if e for a, b in itertools.pairwise(e))
    seen = sorted(g for s in (matched or ok) for g in s.gaps_ns)
    if true:
        row["true_p50"], row["true_p99"] = _pct(true, 0.5) / 1e6, _pct(true, 0.99) / 1e6
    if true and seen:
        row["itl_p50_err"] = (_pct(seen, 0.5) - _pct(true, 0.5)) / 1e6
        row["itl_p99_err"] = (_pct(seen, 0.99) - _pct(true, 0.99)) / 1e6
    paired = sorted(
        abs(g - (e[j + 1] - e[j])) / 1e6
        for s in matched
        if (e := s.emits) is not None and len(s.gaps_ns) == len(e) - 1
        for j, g in enumerate(s.gaps_ns)
    )
    if paired:
        row["gap_err_p50"], row["gap_err_p99"] = _pct(paired, 0.5), _pct(paired, 0.99)
    ttft = [(s.first_ns - s.emits[0]) / 1e6 for s in matched if s.first_ns is not None and s.emits]
    if ttft:
        row["ttft_err"] = statistics.median(ttft)
    chunks = coalesced = 0
    for s in ok:
        g = s.gaps_ns
        n = len(g) + 1 if s.first_ns is not None or g else 0
        chunks += n
        coalesced += sum(1 for j in range(n) if (j > 0 and g[j - 1] == 0) or (j < len(g) and g[j] == 0))
    row["coalesced"] = coalesced / chunks if chunks else None
    return row


# ------------------------------------------------------------------------------------------------
# Driver


def _one_run(level: str, client: str, tmp: Path) -> dict[str, Any]:
    conc, osl = ARGS.concurrency, ARGS.osl
    num = conc * ARGS.prompts_per_slot
    proc, port = _start_server(ARGS.delay_ms, ARGS.server_nice)
    url = f"http://127.0.0.1:{port}"
    row: dict[str, Any] = {"level": level, "client": client}
    runq = _RunQueue()
    try:
        load_before = os.getloadavg()[0]
        runq.start()
        t0 = time.monotonic()
        try:
            if client == "aiperf":
                out = _run_aiperf(url, conc, num, osl, tmp, f"{level}-{conc}")
            else:
                out = _run_alflow(url, conc, num, osl, kernel=client == "alflow-kernel")
        except Exception as exc:
            out = Outcome([], error=f"{type(exc).__name__}: {exc}")
        row["wall_s"] = time.monotonic() - t0
        row["runq"] = runq.stop()
        row["load1_before"], row["load1"] = load_before, os.getloadavg()[0]
        emits = _server_tools()._fetch_emits(port) if out.streams else {}
    finally:
        if runq.is_alive():
            runq.stop()
        _stop(proc)
    row.update(_stats(out, emits))
    row["stamps"] = " ".join(f"{k}:{v}" for k, v in sorted(out.stamps.items())) or "-"
    cl = out.client_load
    if cl is not None:
        row["cpu"], row["lag_p99"] = cl.cpu_share, cl.lag_p99_ms
        row["in_flight"] = f"{cl.in_flight_max}/{cl.concurrency}"
    row["measurable"], row["verdict"] = out.measurable, out.verdict
    if out.error:
        row["verdict"] = f"ERROR {out.error}"
    print(
        f"  {level:<5} {client:<14} done in {row['wall_s']:.1f} s: {json.dumps(_plain(row))}", file=sys.stderr
    )
    return row


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}


def main() -> None:
    levels = [x for x in ARGS.levels.split(",") if x]
    for level in levels:
        if level not in ("none", "burn"):
            raise SystemExit(f"--levels: unknown level {level!r} (none, burn)")
    clients = [c for c in ARGS.clients.split(",") if c]
    for client in clients:
        if client not in ("alflow-kernel", "alflow-clock"):
            raise SystemExit(f"--clients: unknown client {client!r} (alflow-kernel, alflow-clock)")
    if ARGS.aiperf:
        clients.append("aiperf")
    global SERVER_CPUS, CLIENT_CPUS
    cpus = sorted(os.sched_getaffinity(0))
    if ARGS.pin and len(cpus) >= 2:
        SERVER_CPUS, CLIENT_CPUS = {cpus[-1]}, set(cpus[:-1])
        os.sched_setaffinity(0, CLIENT_CPUS)  # this process is the client (aiperf inherits it too)
    print(
        f"timing truth: {os.cpu_count()} cores, concurrency {ARGS.concurrency}, "
        f"{ARGS.concurrency * ARGS.prompts_per_slot} prompts of {ARGS.osl} tokens, one token per stream every "
        f"{ARGS.delay_ms:g} ms (server nice {ARGS.server_nice}), burners {ARGS.burners} (nice {ARGS.burner_nice}); "
        + (f"server on CPU {sorted(SERVER_CPUS)}, client and burners on {sorted(CLIENT_CPUS or ())}" if SERVER_CPUS
           else "no CPU pinning")
    )  # fmt: skip
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="alflow-timing-") as tmpdir:
        for level in levels:
            burners: list[subprocess.Popen[Any]] = []
            try:
                before = os.getloadavg()
                if level == "burn" and ARGS.burners > 0:
                    burners = _start_burners(ARGS.burners, ARGS.burn_max_s, ARGS.burner_nice)
                    time.sleep(ARGS.burn_warmup_s)
                print(
                    f"level {level}: load average before {_loads(before)}, at the start {_loads(os.getloadavg())}"
                )
                for client in clients:
                    rows.append(_one_run(level, client, Path(tmpdir)))
                print(f"level {level}: load average after {_loads(os.getloadavg())}")
            finally:
                for b in burners:
                    _stop(b)
    print()
    _print_table(rows)
    print()
    print(TARGETS)
    if ARGS.json:
        Path(ARGS.json).write_text(json.dumps([_plain(r) for r in rows], indent=1))


def _loads(values: tuple[float, float, float]) -> str:
    return "/".join(f"{v:.2f}" for v in values) + " (1/5/15 min)"


def _f(v: Any, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def _print_table(rows: list[dict[str, Any]]) -> None:
    cols: list[tuple[str, Any]] = [
        ("level", lambda r: r["level"]),
        ("client", lambda r: r["client"]),
        ("ok/n", lambda r: f"{r.get('ok', 0)}/{r.get('n', 0)}"),
        ("stamps", lambda r: r["stamps"]),
        ("runq", lambda r: _f(r.get("runq"), ".1f")),
        ("load1", lambda r: _f(r.get("load1"), ".1f")),
        ("coal%", lambda r: _f(None if r.get("coalesced") is None else 100 * r["coalesced"], ".1f")),
        ("true p50/p99", lambda r: f"{_f(r.get('true_p50'))}/{_f(r.get('true_p99'))}"),
        ("ITL p50 err", lambda r: _f(r.get("itl_p50_err"), "+.3f")),
        ("ITL p99 err", lambda r: _f(r.get("itl_p99_err"), "+.3f")),
        (
            "|gap err| p50/p99",
            lambda r: f"{_f(r.get('gap_err_p50'), '.3f')}/{_f(r.get('gap_err_p99'), '.2f')}",
        ),
        ("TTFT err", lambda r: _f(r.get("ttft_err"), "+.3f")),
        ("cpu", lambda r: _f(r.get("cpu"))),
        ("lag p99", lambda r: _f(r.get("lag_p99"), ".1f")),
        ("in-flight", lambda r: r.get("in_flight", "-")),
        ("measurable", lambda r: r["measurable"]),
    ]
    cells = [[str(get(r)) for _, get in cols] for r in rows]
    widths = [max(len(name), *(len(c[i]) for c in cells)) for i, (name, _) in enumerate(cols)]
    left = {"level", "client", "stamps", "measurable"}

    def line(values: list[str]) -> str:
        return "  ".join(
            v.ljust(w) if cols[i][0] in left else v.rjust(w)
            for i, (v, w) in enumerate(zip(values, widths, strict=True))
        )

    head = line([name for name, _ in cols])
    print(head + "  verdict")
    print("-" * (len(head) + 9))
    for r, c in zip(rows, cells, strict=True):
        print(line(c) + "  " + r["verdict"])
    print(
        "ms; err = client - truth (the server's write times); |gap err|: paired gap by gap; coal%: output chunks "
        "that share a timestamp with a neighbour"
    )


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(__doc__.splitlines()[2:]),
    )  # fmt: skip
    p.add_argument("--concurrency", type=int, default=256, help="streams in flight (default 256)")
    p.add_argument("--osl", type=int, default=200, help="output tokens per request (default 200)")
    p.add_argument(
        "--prompts-per-slot",
        type=int,
        default=2,
        help="requests = this x concurrency, each its own prompt (2)",
    )
    p.add_argument("--delay-ms", type=float, default=10.0, help="the server's time between tokens (10 ms)")
    p.add_argument("--server-nice", type=int, default=10, help="nice value of the server process (10)")
    p.add_argument("--levels", default="none,burn", help="comma-separated load levels: none, burn (both)")
    p.add_argument(
        "--pin",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="server alone on the last CPU, client and burners on the others, so the burners starve the client, "
        "not the server (a starved server writes in bursts and its own gaps stop being a steady truth); "
        "--no-pin: everything shares every CPU (default: pin when there are 2+ CPUs)",
    )
    p.add_argument("--burners", type=int, default=2, help="busy-loop processes at level burn (2)")
    p.add_argument("--burner-nice", type=int, default=0, help="nice value of the burners (0: the client's)")
    p.add_argument(
        "--burn-warmup-s",
        type=float,
        default=10.0,
        help="seconds the burners run before the first client (10)",
    )
    p.add_argument(
        "--burn-max-s",
        type=float,
        default=900.0,
        help="a burner exits by itself after this many seconds (900)",
    )
    p.add_argument(
        "--clients",
        default="alflow-kernel,alflow-clock",
        help="alflow clients to run (alflow-kernel,alflow-clock)",
    )
    p.add_argument(
        "--aiperf", default="", help="path of an aiperf executable: adds aiperf rows (off by default)"
    )
    p.add_argument("--aiperf-timeout-s", type=float, default=600.0, help="limit of one aiperf run (600 s)")
    p.add_argument("--json", default="", help="also write the rows to this JSON file")
    return p.parse_args()


if __name__ == "__main__":
    ARGS = _parse()
    main()
