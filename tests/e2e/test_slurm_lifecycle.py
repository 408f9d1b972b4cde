"""Slurm leftovers and environment against the real cluster (tests/e2e/conftest.py starts nothing).

- the reclaimer (``alflow_infra.lifecycle.reclaim_host``) cancels the jobs of alflow runs that are over
  (found by their ``--comment=alflow-run:<run id>``) and spares those of runs still going;
- the runner does not hand stale ``SLURM_*`` variables of its own environment (e.g. from an
  allocation it runs in) to the job: ``SLURM_EXPORT_ENV=NONE`` would start the server with no
  environment at all.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from alflow.config import SlurmOptions, SpeculativeConfig, SyntheticAcceptance, server_config
from alflow.frameworks.recipes import build_launch
from alflow_infra.lifecycle import alflow_slurm_jobs, reclaim_host
from alflow_infra.runners import SlurmRunner, running_server
from alflow_infra.runners.base import health_ok

pytestmark = [pytest.mark.services, pytest.mark.usefixtures("slurm_cluster")]


def submit(comment: str, tmp_path: Path) -> str:
    result = subprocess.run(
        [
            "sbatch",
            "--parsable",
            f"--comment={comment}",
            "--time=00:05:00",
            f"--output={tmp_path}/%j.out",
            "--wrap",
            "exec sleep 300",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return result.stdout.strip().split(";")[0]


def queued(job_id: str) -> bool:
    out = subprocess.run(
        ["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True, timeout=20, check=False
    ).stdout.strip()
    return out not in ("", "COMPLETING", "CANCELLED")


def test_reclaimer_cancels_jobs_of_finished_runs_and_spares_live_ones(tmp_path: Path) -> None:
    dead_run, live_run = f"dead-{uuid.uuid4().hex[:8]}", f"live-{uuid.uuid4().hex[:8]}"
    dead = submit(f"alflow-run:{dead_run}", tmp_path)
    live = submit(f"alflow-run:{live_run}", tmp_path)
    foreign = submit("someone-elses-job", tmp_path)
    try:
        mine = dict(alflow_slurm_jobs())
        assert mine[dead] == dead_run
        assert mine[live] == live_run
        assert foreign not in mine  # not alflow's: never touched
        options = SlurmOptions(command_timeout_s=20.0)
        removed = reclaim_host(options, is_live=lambda run_id: run_id == live_run)
        assert f"Slurm job {dead} (alflow-run:{dead_run})" in removed
        # by the job id as a word: the live id (one digit here) can appear inside the dead run's hex name
        assert not any(r.startswith(f"Slurm job {live} ") for r in removed)
        deadline = time.monotonic() + 10
        while queued(dead) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not queued(dead)
        assert queued(live)
        assert queued(foreign)
        # without a liveness check every alflow job counts as a leftover (the caller holds the slot)
        assert f"Slurm job {live} (alflow-run:{live_run})" in reclaim_host(options)
        assert queued(foreign)
    finally:
        subprocess.run(["scancel", dead, live, foreign], capture_output=True, timeout=20, check=False)


def test_runner_drops_stale_slurm_variables_of_its_own_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # as if alflow itself ran inside a job started with --export=NONE: srun would pass no environment
    monkeypatch.setenv("SLURM_EXPORT_ENV", "NONE")
    monkeypatch.setenv("SLURM_JOB_ID", "999999")
    # SGLang's knobs travel as environment variables: they must reach the server through srun
    config = server_config(
        framework="sim",
        model="slurm-env",
        sim_dialect="sglang",
        speculative=SpeculativeConfig(method="mtp", k=3),
        synthetic=SyntheticAcceptance(target_al=2.5),
        readiness_timeout_s=60.0,
    )
    launch = build_launch(config)
    assert "SGLANG_SIMULATE_ACC_LEN" in launch.env
    options = SlurmOptions(
        time_limit="00:05:00", log_dir=str(tmp_path / "jobs"), poll_interval_s=0.2, queue_timeout_s=60.0
    )
    runner = SlurmRunner(options, run_id=f"e2e-env-{uuid.uuid4().hex[:8]}")
    with running_server(runner, launch, timeout_s=60.0) as handle:
        assert health_ok(handle.health_url)
        assert handle.id != "999999"
        with urllib.request.urlopen(handle.base_url + "/version", timeout=10) as resp:
            version = json.load(resp)
        assert version["synthetic_acceptance"] is not None, "the job's server did not get the Launch's env"
        assert version["synthetic_acceptance"]["al"] == 2.5
