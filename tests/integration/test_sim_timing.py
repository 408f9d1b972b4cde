"""Real-time mode (--time-scale 1): concurrency-1 interactivity matches the profile's prediction."""

from __future__ import annotations

import re
import time

import aiohttp
import orjson
import pytest
import typer
from typer.testing import CliRunner

from alflow.sim.cli import register
from alflow.sim.config import SimConfig
from alflow.sim.process import start_in_thread
from alflow.sim.profiles import get_profile, predicted_tpot_s
from alflow.sim.tokenizer import get_tokenizer

pytestmark = [pytest.mark.integration, pytest.mark.timing]

CONTENT = re.compile(rb'"delta":\{"content":"[^"]')


SCALE = 4.0
"""Simulated seconds run 4x slower than the profile's: a step of ~10 ms takes ~40 ms, so the host's
scheduling jitter (a few ms on two shared cores) is small beside it; TPOT is compared in the sim's
time (measured / SCALE), not against a wall-clock band."""


@pytest.mark.parametrize(("k", "al"), [(3, 4.0), (1, 2.0)])
async def test_interactivity_matches_profile_within_10_percent(k: int, al: float) -> None:
    profile = get_profile("h200-llama70b")
    prompt = "Explain speculative decoding. " * 20
    steps = 24
    out_tokens = 1 + steps * int(al)
    cfg = SimConfig(port=0, k=k, synthetic_al=al, time_scale=SCALE, profile=profile.name)
    with start_in_thread(cfg.validate()) as sim:
        body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": out_tokens, "ignore_eos": True,
                "stream": True, "stream_options": {"include_usage": True}}  # fmt: skip
        async with aiohttp.ClientSession() as session:
            start = time.perf_counter()
            first = end = 0.0
            buf = b""
            async with session.post(sim.base_url + "/v1/chat/completions", json=body) as resp:
                async for chunk in resp.content.iter_any():
                    buf += chunk
                    if not first and CONTENT.search(buf):
                        first = time.perf_counter()
                end = time.perf_counter()
    events = [orjson.loads(b[6:]) for b in buf.split(b"\n\n") if b.startswith(b"data: {")]
    n = events[-1]["usage"]["completion_tokens"]
    assert n == out_tokens
    sim_tpot = (end - first) / (n - 1) / SCALE
    predicted = predicted_tpot_s(profile, k, al, len(get_tokenizer().chat_ids([("user", prompt)])), n)
    assert sim_tpot == pytest.approx(predicted, rel=0.10)
    assert (first - start) / SCALE > profile.prefill_s(100)  # prefill took simulated time


def test_register_adds_sim_serve_to_a_root_app() -> None:
    app = typer.Typer()

    @app.callback()
    def root() -> None:
        """Root."""

    register(app)
    result = CliRunner().invoke(app, ["sim", "serve", "--help"])
    assert result.exit_code == 0
    for flag in ("--synthetic-al", "--speculative-config", "--time-scale", "--stall-after-tokens"):
        assert flag in result.output
    bad = CliRunner().invoke(app, ["sim", "serve", "--k", "3", "--synthetic-al", "7", "--time-scale", "0"])
    assert bad.exit_code == 2
