"""The simulator speaking ATOM over real HTTP: ATOM's flags in, ATOM's snapshot metrics out, alflow's pre-flight audit.

The simulator is started the way alflow's recipe starts it (``python -m alflow.sim serve --dialect atom`` with ATOM's
own ``--num-speculative-tokens`` and ``--spec-decode-acceptance-length``), and serves its counters as a snapshot
refreshed every second (``ALFLOW_SIM_ATOM_REFRESH_S``), as ATOM does every 5 + 5 s. The pre-flight burst (the same
call M2 makes) must see every step of the burst: the measurement waits the reader's snapshot lag before each scrape.
"""

from __future__ import annotations

import asyncio
import os

import pytest

from alflow.acceptance.synthetic import distribution
from alflow.frameworks.atom import metrics as atom_metrics
from alflow.metrics.prometheus import SnapshotWindow, scrape_all
from alflow.preflight import Expectation, run_preflight
from alflow.sim.process import SimProcess, SimStartError

pytestmark = pytest.mark.integration

MODEL = "sim/llama-3.3-70b"
ATOM_ARGS = ("--num-speculative-tokens", "3", "--spec-decode-acceptance-length", "2.4")


def test_the_preflight_audits_atoms_forced_length_through_its_snapshot_metrics() -> None:
    env = {**os.environ, "ALFLOW_SIM_ATOM_REFRESH_S": "1", atom_metrics.LAG_ENV: "1.6"}
    args = ["--dialect", "atom", "--k", "3", "--method", "mtp", "--time-scale", "0", *ATOM_ARGS]
    with SimProcess(args, env=env) as sim:
        expect = Expectation(k=3, distribution=distribution("vllm", 3, al=2.4))

        async def run() -> tuple[object, SnapshotWindow]:
            os.environ[atom_metrics.LAG_ENV] = "1.6"  # the reader in this process
            try:
                before = await scrape_all([sim.metrics_url])
                result = await run_preflight(
                    sim.base_url, MODEL, (sim.metrics_url,), "atom", expect, subject="sim as ATOM"
                )
                await asyncio.sleep(1.6)
                after = await scrape_all([sim.metrics_url])
            finally:
                del os.environ[atom_metrics.LAG_ENV]
            return result, SnapshotWindow(before, after)

        result, whole = asyncio.run(run())
    assert result.passed, result.message  # type: ignore[attr-defined]
    assert "(expected 2.4000 +/-" in result.message  # type: ignore[attr-defined]
    # the burst's window held every finished request and every step: the snapshot had caught up at both ends
    assert whole.increase(atom_metrics.REQUESTS_FINISHED) == result.requests  # type: ignore[attr-defined]
    assert whole.increase(atom_metrics.MTP_DECODE_STEPS) == result.steps  # type: ignore[attr-defined]


def test_atoms_flags_are_checked_by_the_simulator_as_atom_checks_them() -> None:
    args = [
        "--dialect",
        "atom",
        "--k",
        "2",
        "--num-speculative-tokens",
        "2",
        "--spec-decode-acceptance-length",
        "3.5",
    ]
    with pytest.raises(SimStartError) as err, SimProcess(args):
        pass
    assert "--spec-decode-acceptance-length must be in [1, 3] for --num-speculative-tokens=2" in str(
        err.value
    )


def test_the_sim_speaking_atom_refuses_a_token_id_prompt_as_atom_does() -> None:
    import urllib.request
    from urllib.error import HTTPError

    import orjson

    with SimProcess(["--dialect", "atom", "--k", "2", "--time-scale", "0"]) as sim:
        body = {"model": MODEL, "prompt": [11, 12, 13], "max_tokens": 4}
        request = urllib.request.Request(
            sim.base_url + "/v1/completions",
            data=orjson.dumps(body),
            headers={"Content-Type": "application/json"},
        )
        with pytest.raises(HTTPError) as err:
            urllib.request.urlopen(request, timeout=10)
        assert err.value.code == 400
        assert b"atom takes a string prompt" in err.value.read()
