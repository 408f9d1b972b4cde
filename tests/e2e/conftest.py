"""e2e fixtures: the single-host Slurm cluster (``scripts/slurm-up.sh``, started by ``scripts/ci-services.sh``).

``slurm_cluster`` (session): skips the Slurm tests with the reason when no cluster answers, or fails
them when ``CI`` is set (``.ci/run`` must have started it). At the end of the session it asserts that
no alflow job (comment ``alflow-run:<run id>``) is left in ``squeue``, apart from those that were
already there when the session began (a developer's own cluster may run real jobs); leftovers are
cancelled before the assertion fails.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator

import pytest

from infra.lifecycle import alflow_slurm_jobs


def slurm_problem() -> str | None:
    """Why there is no usable Slurm cluster here (None when there is one)."""
    if shutil.which("sbatch") is None or shutil.which("sinfo") is None:
        return "sbatch/sinfo are not on PATH: no Slurm cluster (bash scripts/slurm-up.sh starts one)"
    try:
        result = subprocess.run(
            ["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=20, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"the Slurm cluster does not answer: {exc}"
    states = result.stdout.split()
    if result.returncode != 0 or not any(s.rstrip("*~#") in ("idle", "mixed") for s in states):
        detail = (result.stderr or result.stdout).strip()
        return f"the Slurm cluster does not answer or has no idle node: {detail}"
    return None


def slurm_nodes() -> int:
    """Nodes the cluster has (``sinfo -N``)."""
    out = subprocess.run(
        ["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True, timeout=20, check=False
    ).stdout
    return len(set(out.split()))


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[None]:
    """A Slurm cluster that answers (skip, or fail under CI, without one); no alflow job left at the end."""
    problem = slurm_problem()
    if problem is not None:
        if os.environ.get("CI"):
            pytest.fail(f"{problem} (CI is set: .ci/run must start it through scripts/ci-services.sh)")
        pytest.skip(problem)
    before = {job for job, _ in alflow_slurm_jobs()}
    yield
    left = [(job, run) for job, run in alflow_slurm_jobs() if job not in before]
    for job, _ in left:
        subprocess.run(["scancel", job], capture_output=True, timeout=20, check=False)
    assert not left, f"alflow Slurm jobs left in squeue after the session (now cancelled): {left}"
