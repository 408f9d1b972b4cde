"""The Slurm runner against a real Slurm cluster: the sim as a batch job, a job failing at start, scancel.

Needs a Slurm cluster that answers (``scripts/slurm-up.sh``, started by ``scripts/ci-services.sh``):
without one these tests are skipped with the reason, or fail when ``CI`` is set (tests/e2e/conftest.py).
A module fixture asserts that no job of this module is left in ``squeue``; the session fixture does
the same for every alflow job.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from alflow.config import SlurmOptions, server_config
from alflow.frameworks.launch import Launch, free_port
from alflow.frameworks.recipes import build_launch
from alflow_infra.errors import ServerStartError
from alflow_infra.lifecycle import alflow_slurm_jobs
from alflow_infra.runners import SlurmRunner, running_server
from alflow_infra.runners.base import health_ok

pytestmark = pytest.mark.services

RUN_ID = f"e2e-{uuid.uuid4().hex[:8]}"


def _our_jobs() -> list[str]:
    return [job for job, run in alflow_slurm_jobs() if run == RUN_ID]


@pytest.fixture(scope="module", autouse=True)
def no_job_of_this_module_left(slurm_cluster: None) -> Iterator[None]:
    """Needs the cluster (tests/e2e/conftest.py); afterwards, no job of this module may be left in squeue."""
    del slurm_cluster
    yield
    left = _our_jobs()
    for job_id in left:
        subprocess.run(["scancel", job_id], capture_output=True, timeout=20, check=False)
    assert not left, f"Slurm jobs left behind: {left}"


def runner(tmp_path: Path) -> SlurmRunner:
    options = SlurmOptions(
        time_limit="00:10:00",
        log_dir=str(tmp_path / "jobs"),
        poll_interval_s=0.2,
        queue_timeout_s=60.0,
        stop_timeout_s=20.0,
    )
    return SlurmRunner(options, run_id=RUN_ID)


def test_sim_server_as_a_slurm_job_serves_and_is_cancelled(tmp_path: Path) -> None:
    launch = build_launch(server_config(framework="sim", model="slurm-e2e", readiness_timeout_s=60.0))
    slurm = runner(tmp_path)
    with running_server(slurm, launch, timeout_s=60.0) as handle:
        assert handle.runner == "slurm"
        assert health_ok(handle.health_url)
        assert health_ok(handle.metrics_url)
        provenance = handle.provenance.slurm
        assert isinstance(provenance, dict)
        assert provenance["job_id"] == handle.id
        assert f"alflow-run:{RUN_ID}" in str(provenance["script"])
        assert handle.id in _our_jobs()
    assert handle.id not in _our_jobs()
    assert not health_ok(handle.health_url, timeout_s=1.0)


def test_a_job_that_fails_at_start_fails_within_seconds_with_its_log(tmp_path: Path) -> None:
    code = "import sys; print('fatal: model weights not found', flush=True); sys.exit(3)"
    launch = Launch(
        framework="sim",
        dialect="vllm",
        model="broken",
        argv=(sys.executable, "-c", code),
        port=free_port(),
        readiness_timeout_s=60.0,
    )
    slurm = runner(tmp_path)
    started = time.monotonic()
    with pytest.raises(ServerStartError) as err, running_server(slurm, launch, timeout_s=60.0):
        pass
    assert time.monotonic() - started < 30.0
    assert "Slurm job" in str(err.value)
    assert "fatal: model weights not found" in err.value.log_tail
