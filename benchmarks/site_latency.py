"""The results site over 10,000 SYNTHETIC runs: cold catalogue build, then warm page latency over real HTTP.

Builds a temporary results root of clearly synthetic runs (model names start with ``synthetic-``, every
manifest says ``simulated``; nightly dates, mostly M2 runs with three points each across a few series,
some M0/M1 runs, a ``regression.json`` beside some M2 runs), then measures:

- the cold catalogue build (no cache), a refresh that finds nothing changed, and a cold start from the
  disk cache (a second catalogue over the same root reading the first one's cache);
- warm latency of the index, ``/api/runs``, a filtered index, a trend page and ``/api/trends``: N requests
  each over keep-alive HTTP against the running app (median and p95).

Run::

    .venv/bin/python benchmarks/site_latency.py [--runs 10000] [--requests 50] [--keep DIR] [--peer REV]

With ``--peer REV`` the same store is measured by commit REV's alflow and by this checkout's, each in a process
of its own, alternating (``--rounds``), and the table gives both and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl

from alflow.results.catalog import Catalog
from alflow.results.manifest import SCHEMA_VERSION, FileEntry, RunManifest, RunProvenance
from alflow.results.store import PARQUET_VERSION_KEY
from alflow.site.app import make_app
from alflow.site.server import run_site

HERE = Path(__file__).resolve().parents[1]
SERIES = [  # (framework, image, model, k, thinking)
    ("vllm", "vllm/vllm-openai", "synthetic-llama-70b", 3, "off"),
    ("vllm", "vllm/vllm-openai", "synthetic-llama-70b", 5, "off"),
    ("sglang", "lmsysorg/sglang", "synthetic-llama-70b", 3, "off"),
    ("sglang", "lmsysorg/sglang", "synthetic-qwen-32b", 3, "on"),
    ("trtllm", "nvcr.io/nvidia/tensorrt-llm/release", "synthetic-qwen-32b", 3, "off"),
]
CONCURRENCIES = (4, 16, 64)


def _point(fw: str, k: int, c: int, night: int) -> dict[str, object]:
    drift = 1.0 - 0.15 * ((night // 97) % 2)  # a step every 97 nights: something for a trend to show
    return {
        "concurrency": c,
        "k": k,
        "framework": fw,
        "target_al": 2.5,
        "achieved_al": 2.5 + 0.01 * ((night * 7 + c) % 5 - 2),
        "valid": night % 53 != 0,
        "partial": False,
        "audit": "synthetic",
        "num_drafts": 1000,
        "output_throughput": 100.0 * c * drift,
        "nodes": 1,
        "num_gpus": 1,
        "output_throughput_per_gpu": 100.0 * c * drift,
        "median_interactivity_tokens_per_s": 150.0 / (1 + c / 32) * drift,
        "median_tpot_ms": 6.0 * (1 + c / 32) / drift,
        "duration_s": 10.0,
        "client_verdict": "ok",
    }


def _write_run(
    root: Path, flow: str, started: datetime, run_id: str, config: dict[str, object], files: dict[str, bytes]
) -> Path:
    run_dir = root / flow / f"{started.strftime('%Y%m%dT%H%M%SZ')}-{run_id}"
    run_dir.mkdir(parents=True)
    for name, data in files.items():
        (run_dir / name).write_bytes(data)
    manifest = RunManifest(
        flow=flow,
        run_id=run_id,
        status="complete",
        simulated=True,
        started=started.isoformat(),
        finished=(started + timedelta(minutes=20)).isoformat(),
        config=config,
        provenance=RunProvenance(),
        files={n: FileEntry(written=started.isoformat()) for n in files if n != "regression.json"},
    )
    (run_dir / "manifest.json").write_text(manifest.model_dump_json())
    return run_dir


def _parquet(rows: list[dict[str, object]]) -> bytes:
    buf = io.BytesIO()
    pl.DataFrame(rows).write_parquet(buf, metadata={PARQUET_VERSION_KEY: str(SCHEMA_VERSION)})
    return buf.getvalue()


NIGHT = timedelta(
    hours=6
)  # four "nights" a day: 10,000 runs fit between 2024 and now (older runs are unreadable)


def build_store(root: Path, runs: int) -> None:
    """``runs`` synthetic runs: per night one M2 run per series, plus an M1 and (weekly) an M0 run."""
    nights = runs // len(SERIES) + 1
    start = (datetime.now(UTC) - nights * NIGHT - timedelta(days=1)).replace(
        minute=0, second=0, microsecond=0
    )
    written = night = 0
    while written < runs:
        day = start + night * NIGHT
        for n, (fw, image, model, k, thinking) in enumerate(SERIES):
            if written >= runs:
                break
            tag = f"v0.{10 + night // 90}.{night % 90 // 30}"
            points = [_point(fw, k, c, night) for c in CONCURRENCIES]
            files = {
                "spec_stats.parquet": _parquet(points),
                "summary.json": json.dumps(
                    {
                        "schema_version": SCHEMA_VERSION,
                        "flow": "m2",
                        "target_al": 2.5,
                        "scheme": None,
                        "points": points,
                    }
                ).encode(),
                "report.md": b"# M2 synthetic benchmark (SYNTHETIC DATA for the site benchmark)\n",
            }
            if night % 97 == 0 and night:
                verdicts = [
                    {
                        "outcome": "regressed",
                        "concurrency": c,
                        "series": {
                            "framework": fw,
                            "image": image,
                            "model": model,
                            "k": k,
                            "concurrency": c,
                            "thinking": thinking,
                        },
                    }
                    for c in CONCURRENCIES
                ]
                files["regression.json"] = json.dumps(
                    {"schema_version": SCHEMA_VERSION, "points": verdicts}
                ).encode()
            config = {
                "model": {"id": model},
                "k": k,
                "thinking": thinking,
                "server": {"framework": fw, "image": f"{image}:{tag}"},
            }
            _write_run(root, "m2", day + timedelta(minutes=n), f"{night:06d}{n:02d}m2", config, files)
            written += 1
        if written < runs and night % 7 == 0:
            summary = {
                "schema_version": SCHEMA_VERSION,
                "flow": "m1",
                "subject": "synthetic",
                "passed": night % 11 != 0,
            }
            config = {
                "model": {"id": "synthetic-llama-70b"},
                "k": 3,
                "thinking": "off",
                "server": {"framework": "vllm"},
            }
            _write_run(
                root,
                "m1",
                day + timedelta(minutes=30),
                f"{night:06d}00m1",
                config,
                {"summary.json": json.dumps(summary).encode()},
            )
            written += 1
        night += 1


def _serve(catalog: Catalog) -> tuple[str, asyncio.AbstractEventLoop, asyncio.Event, threading.Thread]:
    ready = threading.Event()
    url: list[str] = []
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()

    def main() -> None:
        asyncio.set_event_loop(loop)
        app = make_app(catalog, refresh_s=2.0)
        loop.run_until_complete(
            run_site(app, "127.0.0.1", 0, lambda u: (url.append(u), ready.set()), stop, signals=False)
        )

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    ready.wait(60)
    return url[0], loop, stop, thread


def _measure(host: str, port: int, path: str, n: int) -> tuple[float, float, int]:
    conn = http.client.HTTPConnection(host, port, timeout=60)
    times = []
    size = 0
    for i in range(n + 2):
        t0 = time.perf_counter()
        conn.request("GET", path)
        resp = conn.getresponse()
        body = resp.read()
        dt = (time.perf_counter() - t0) * 1000
        assert resp.status == 200, (path, resp.status, body[:200])
        if i >= 2:  # two warm-up requests
            times.append(dt)
        size = len(body)
    conn.close()
    times.sort()
    return statistics.median(times), times[max(0, round(0.95 * len(times)) - 1)], size


PATHS = [
    "/",
    "/api/runs",
    "/?flow=m2&model=synthetic-qwen-32b&sort=model&order=asc&page=3",
    "/?text=sglang",
    "/trends?framework={fw}&model={model}&k={k}&concurrency=16",
    "/api/trends?framework={fw}&model={model}&k={k}&concurrency=16",
    "/trends",
    "/api/trends",
]
Result = dict[str, dict[str, list[float]]]


def measure(root: Path, cache: Path, requests: int) -> Result:
    """The catalogue's steps (seconds) and each page's median/p95 ms and size, over the store at ``root``."""
    t0 = time.perf_counter()
    catalog = Catalog(str(root), cache_dir=None)
    cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    catalog.refresh(force=True)
    warm_refresh = time.perf_counter() - t0
    Catalog(str(root), cache_dir=cache)  # fills the cache
    t0 = time.perf_counter()
    cached = Catalog(str(root), cache_dir=cache)
    from_cache = time.perf_counter() - t0
    assert cached.reads == 0, cached.reads
    entries = catalog.entries()
    unreadable = sum(1 for e in entries if e.status == "unreadable")
    assert not unreadable, (
        f"{unreadable} of {len(entries)} synthetic runs unreadable: the benchmark's store is wrong"
    )
    print(f"catalogue: {len(entries)} runs, {len(catalog.series_keys())} trend lines")
    steps = {
        "cold build (no cache)": [cold],
        "refresh, nothing changed": [warm_refresh],
        "cold build from the disk cache": [from_cache],
    }
    url, loop, stop, thread = _serve(catalog)
    host, port = url.split("//")[1].rstrip("/").rsplit(":", 1)
    fw, _, model, k, _ = SERIES[0]
    pages = {}
    for path in (p.format(fw=fw, model=model, k=k) for p in PATHS):
        med, p95, size = _measure(host, int(port), path, requests)
        pages[path] = [med, p95, float(size)]
    loop.call_soon_threadsafe(stop.set)
    thread.join(30)
    return {"steps": steps, "pages": pages}


def _print_one(result: Result, requests: int) -> None:
    print("| step | seconds |\n|---|---:|")
    for step, (seconds,) in result["steps"].items():
        print(f"| {step} | {seconds:.3f} |")
    print(f"\nwarm latency, {requests} requests each (keep-alive, one client):\n")
    print("| path | median ms | p95 ms | bytes |\n|---|---:|---:|---:|")
    for path, (med, p95, size) in result["pages"].items():
        print(f"| `{path}` | {med:.1f} | {p95:.1f} | {int(size):,} |")


def _tree_of(rev: str, into: Path) -> Path:
    """The files of commit ``rev`` of this repository under ``into`` (with this checkout's compiled reader)."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(HERE), "archive", rev], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    for so in (HERE / "alflow" / "loadgen").glob("_rxread*.so"):
        shutil.copy2(so, into / "alflow" / "loadgen" / so.name)
    return into


def _side(tree: Path, root: Path, cache: Path, requests: int, out: Path) -> Result:
    """One measurement in a process of its own that imports alflow from ``tree``."""
    argv = [sys.executable, str(Path(__file__).resolve()), "--keep", str(root), "--requests", str(requests)]
    argv += ["--cache", str(cache), "--json", str(out)]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    subprocess.run(argv, env=env, cwd=tree, check=True, stdout=subprocess.DEVNULL)
    result: Result = json.loads(out.read_text())
    return result


def compare(peer: str, root: Path, tmp: Path, requests: int, rounds: int) -> None:
    """Both trees over the same store in one run, alternating, ``rounds`` times each; the median of the rounds."""
    before, after = f"before ({peer})", "after (this checkout)"
    trees = {before: _tree_of(peer, tmp / "peer"), after: HERE}
    runs: dict[str, list[Result]] = {before: [], after: []}
    for r in range(rounds):
        for name in (before, after) if r % 2 == 0 else (after, before):
            print(f"round {r + 1}: {name}", flush=True)
            cache = tmp / f"cache-{r}-{len(runs[name])}-{name[:5]}"
            runs[name].append(_side(trees[name], root, cache, requests, tmp / "out.json"))

    def mid(name: str, part: str, key: str, i: int) -> float:
        return statistics.median(run[part][key][i] for run in runs[name])

    print(f"\n{rounds} rounds each, alternating; the median of the rounds' figures:\n")
    print(f"| step | {before} s | {after} s | after/before |\n|---|---:|---:|---:|")
    for step in runs[after][0]["steps"]:
        b, a = mid(before, "steps", step, 0), mid(after, "steps", step, 0)
        print(f"| {step} | {b:.3f} | {a:.3f} | {a / b:.2f} |")
    print("\n| path | median ms before | median ms after | after/before | p95 ms before | p95 ms after |")
    print("|---|---:|---:|---:|---:|---:|")
    for path in runs[after][0]["pages"]:
        b, a = mid(before, "pages", path, 0), mid(after, "pages", path, 0)
        p95b, p95a = mid(before, "pages", path, 1), mid(after, "pages", path, 1)
        print(f"| `{path}` | {b:.1f} | {a:.1f} | {a / b:.2f} | {p95b:.1f} | {p95a:.1f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--requests", type=int, default=50)
    ap.add_argument("--keep", help="build the store here (kept) instead of a temporary folder")
    ap.add_argument(
        "--peer", help="also measure this commit of the repository over the same store, alternating"
    )
    ap.add_argument("--rounds", type=int, default=2, help="with --peer: measurements of each side")
    ap.add_argument("--cache", help=argparse.SUPPRESS)
    ap.add_argument("--json", help=argparse.SUPPRESS)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="alflow-site-bench-") as tmp:
        root = Path(args.keep) if args.keep else Path(tmp) / "results"
        t0 = time.perf_counter()
        if not (root / "m2").exists():
            build_store(root, args.runs)
            print(f"store: {args.runs} synthetic runs in {root} ({time.perf_counter() - t0:.1f} s to write)")
        if args.peer:
            compare(args.peer, root, Path(tmp), args.requests, args.rounds)
            return
        result = measure(root, Path(args.cache) if args.cache else Path(tmp) / "cache", args.requests)
        if args.json:
            Path(args.json).write_text(json.dumps(result))
        _print_one(result, args.requests)


if __name__ == "__main__":
    main()
