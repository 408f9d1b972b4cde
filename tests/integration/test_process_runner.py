"""The simulator started by the process runner from its recipe: knobs arrive, faults fail fast, stop works."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from alflow.config import ProcessOptions, ServerConfig, SpeculativeConfig, SyntheticAcceptance, server_config
from alflow.frameworks.recipes import build_launch
from alflow_infra.errors import ServerStartError
from alflow_infra.lifecycle import serving, start_server, stop_server
from alflow_infra.runners import ProcessRunner, running_server
from alflow_infra.runners.process import pid_of

ALFLOW = str(Path(sys.executable).with_name("alflow"))


pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("run_dirs_in_tmp_path")]


def sim_config(dialect: str, k: int, al: float | None, *extra: str, method: str = "mtp") -> ServerConfig:
    drafter = {"draft_model": "org/drafter"} if method in ("eagle3", "draft_model", "dflash") else {}
    return server_config(
        framework="sim",
        model="llama-3.3-70b",
        host="127.0.0.1",
        sim_dialect=dialect,  # type: ignore[arg-type]
        speculative=SpeculativeConfig(method=method, k=k, **drafter),  # type: ignore[arg-type]
        synthetic=None if al is None else SyntheticAcceptance(target_al=al),
        readiness_timeout_s=30,
        extra_args=("--time-scale", "0", *extra),
    )


def run_bench(base_url: str, dialect: str, k: int, prompts: int = 16) -> dict[str, Any]:
    """A short ``alflow bench`` (random prompts, completions endpoint) against ``base_url``."""
    argv = [ALFLOW, "bench", "--base-url", base_url, "--endpoint", "completions", "--dataset", "random"]
    argv += ["--vocab-size", "20000", "--isl", "32", "--osl", "64", "--ignore-eos", "--concurrency", "4"]
    argv += ["--num-prompts", str(prompts), "--dialect", dialect, "--k", str(k), "--json", "--no-progress"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    out: dict[str, Any] = json.loads(done.stdout)
    return out


@pytest.mark.parametrize(
    ("dialect", "method", "k", "al"),
    [
        ("vllm", "eagle3", 5, 3.24),
        ("sglang", "mtp", 3, 2.5),
        ("trtllm", "mtp", 3, 2.78),
        ("sglang", "dspark", 4, 3.0),  # DSpark: SGLANG_RAGGED_VERIFY_MODE=static rides along
        ("trtllm", "dflash", 4, 3.3),
    ],
)
def test_synthetic_knobs_reach_the_sim_through_each_frameworks_path(
    dialect: str, method: str, k: int, al: float
) -> None:
    launch = build_launch(sim_config(dialect, k, al, method=method))
    runner = ProcessRunner()
    with running_server(runner, launch) as handle:
        assert handle.dialect == dialect
        summary = run_bench(handle.base_url, dialect, k)
        assert summary["completed"] == 16
        assert summary["failed"] == 0
        spec = summary["spec_decode"]
        assert spec["metrics_url"] == handle.metrics_url
        stats = spec["stats"]
        assert stats["observed"] is True
        # the achieved AL is the knob's target (a missing knob would give the sim's natural AL)
        assert stats["al"] == pytest.approx(al, abs=0.15), stats
        log_text = runner.logs(handle, tail=1000)
    if dialect == "vllm":
        # min-variance schedule: positions before floor(L-1) always accepted, after the next never
        rates = stats["per_position_rates"]
        assert rates[:2] == [1.0, 1.0]
        assert rates[3:] == [0.0, 0.0]
        assert "speculative-config" in launch.command_line()
    else:
        assert launch.synthetic is not None
        knob_env = launch.synthetic["env"]
        assert isinstance(knob_env, dict)
        assert knob_env
        for name, value in knob_env.items():
            assert launch.env[name] == value
        # the sim logs which framework source its synthetic setting came from
        assert any(f"from {name}" in log_text for name in knob_env), log_text


def test_real_acceptance_differs_from_a_forced_one() -> None:
    """Without synthetic acceptance the sim's natural AL is in (1, K+1) and no knob is set."""
    launch = build_launch(sim_config("vllm", 3, None))
    assert launch.synthetic is None
    with running_server(ProcessRunner(), launch) as handle:
        stats = run_bench(handle.base_url, "vllm", 3, prompts=8)["spec_decode"]["stats"]
    assert 1.0 < stats["al"] < 4.0
    assert "synthetic" not in launch.command_line()


def test_fail_startup_fails_fast_with_the_log_tail() -> None:
    launch = build_launch(sim_config("vllm", 3, None, "--fail-startup"))
    runner = ProcessRunner()
    t0 = time.monotonic()
    with (
        pytest.raises(ServerStartError, match="died before it was ready") as info,
        running_server(runner, launch),
    ):
        pytest.fail("must not become ready")
    assert time.monotonic() - t0 < 15
    assert info.value.log_tail.strip(), "the log tail is attached"
    assert "error" in info.value.log_tail.lower()


def test_startup_delay_is_waited_for_and_stop_ends_the_process(tmp_path: Path) -> None:
    launch = build_launch(sim_config("trtllm", 3, 2.0, "--startup-delay", "1.0"))
    runner = ProcessRunner(ProcessOptions(log_dir=str(tmp_path)))
    t0 = time.monotonic()
    with running_server(runner, launch) as handle:
        assert time.monotonic() - t0 >= 1.0
        pid = pid_of(handle.id)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert "alflow-sim listening on" in Path(str(handle.log_path)).read_text()


def test_lifecycle_start_and_stop_from_another_runner_instance(tmp_path: Path) -> None:
    """start_server returns a ready handle; stop_server (a fresh runner, as in another task) stops it."""
    options = ProcessOptions(log_dir=str(tmp_path))
    handle = start_server(sim_config("sglang", 3, 2.0), options, run_id="run-42")
    assert handle.provenance.run_id == "run-42"
    assert "run-42" in str(handle.log_path)
    pid = pid_of(handle.id)
    os.kill(pid, 0)
    stop_server(handle, options)  # a fresh runner: finds the child, stops and reaps it
    assert not Path(f"/proc/{pid}").exists()


def test_lifecycle_stops_a_server_that_fails_to_start() -> None:
    with pytest.raises(ServerStartError, match="died before it was ready"):
        start_server(sim_config("vllm", 3, None, "--fail-startup"), ProcessOptions())
    slow = sim_config("vllm", 3, None, "--startup-delay", "30")
    with (
        pytest.raises(ServerStartError, match="not healthy"),
        serving(slow, ProcessOptions(stop_timeout_s=2), timeout_s=1.0),
    ):
        pytest.fail("must not become ready")


def test_an_off_target_sim_is_possible_and_visible() -> None:
    """A deliberate fault for audit tests: the config says AL 3.0, the sim is told 2.0 and realises 2.0."""
    launch = build_launch(sim_config("trtllm", 3, 3.0, "--synthetic-al", "2.0"))
    assert any("override" in w for w in launch.warnings)
    with running_server(ProcessRunner(), launch) as handle:
        stats = run_bench(handle.base_url, "trtllm", 3, prompts=8)["spec_decode"]["stats"]
    assert stats["al"] == pytest.approx(2.0, abs=0.1)
