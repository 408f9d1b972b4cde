"""Splitting one point's load over client processes: the checks, the split, the options that carry it.

The runs themselves (worker processes against the sim over real HTTP) are in tests/integration/test_multiproc.py.
"""

from __future__ import annotations

from collections import Counter

import pytest
import typer
from pydantic import ValidationError
from typer.testing import CliRunner

from alflow.cli.bench import register
from alflow.config.flows import BenchmarkParams
from alflow.config.workloads import LoadConfig
from alflow.datasets.types import Session, Turn
from alflow.errors import InvalidInputError
from alflow.loadgen import LoadSpec, Target, run_load
from alflow.loadgen.multiproc import split_evenly, split_load

pytestmark = pytest.mark.unit


def _sessions(n: int, prefix: str = "s") -> list[Session]:
    return [Session(f"{prefix}{i}", (Turn(f"prompt {i}", 4),)) for i in range(n)]


def _app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """Test root."""

    register(app)
    return app


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        (LoadSpec(concurrency=8, processes=0), "processes=0 must be an integer in [1, 64]"),
        (LoadSpec(concurrency=100, processes=65), "processes=65 must be an integer in [1, 64]"),
        (LoadSpec(concurrency=2, processes=3), "processes=3 must not exceed concurrency=2"),
    ],
)
def test_bad_process_counts_are_refused_naming_the_field(spec: LoadSpec, fragment: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        spec.check()
    assert fragment in str(info.value)


def test_the_largest_and_smallest_process_counts_pass() -> None:
    LoadSpec(concurrency=64, processes=64).check()
    LoadSpec(processes=1).check()


async def test_run_load_refuses_bad_processes_before_any_request() -> None:
    target = Target("http://127.0.0.1:9", "m")  # nothing listens: a request would fail differently
    with pytest.raises(InvalidInputError, match="processes=5 must not exceed concurrency=4"):
        await run_load(_sessions(4), target, LoadSpec(concurrency=4, processes=5))


async def test_a_custom_clock_cannot_cross_processes() -> None:
    target = Target("http://127.0.0.1:9", "m")
    with pytest.raises(InvalidInputError, match="processes=2: a custom clock cannot cross processes"):
        await run_load(_sessions(4), target, LoadSpec(concurrency=4, processes=2), clock=lambda: 0)


def test_split_evenly() -> None:
    assert split_evenly(10, 3) == [4, 3, 3]
    assert split_evenly(3, 3) == [1, 1, 1]
    assert sum(split_evenly(1023, 7)) == 1023


def test_the_split_offers_the_single_process_load() -> None:
    sessions, warm = _sessions(10), _sessions(3, "w")
    spec = LoadSpec(concurrency=7, num_prompts=25, warmup=5, request_rate=9.0, processes=3, seed=4)
    shares = split_load(sessions, spec, warm)
    assert len(shares) == 3
    assert [s.spec.concurrency for s in shares] == [3, 2, 2]
    assert [s.spec.num_prompts for s in shares] == [9, 8, 8]
    assert [s.spec.warmup for s in shares] == [2, 2, 1]
    assert [s.spec.request_rate for s in shares] == [3.0, 3.0, 3.0]
    assert [s.spec.seed for s in shares] == [4, 5, 6]  # independent Poisson streams
    assert all(s.spec.processes == 1 for s in shares)
    # the same sessions as one process sends (cycled in order), dealt round-robin
    one = Counter(sessions[i % 10].session_id for i in range(25))
    assert Counter(x.session_id for s in shares for x in s.sessions) == one
    assert [x.session_id for x in shares[1].sessions[:3]] == ["s1", "s4", "s7"]
    warmed = Counter(x.session_id for s in shares for x in s.warmup_sessions or [])
    assert warmed == Counter(warm[i % 3].session_id for i in range(5))
    assert all(s.stagger_s == 0 for s in shares)


def test_constant_arrivals_interleave_and_fewer_prompts_use_fewer_processes() -> None:
    spec = LoadSpec(concurrency=8, request_rate=10.0, arrival="constant", processes=4)
    shares = split_load(_sessions(8), spec)
    assert [s.stagger_s for s in shares] == [0.0, 0.1, 0.2, 0.3]
    assert [s.spec.num_prompts for s in shares] == [2, 2, 2, 2]  # the default: every session once
    few = split_load(_sessions(2), LoadSpec(concurrency=8, processes=4))
    assert len(few) == 2
    assert [s.spec.concurrency for s in few] == [4, 4]
    assert [s.warmup_sessions for s in few] == [None, None]


def test_a_timed_run_deals_the_sessions_and_runs_each_worker_for_the_duration() -> None:
    shares = split_load(_sessions(5), LoadSpec(concurrency=4, duration_s=3.0, processes=2))
    assert [s.spec.num_prompts for s in shares] == [None, None]
    assert [s.spec.duration_s for s in shares] == [3.0, 3.0]
    assert [[x.session_id for x in s.sessions] for s in shares] == [["s0", "s2", "s4"], ["s1", "s3"]]
    rotated = split_load(_sessions(2), LoadSpec(concurrency=3, duration_s=1.0, processes=3))
    assert [[x.session_id for x in s.sessions] for s in rotated] == [["s0", "s1"], ["s1", "s0"], ["s0", "s1"]]


def test_the_flows_load_config_bounds_client_processes() -> None:
    assert LoadConfig(concurrency=4, client_processes=4).client_processes == 4
    for bad in ({"client_processes": 0}, {"client_processes": 65, "concurrency": 100}):
        with pytest.raises(ValidationError, match="client_processes"):
            LoadConfig.model_validate(bad)
    with pytest.raises(ValidationError, match="client_processes=3 must not exceed concurrency=2"):
        LoadConfig(concurrency=2, client_processes=3)


def test_auto_client_processes_needs_one_process_and_a_warm_up_in_the_flows_configs() -> None:
    assert LoadConfig(concurrency=4, warmup=4, auto_client_processes=True).auto_client_processes
    with pytest.raises(
        ValidationError, match="auto_client_processes needs client_processes=1 and warmup >= 1"
    ):
        LoadConfig(concurrency=4, warmup=0, auto_client_processes=True)
    with pytest.raises(ValidationError, match=r"got client_processes=2, warmup=4"):
        LoadConfig(concurrency=4, warmup=4, client_processes=2, auto_client_processes=True)
    base = {
        "model": {"id": "org/m"},
        "k": 3,
        "target_al": 2.5,
        "server": {"framework": "sim", "model": "org/m"},
    }
    assert BenchmarkParams.model_validate({**base, "auto_client_processes": True}).auto_client_processes
    with pytest.raises(ValidationError, match="warmup_per_concurrency=0"):
        BenchmarkParams.model_validate({**base, "auto_client_processes": True, "warmup_per_concurrency": 0})


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--client-processes", "0"], "--client-processes 0: must be an integer in [1, 64]"),
        (["--client-processes", "65", "--concurrency", "99"], "--client-processes 65: must be an integer in"),
        (
            ["--client-processes", "3", "--concurrency", "2"],
            "--client-processes 3: must not exceed --concurrency",
        ),
    ],
)
def test_bench_refuses_a_bad_client_process_count_in_one_line(argv: list[str], fragment: str) -> None:
    r = CliRunner().invoke(_app(), ["bench", "--base-url", "http://127.0.0.1:9", "--model", "m", *argv])
    assert r.exit_code == 2, r.output
    lines = [line for line in r.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error:")
    assert fragment in lines[0]
