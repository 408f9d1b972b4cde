"""GSM8K evaluation against the sim engine's answer mode, over real HTTP."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from alflow.evals.gsm8k import PromptConfig
from alflow.evals.run import Gsm8kRequest, SyntheticAcceptanceOnError, bundled_gsm8k, evaluate_gsm8k
from alflow.gates import accuracy_gate
from alflow.sim.process import SimProcess

pytestmark = pytest.mark.integration

ALFLOW = str(Path(sys.executable).parent / "alflow")
MODEL = "sim/llama-3.3-70b"


def _sim(accuracy: float, *extra: str) -> SimProcess:
    return SimProcess(
        [
            "--time-scale",
            "0",
            "--answer-key",
            str(bundled_gsm8k("test")),
            "--answer-accuracy",
            str(accuracy),
            *extra,
        ]
    )


async def test_accuracy_matches_the_configured_rate_and_passes() -> None:
    with _sim(0.9, "--seed", "3") as sim:
        result = await evaluate_gsm8k(Gsm8kRequest(sim.base_url, MODEL, concurrency=128))
    n = len(result.results)
    assert n == 1319
    assert not result.subset
    assert result.failed_requests == 0
    half = 2.576 * math.sqrt(0.9 * 0.1 / n)  # 99% binomial interval around the true rate
    for score in (result.strict, result.flexible):
        assert abs(score.accuracy - 0.9) <= half, score
    assert accuracy_gate(result, 0.85).passed


def test_low_accuracy_server_fails_the_gate_via_cli() -> None:
    with _sim(0.5, "--seed", "4") as sim:
        out = subprocess.run(
            [
                ALFLOW,
                "eval",
                "gsm8k",
                "--base-url",
                sim.base_url,
                "--model",
                MODEL,
                "--limit",
                "300",
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert out.returncode == 1, out.stderr
    data = json.loads(out.stdout)
    assert data["subset"] is True
    assert data["questions"] == 300
    assert data["verdict"]["passed"] is False
    assert "strict-match 0." in data["verdict"]["message"]
    assert "< threshold 0.9000" in data["verdict"]["message"]
    assert "seeded subset of 300 of 1319" in data["verdict"]["message"]
    assert 0.4 < data["scores"]["strict-match"]["accuracy"] < 0.6


async def test_refuses_a_synthetic_launch() -> None:
    with pytest.raises(SyntheticAcceptanceOnError, match="launch has synthetic acceptance on"):
        await evaluate_gsm8k(Gsm8kRequest("http://127.0.0.1:9", MODEL, synthetic=True, prompt=PromptConfig()))


def test_unreachable_server_is_one_clear_error() -> None:
    out = subprocess.run(
        [ALFLOW, "eval", "gsm8k", "--base-url", "http://127.0.0.1:9", "--model", MODEL, "--limit", "3"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 2
    assert out.stderr.startswith("error: ")
    assert "127.0.0.1:9" in out.stderr
    assert "Traceback" not in out.stderr


async def test_refuses_a_server_that_reports_synthetic_acceptance() -> None:
    with SimProcess(["--time-scale", "0", "--synthetic-al", "2.5"]) as sim:
        request = Gsm8kRequest(sim.base_url, MODEL, limit=5)
        with pytest.raises(
            SyntheticAcceptanceOnError, match=r"server reports synthetic acceptance on \(/version"
        ):
            await evaluate_gsm8k(request)
