"""The sim across nodes on this host: join, health, per-node metrics, failures, timing across nodes.

A head (rank 0) and workers run ``python -m alflow.sim serve --nnodes N --node-rank R ...`` and talk
the join protocol over TCP (:mod:`alflow.sim.cluster`); node R listens on ``--port + R``.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import aiohttp
import pytest

from alflow.frameworks.launch import free_port
from alflow.frameworks.vllm import names as vllm_names
from alflow.metrics.prometheus import scrape_all
from alflow.sim.config import SimConfig
from alflow.sim.process import start_in_thread
from alflow.sim.profiles import get_profile, predicted_tpot_s
from alflow.sim.tokenizer import get_tokenizer

pytestmark = pytest.mark.integration


class Nodes:
    """Starts sim nodes of one group and kills what is left at the end."""

    def __init__(self, nnodes: int, *extra: str) -> None:
        self.port = free_port("127.0.0.1", 2)
        self.dist_port = free_port()
        self.nnodes = nnodes
        self.extra = extra
        self.procs: list[subprocess.Popen[str]] = []

    def start(self, rank: int, *more: str, nnodes: int | None = None) -> subprocess.Popen[str]:
        argv = [sys.executable, "-m", "alflow.sim", "serve", "--port", str(self.port)]
        argv += ["--nnodes", str(nnodes or self.nnodes), "--node-rank", str(rank)]
        argv += ["--head-addr", "127.0.0.1", "--dist-port", str(self.dist_port)]
        argv += ["--time-scale", "0", "--heartbeat-interval", "0.1", "--peer-timeout", "2"]
        argv += [*self.extra, *more]
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.procs.append(proc)
        return proc

    def url(self, rank: int, path: str = "/health") -> str:
        return f"http://127.0.0.1:{self.port + rank}{path}"

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.communicate(timeout=10)


@pytest.fixture
def nodes() -> Iterator[list[Nodes]]:
    made: list[Nodes] = []
    yield made
    for group in made:
        group.close()


def status(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except OSError:
        return 0, ""


def wait_status(url: str, code: int, timeout_s: float = 30.0) -> str:
    deadline = time.monotonic() + timeout_s
    while True:
        got, body = status(url)
        if got == code:
            return body
        if time.monotonic() > deadline:
            raise AssertionError(f"{url} answered {got} ({body!r}), not {code}, within {timeout_s} s")
        time.sleep(0.05)


def exit_of(proc: subprocess.Popen[str], timeout_s: float) -> tuple[int, str]:
    _, err = proc.communicate(timeout=timeout_s)
    return proc.returncode, err


def complete(url: str, max_tokens: int) -> int:
    body = json.dumps({"prompt": "hello", "max_tokens": max_tokens, "ignore_eos": True}).encode()
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return int(json.load(resp)["usage"]["completion_tokens"])


def test_head_serves_once_the_worker_joined_and_dp_metrics_sum_over_both_nodes(nodes: list[Nodes]) -> None:
    group = Nodes(2, "--node-parallel", "dp", "--synthetic-al", "2.5", "--k", "3")
    nodes.append(group)
    head = group.start(0)
    body = wait_status(group.url(0), 503)
    assert "waiting for workers: 0 of 1 joined (missing rank 1)" in body
    code, _ = status(group.url(0, "/v1/models"))
    assert code == 200  # the head is up; only health and generation wait for the group
    worker = group.start(1)
    wait_status(group.url(0), 200)
    assert "worker rank 1 of 2" in wait_status(group.url(1), 200)
    tokens = sum(complete(group.url(0, "/v1/completions"), 30) for _ in range(6))
    assert tokens == 180
    urls = [group.url(0, vllm_names.VLLM_METRICS_PATH), group.url(1, vllm_names.VLLM_METRICS_PATH)]
    merged = asyncio.run(scrape_all(urls))
    head_only, worker_only = merged.parts
    # requests went to the ranks in turn: each node's endpoint has its own share, the sum is the whole
    for part in (head_only, worker_only):
        assert part.counter(vllm_names.VLLM_GENERATION_TOKENS) == 90
        drafts = part.counter(vllm_names.VLLM_NUM_DRAFTS)
        assert drafts is not None
        assert drafts > 0
    assert merged.counter(vllm_names.VLLM_GENERATION_TOKENS) == tokens
    assert head.poll() is None
    assert worker.poll() is None


def test_head_fails_when_a_joined_worker_goes_away(nodes: list[Nodes]) -> None:
    group = Nodes(2)
    nodes.append(group)
    head = group.start(0)
    worker = group.start(1)
    wait_status(group.url(0), 200)
    # the worker joins the head first and listens after: its own /health says when it serves
    wait_status(group.url(1), 200)
    # tp (the default): one model across the nodes, so only the head exposes metrics
    assert status(group.url(0, vllm_names.VLLM_METRICS_PATH))[0] == 200
    assert status(group.url(1, vllm_names.VLLM_METRICS_PATH))[0] == 404
    started = time.monotonic()
    worker.kill()
    code, err = exit_of(head, 15)
    assert time.monotonic() - started < 10
    assert code == 1
    # a killed peer's socket ends with EOF ("connection closed") or, when a heartbeat was in flight,
    # a reset ("connection broken: ... reset by peer"): both name the rank and the connection
    assert re.search(r"error: worker rank 1 left: connection (closed|broken)", err), err


def test_workers_exit_when_the_head_goes_away(nodes: list[Nodes]) -> None:
    group = Nodes(3)
    nodes.append(group)
    head = group.start(0)
    workers = [group.start(1), group.start(2)]
    wait_status(group.url(0), 200)
    head.kill()
    for worker in workers:
        code, err = exit_of(worker, 15)
        assert code == 1
        assert f"the head at 127.0.0.1:{group.dist_port} went away" in err


def test_head_refuses_a_second_rank_and_a_wrong_group_size_and_keeps_serving(nodes: list[Nodes]) -> None:
    group = Nodes(2)
    nodes.append(group)
    head = group.start(0)
    group.start(1)
    wait_status(group.url(0), 200)
    # same rank again (on its own port base, so it can listen at all): refused, the group unharmed
    twin = group.start(1, "--port", str(free_port("127.0.0.1", 2)))
    code, err = exit_of(twin, 15)
    assert code == 1
    assert "refused rank 1: worker rank 1 has already joined" in err
    stranger = group.start(1, nnodes=3)
    code, err = exit_of(stranger, 15)
    assert code == 1
    assert "worker says --nnodes 3, the head has --nnodes 2" in err
    assert status(group.url(0))[0] == 200
    assert head.poll() is None


def test_head_gives_up_when_not_every_worker_joins_in_time(nodes: list[Nodes]) -> None:
    group = Nodes(2, "--join-timeout", "1")
    nodes.append(group)
    head = group.start(0)
    code, err = exit_of(head, 15)
    assert code == 1
    assert "not every worker joined within 1 s: waiting for workers: 0 of 1 joined" in err


def test_a_worker_without_a_head_gives_up_after_its_join_timeout(nodes: list[Nodes]) -> None:
    group = Nodes(2, "--join-timeout", "1")
    nodes.append(group)
    worker = group.start(1)
    code, err = exit_of(worker, 15)
    assert code == 1
    assert f"worker rank 1 could not reach the head at 127.0.0.1:{group.dist_port} within 1 s" in err


async def test_tp_across_two_nodes_is_faster_by_the_profiles_multi_node_formula() -> None:
    """Real time: the head of a 2-node tp group streams at the TPOT of ``profile.across_nodes(2)``."""
    one = get_profile("h200-llama70b")
    two = one.across_nodes(2)
    k, al, steps = 3, 3.0, 24
    out_tokens = 1 + steps * int(al)
    port, dist_port = free_port("127.0.0.1", 2), free_port()
    common = {"port": port, "dist_port": dist_port, "nnodes": 2, "k": k, "synthetic_al": al}
    scale = 4.0  # simulated time 4x slower than the profile: host jitter small beside a step
    common |= {"time_scale": scale, "profile": one.name, "head_addr": "127.0.0.1"}
    head_cfg = SimConfig(**common).validate()  # type: ignore[arg-type]
    worker_cfg = SimConfig(**common, node_rank=1).validate()  # type: ignore[arg-type]
    with start_in_thread(head_cfg) as head, start_in_thread(worker_cfg):
        wait_status(head.base_url + "/health", 200)
        prompt = "Explain speculative decoding. " * 20
        body = {"prompt": prompt, "max_tokens": out_tokens, "ignore_eos": True, "stream": True}
        async with aiohttp.ClientSession() as session:
            first = end = 0.0
            async with session.post(head.base_url + "/v1/completions", json=body) as resp:
                async for _chunk in resp.content.iter_any():
                    if not first:
                        first = time.perf_counter()
                end = time.perf_counter()
    tpot = (end - first) / (out_tokens - 1) / scale  # in the sim's time
    prompt_tokens = len(get_tokenizer().encode(prompt))
    predicted_two = predicted_tpot_s(two, k, al, prompt_tokens, out_tokens)
    predicted_one = predicted_tpot_s(one, k, al, prompt_tokens, out_tokens)
    assert predicted_one / predicted_two > 1.3  # the second node's GPUs are visible in the prediction
    assert tpot == pytest.approx(predicted_two, rel=0.12)
