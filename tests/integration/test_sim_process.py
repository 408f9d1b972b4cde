"""The sim as a subprocess (``SimProcess``): the contract others depend on, config sources, faults."""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from alflow.frameworks.sglang import names as sglang_names
from alflow.frameworks.trtllm import names as trtllm_names
from alflow.frameworks.vllm import names as vllm_names
from alflow.sim.process import SimProcess, SimStartError

pytestmark = pytest.mark.integration


def post(url: str, body: dict) -> dict:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.load(resp)


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as resp:
        return resp.read().decode()


def samples(url: str) -> dict[str, float]:
    return {
        s.name: s.value
        for f in text_string_to_metric_families(get(url))
        for s in f.samples
        if not s.labels.get("position")
    }


def test_contract_vllm_step_log_and_stop(tmp_path: Path) -> None:
    path = tmp_path / "steps.jsonl"
    args = [
        "--dialect",
        "vllm",
        "--k",
        "3",
        "--synthetic-al",
        "2.5",
        "--time-scale",
        "0",
        "--step-log",
        str(path),
    ]
    with SimProcess(args) as sim:
        assert sim.base_url == f"http://127.0.0.1:{sim.port}"
        assert sim.metrics_url == sim.base_url + vllm_names.VLLM_METRICS_PATH
        pid = sim.pid
        out = post(sim.base_url + "/v1/completions", {"prompt": "hi", "max_tokens": 40, "ignore_eos": True})
        assert out["usage"]["completion_tokens"] == 40
        assert out["model"] == "sim/llama-3.3-70b"
        values = samples(sim.metrics_url)
        assert values[vllm_names.VLLM_NUM_DRAFTS + "_total"] > 0
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert rows
    assert set(rows[0]) == {"step", "time_ns", "k", "requests", "accepted"}
    assert rows[0]["k"] == 3
    assert all(s["requests"] == [out["id"]] for s in rows)
    assert 1 + sum(a + 1 for r in rows for a in r["accepted"]) >= 40
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_sglang_env_source(tmp_path: Path) -> None:
    env = dict(os.environ, SGLANG_SIMULATE_ACC_LEN="4", SGLANG_SIMULATE_ACC_METHOD="match-expected")
    with SimProcess(["--dialect", "sglang", "--k", "3", "--time-scale", "0"], env=env) as sim:
        post(sim.base_url + "/v1/completions", {"prompt": "hi", "max_tokens": 41, "ignore_eos": True})
        values = samples(sim.metrics_url)
        info = json.loads(get(sim.base_url + "/server_info"))
    gen = values[sglang_names.SGLANG_GENERATION_TOKENS + "_total"]
    calls = values[sglang_names.SGLANG_SPEC_VERIFY_CALLS + "_total"]
    requests = values[sglang_names.SGLANG_NUM_REQUESTS + "_total"]
    assert (gen, calls, requests) == (41, 10, 1)  # at finish: the prefill token plus 10 verify steps of 4
    assert (gen - requests) / calls == 4.0
    assert info["internal_states"][0][sglang_names.SGLANG_AVG_ACCEPT_LENGTH_KEY] == 4.0


def test_trtllm_env_counts_drafts_and_cli_wins() -> None:
    env = dict(os.environ, TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS="1")
    with SimProcess(["--dialect", "trtllm", "--k", "3", "--time-scale", "0"], env=env) as sim:
        assert sim.metrics_url.endswith(trtllm_names.TRTLLM_METRICS_PATH)
        post(sim.base_url + "/v1/completions", {"prompt": "hi", "max_tokens": 21, "ignore_eos": True})
        values = samples(sim.metrics_url)
        assert values[trtllm_names.TRTLLM_ACCEPTANCE_LENGTH] == 2.0  # AL = value + 1
    with SimProcess(
        ["--dialect", "trtllm", "--k", "3", "--time-scale", "0", "--synthetic-al", "4"], env=env
    ) as sim:
        post(sim.base_url + "/v1/completions", {"prompt": "hi", "max_tokens": 21, "ignore_eos": True})
        assert samples(sim.metrics_url)[trtllm_names.TRTLLM_ACCEPTANCE_LENGTH] == 4.0
        assert "overrides" in sim.logs()


def test_vllm_speculative_config_json() -> None:
    spec = json.dumps(
        {
            "method": "eagle3",
            "num_speculative_tokens": 5,
            "rejection_sample_method": "synthetic",
            "synthetic_acceptance_length": 6,
        }
    )
    with SimProcess(["--dialect", "vllm", "--speculative-config", spec, "--time-scale", "0"]) as sim:
        post(sim.base_url + "/v1/completions", {"prompt": "hi", "max_tokens": 61, "ignore_eos": True})
        values = samples(sim.metrics_url)
    drafts = values[vllm_names.VLLM_NUM_DRAFTS + "_total"]
    assert values[vllm_names.VLLM_NUM_DRAFT_TOKENS + "_total"] == 5 * drafts
    assert 1 + values[vllm_names.VLLM_NUM_ACCEPTED_TOKENS + "_total"] / drafts == 6.0


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--dialect", "sglang", "--speculative-config", "{}"], {}, "--speculative-config is vllm's switch"),
        (["--speculative-config", '{"rejection_sample_method": "synthetic"}'], {}, "exactly one"),
        (["--k", "3", "--synthetic-al", "9"], {}, "outside the allowed range"),
        (["--dialect", "sglang"], {"SGLANG_SIMULATE_ACC_METHOD": "bogus"}, "SGLANG_SIMULATE_ACC_METHOD"),
        (["--fail-startup"], {}, "--fail-startup"),
    ],
)
def test_bad_config_and_fail_startup_exit_with_clear_error(args: list[str], env: dict, message: str) -> None:
    sim = SimProcess([*args, "--time-scale", "0"], env=dict(os.environ, **env), timeout_s=30)
    with pytest.raises(SimStartError, match="exited with code") as info:
        sim.start()
    assert message in str(info.value)


def test_startup_delay_and_crash_after_requests() -> None:
    t0 = time.monotonic()
    with SimProcess(["--time-scale", "0", "--startup-delay", "1.0", "--crash-after-requests", "2"]) as sim:
        assert time.monotonic() - t0 >= 1.0
        for _ in range(2):
            post(sim.base_url + "/v1/completions", {"prompt": "x", "max_tokens": 2})
        deadline = time.monotonic() + 10
        while sim.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sim.poll() == 70
        with pytest.raises(urllib.error.URLError):
            get(sim.base_url + "/health")
