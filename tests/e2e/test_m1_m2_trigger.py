"""M1 -> M2 by events on a real `prefect server` (PostgreSQL): prefect.yaml's m2-after-m1 trigger.

The deployments m1-gate and m2-after-m1 are deployed from prefect.yaml as a team deploys them (the
trigger becomes an automation of m2-after-m1), and one process worker polls the ``local`` pool. Two
M1 runs of m1-gate on the sim are submitted together: one that fails its AL gate (the sim accepts
half as much: ``--acceptance-quality 0.5``) and one that passes. The passing run's
``alflow.gate.passed`` event makes the server start exactly one m2-after-m1 run, for the same model,
framework, K, server and placement, which completes at the reference AL the M1 run gated against;
the failed run's ``alflow.gate.failed`` event starts nothing, checked for ``NO_M2_WAIT_S`` after it
ended (the wait overlaps the M2 run).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from alflow.methods.sweep_rules import short_form_cleared
from alflow.results.store import open_run
from tests.e2e.prefect_support import PREFECT, ROOT, api, cli, ensure_pool

pytestmark = pytest.mark.services

NO_M2_WAIT_S = 30.0
"""How long after the failed M1 ended no M2 may appear (the passing M1's M2 starts within seconds)."""
RUNS_WITHIN_S = 420.0
"""Both M1 runs and the triggered M2 run end within this (about 1-2 min on 2 shared cores)."""
SIM = ["--time-scale", "0"]
DEGRADED = [*SIM, "--acceptance-quality", "0.5"]
TERMINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}


def _gate_params(results: Path, extra_args: list[str]) -> dict[str, Any]:
    """The sim M1 of prefect.yaml's m1-gate (presets/sim.yaml), results under ``results``, GSM8K off."""
    return {
        "model": {
            "id": "demo-llama-70b",
            "reasoning": True,
            "sampling_thinking_on": {"temperature": 0.0, "max_tokens": 512},
            "sampling_thinking_off": {"temperature": 0.0, "max_tokens": 512},
        },
        "method": "mtp",
        "k": 3,
        "thinking": "on",
        "server": {"framework": "sim", "model": "demo-llama-70b", "extra_args": extra_args},
        "placement": {"runner": {"kind": "process"}, "results_root": str(results)},
        "reference_path": "references/examples.yaml",
        "reference_model": "Qwen3.5",
        "workload": {"kind": "speed-bench", "category": "coding", "max_tokens": 512},
        "load": {"concurrency": 8},
        "gsm8k": {"enabled": False},
    }


def _run_parameters(deployment: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """A deployment run's parameters: the full configuration as ``params``, every other parameter None.

    The deployment's defaults (a preset, a model, K) would otherwise be merged over ``params``.
    """
    names = deployment["parameter_openapi_schema"].get("properties") or {}
    return {**short_form_cleared(names), "params": params}


def _flow_runs(env: dict[str, str], deployment_id: str) -> list[dict[str, Any]]:
    body = {"flow_runs": {"deployment_id": {"any_": [deployment_id]}}, "limit": 50}
    runs: list[dict[str, Any]] = asyncio.run(api(env, "POST", "/flow_runs/filter", body))
    return runs


def _run(env: dict[str, str], run_id: str) -> dict[str, Any]:
    run: dict[str, Any] = asyncio.run(api(env, "GET", f"/flow_runs/{run_id}"))
    return run


def _events(env: dict[str, str], name: str, run_id: str) -> list[dict[str, Any]]:
    """The events ``name`` of alflow's resource of the flow run ``run_id``."""
    body = {"filter": {"event": {"name": [name]}, "resource": {"id": [f"alflow.flow-run.{run_id}"]}}}
    page = asyncio.run(api(env, "POST", "/events/filter", body))
    events: list[dict[str, Any]] = page["events"]
    return events


def _t(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _stop(worker: subprocess.Popen[bytes]) -> None:
    """Ctrl-C the worker's process group, SIGKILL what is left after 30 s; nothing of it stays behind."""
    try:
        os.killpg(worker.pid, signal.SIGINT)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(timeout=10)
        time.sleep(1)
        os.killpg(worker.pid, signal.SIGKILL)  # a flow run or server process still in the group
    except ProcessLookupError:
        pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_passed_m1_starts_its_m2_and_a_failed_one_starts_none(
    prefect_server: dict[str, str], tmp_path: Path
) -> None:
    env = {**prefect_server, "PREFECT_WORKER_QUERY_SECONDS": "1"}
    ensure_pool(env, "local", "process")
    cli(env, "deploy", "--name", "m1-gate", "--name", "m2-after-m1", timeout=300)
    gate_dep = asyncio.run(api(env, "GET", "/deployments/name/m1-gate/m1-gate"))
    m2_dep = asyncio.run(api(env, "GET", "/deployments/name/m2-benchmark/m2-after-m1"))
    automations = asyncio.run(api(env, "GET", f"/automations/related-to/prefect.deployment.{m2_dep['id']}"))
    assert [a["trigger"]["expect"] for a in automations] == [["alflow.gate.passed"]], automations
    before = {r["id"] for r in _flow_runs(env, m2_dep["id"])}

    results = tmp_path / "results"
    runs = {
        tag: asyncio.run(
            api(
                env,
                "POST",
                f"/deployments/{gate_dep['id']}/create_flow_run",
                {"parameters": _run_parameters(gate_dep, _gate_params(results, extra)), "state": {"type": "SCHEDULED"}},
            )
        )["id"]
        for tag, extra in (("failing", DEGRADED), ("passing", SIM))
    }  # fmt: skip

    log_path = tmp_path / "worker.log"
    with log_path.open("wb") as log:
        worker = subprocess.Popen(
            [PREFECT, "worker", "start", "--pool", "local", "--limit", "3"],
            env=env,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    started = time.monotonic()
    try:
        m1: dict[str, dict[str, Any]] = {}
        m2: list[dict[str, Any]] = []
        while time.monotonic() - started < RUNS_WITHIN_S:
            assert worker.poll() is None, log_path.read_text()[-3000:]
            m1 = {tag: _run(env, rid) for tag, rid in runs.items()}
            m2 = [r for r in _flow_runs(env, m2_dep["id"]) if r["id"] not in before]
            if all(r["state_type"] in TERMINAL for r in m1.values()) and (
                m1["passing"]["state_type"] != "COMPLETED"
                or (m2 and all(r["state_type"] in TERMINAL for r in m2))
            ):
                break
            time.sleep(2)
        states = {tag: (r["state_type"], r["state"]["message"]) for tag, r in m1.items()}
        assert m1["failing"]["state_type"] == "FAILED", (states, log_path.read_text()[-3000:])
        assert "AL gate FAILED" in str(m1["failing"]["state"]["message"]), states
        assert m1["passing"]["state_type"] == "COMPLETED", (states, log_path.read_text()[-3000:])
        assert len(m2) == 1, (m2, states, log_path.read_text()[-3000:])
        [after] = m2
        assert after["state_type"] == "COMPLETED", (after["state"], log_path.read_text()[-3000:])

        # the pass event of the passing run, the failed event of the failing run, and no other
        [passed] = _events(env, "alflow.gate.passed", runs["passing"])
        [failed] = _events(env, "alflow.gate.failed", runs["failing"])
        assert _events(env, "alflow.gate.passed", runs["failing"]) == []
        assert _events(env, "alflow.gate.failed", runs["passing"]) == []
        labels = passed["resource"]
        assert (labels["alflow.model"], labels["alflow.framework"], labels["alflow.k"]) == (
            "demo-llama-70b",
            "sim",
            "3",
        )
        assert labels["alflow.parent-flow-run"] == "none"

        # M2 is the passing M1's (model, framework, K) on its server and placement, at its reference AL
        params = after["parameters"]["params"]
        assert isinstance(params["k"], int), params["k"]  # the K label "3", parsed as JSON by the trigger
        assert params["k"] == 3
        assert params["model"]["id"] == "demo-llama-70b"
        assert params["server"]["framework"] == "sim"
        assert params["server"]["extra_args"] == SIM  # not the degraded server of the failed gate
        assert params["placement"]["results_root"] == str(results)
        assert (params["reference_path"], params["reference_model"], params["thinking"]) == (
            "references/examples.yaml",
            "Qwen3.5",
            "on",
        )
        assert params.get("target_al") is None  # the target is the reference AL
        assert _t(after["created"]) >= _t(passed["occurred"])
        [m2_dir] = sorted((results / "m2").iterdir())
        summary = open_run(m2_dir).json("summary")
        assert summary["target_al"] == passed["payload"]["reference_al"]
        assert [p["concurrency"] for p in summary["points"]] == [4, 16]

        # nothing more comes of the failed gate: no new M2 run NO_M2_WAIT_S after it ended
        wait = _t(m1["failing"]["end_time"]) + NO_M2_WAIT_S - time.time()
        if wait > 0:
            time.sleep(wait)
        later = [r["id"] for r in _flow_runs(env, m2_dep["id"]) if r["id"] not in before]
        assert later == [after["id"]], (later, json.dumps(failed)[:2000])
    finally:
        _stop(worker)
    assert not _group_alive(worker.pid), "the worker's process group outlived it"
    print(
        f"M1 runs {_t(m1['passing']['end_time']) - _t(m1['passing']['start_time']):.0f} s, M2 created "
        f"{_t(after['created']) - _t(passed['occurred']):.1f} s after the pass event and ran "
        f"{_t(after['end_time']) - _t(after['start_time']):.0f} s; {time.monotonic() - started:.0f} s in all"
    )
