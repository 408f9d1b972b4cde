"""A real Prometheus (Debian's ``prometheus``, installed by ``scripts/ci-services.sh``) scraping a two-node sim.

The sim runs as two data-parallel nodes (``alflow sim serve --nnodes 2 --node-parallel dp``: one
engine and one ``/metrics`` endpoint per node); a ``prometheus`` process of the test's own (its own
configuration, storage in ``tmp_path``, a free port on 127.0.0.1, a 1 s scrape interval) scrapes both.
``alflow bench`` measures a load with warm-up through the head, scraping both nodes directly
(``--metrics-url`` twice) and reading the same window from Prometheus (``--prometheus-url``): the
PromQL window's counts must equal the direct scrapes' exactly (alflow differences counter values read
from Prometheus after warm-up and after the load; it never uses ``increase()``, whose extrapolation to
the window's edges changes counts), and so must AL. Without the binary the test skips, or fails when
``CI`` is set. No process is left behind.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from alflow.frameworks.launch import free_port
from alflow.frameworks.vllm import names as vllm_names

pytestmark = pytest.mark.services

PROMETHEUS = "/usr/bin/prometheus"
JOB = "alflow-sim"


def prometheus_binary() -> str:
    """The ``prometheus`` binary; missing, a failure under CI (this test may not be skipped there), else a skip."""
    path = PROMETHEUS if Path(PROMETHEUS).exists() else shutil.which("prometheus")
    if path:
        return path
    message = "prometheus is missing: install Debian's prometheus package (bash scripts/ci-services.sh does)"
    if os.environ.get("CI"):
        pytest.fail(f"{message}; CI is set, so the real-Prometheus test may not be skipped")
    pytest.skip(message)


def get_json(url: str, timeout_s: float = 5.0) -> Any:
    """GET ``url`` and parse its JSON body."""
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:
        return json.load(resp)


def answers(url: str) -> bool:
    """True when ``url`` answers HTTP 200."""
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM ``proc``, SIGKILL it after 10 s, and reap it."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def tail(path: Path, lines: int = 20) -> str:
    """The last ``lines`` lines of a log file (for failure messages)."""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""


@dataclass(frozen=True)
class Cluster:
    """The running two-node sim and the Prometheus scraping it."""

    base_url: str
    metrics_urls: tuple[str, ...]
    prometheus_url: str

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query's result vector."""
        q = urllib.parse.urlencode({"query": promql})
        body = get_json(f"{self.prometheus_url}/api/v1/query?{q}")
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result


def wait_until(what: str, check: Any, timeout_s: float, logs: list[Path]) -> None:
    """Poll ``check()`` every 0.1 s until it is true; else fail naming ``what`` with the logs' tails."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            shown = "\n".join(f"--- {p.name}:\n{tail(p)}" for p in logs)
            pytest.fail(f"{what} within {timeout_s:g} s\n{shown}")
        time.sleep(0.1)


def node_argv(port: int, dist_port: int, rank: int) -> list[str]:
    """``alflow sim serve`` for node ``rank`` of two data-parallel nodes (vLLM dialect, AL 2.5, K 3, real time)."""
    return [sys.executable, "-m", "alflow.sim", "serve", "--port", str(port), "--nnodes", "2",
            "--node-rank", str(rank), "--head-addr", "127.0.0.1", "--dist-port", str(dist_port),
            "--node-parallel", "dp", "--synthetic-al", "2.5", "--k", "3", "--time-scale", "1",
            "--seed", str(rank)]  # fmt: skip


def prometheus_config(targets: list[str]) -> str:
    """A Prometheus configuration scraping ``targets`` every second as job :data:`JOB` (a team's looks the same)."""
    return (
        "global:\n"
        "  scrape_interval: 1s\n"
        "  scrape_timeout: 1s\n"
        "scrape_configs:\n"
        f"  - job_name: {JOB}\n"
        "    static_configs:\n"
        f"      - targets: {json.dumps(targets)}\n"
    )


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """Two sim nodes (data-parallel, one metrics endpoint each) and a Prometheus scraping both every second."""
    binary = prometheus_binary()
    port, dist_port, prom_port = free_port("127.0.0.1", 2), free_port(), free_port()
    targets = [f"127.0.0.1:{port}", f"127.0.0.1:{port + 1}"]
    config = tmp_path / "prometheus.yml"
    config.write_text(prometheus_config(targets))
    prom_argv = [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                 f"--web.listen-address=127.0.0.1:{prom_port}", "--log.level=warn"]  # fmt: skip
    logs = [tmp_path / "node0.log", tmp_path / "node1.log", tmp_path / "prometheus.log"]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for log_path, argv in zip(
            logs, [*(node_argv(port, dist_port, r) for r in (0, 1)), prom_argv], strict=True
        ):
            with log_path.open("wb") as log:
                procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT))
        made = Cluster(
            f"http://127.0.0.1:{port}",
            tuple(f"http://{t}{vllm_names.VLLM_METRICS_PATH}" for t in targets),
            f"http://127.0.0.1:{prom_port}",
        )
        wait_until(
            "the two-node sim did not become healthy", lambda: answers(f"{made.base_url}/health"), 60, logs
        )

        def both_scraped() -> bool:
            if not answers(f"{made.prometheus_url}/-/ready"):
                return False
            up = made.query(f'up{{job="{JOB}"}} == 1')
            return sorted(r["metric"]["instance"] for r in up) == targets

        # Prometheus hands new targets to its scrapers about 5 s after it starts
        wait_until("Prometheus did not scrape both nodes", both_scraped, 30, logs)
        yield made
    finally:
        for proc in reversed(procs):
            stop(proc)
    assert all(p.poll() is not None for p in procs)


def test_promql_window_equals_the_direct_scrapes_of_both_nodes(cluster: Cluster, tmp_path: Path) -> None:
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "alflow.cli", "bench", "--base-url", cluster.base_url,
            "--metrics-url", cluster.metrics_urls[0], "--metrics-url", cluster.metrics_urls[1],
            "--prometheus-url", cluster.prometheus_url, "--prometheus-selector", f'{{job="{JOB}"}}',
            "--endpoint", "completions", "--isl", "16", "--osl", "96", "--vocab-size", "1000",
            "--concurrency", "8", "--warmup", "8", "--num-prompts", "32", "--out", str(out), "--json"]  # fmt: skip
    started = time.monotonic()
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    took_s = time.monotonic() - started
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    spec = summary["spec_decode"]
    assert spec["metrics_urls"] == list(cluster.metrics_urls)
    direct, promql = spec["stats"], spec["prometheus"]
    assert spec["error"] is None
    assert promql["error"] is None, promql["error"]
    prom = promql["stats"]
    # the window is long enough for Prometheus to scrape inside it: increase() would extrapolate here
    assert summary["duration"] > 2.0, summary["duration"]

    # the direct window: baseline after warm-up to the final scrape, both nodes' counters summed
    snaps = json.loads((out / "snapshots.json").read_text())
    drafts = f"{vllm_names.VLLM_NUM_DRAFTS}_total"
    per_node = [
        sum(s["value"] for s in final["samples"][drafts]) - sum(s["value"] for s in base["samples"][drafts])
        for base, final in zip(snaps["baseline"]["parts"], snaps["final"]["parts"], strict=True)
    ]
    assert len(per_node) == 2
    assert all(n > 0 for n in per_node), per_node  # both nodes served measured requests
    assert direct["num_drafts"] == sum(per_node)

    # Prometheus holds each node as its own series; the PromQL window equals the direct one exactly
    series = cluster.query(f'{drafts}{{job="{JOB}"}}')
    assert len({r["metric"]["instance"] for r in series}) == 2
    for key in ("num_drafts", "draft_tokens", "accepted_tokens", "accepted_per_position", "histogram"):
        assert prom[key] == direct[key], (key, prom[key], direct[key])
    assert prom["al"] == direct["al"]
    assert prom["al"] == pytest.approx(2.5, abs=0.1)
    assert "no extrapolation" in prom["note"]
    assert "first scrapes after the warm-up's end" in prom["note"]
    assert "not read after warm-up" not in prom["note"]  # every counter's start was read after warm-up
    assert took_s < 45, took_s
