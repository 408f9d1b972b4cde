"""e2e fixtures: the single-host Slurm cluster (``scripts/slurm-up.sh``, started by ``scripts/ci-services.sh``)
and a real ``prefect server`` on PostgreSQL (also started by ``scripts/ci-services.sh``).

``slurm_cluster`` (session): skips the Slurm tests with the reason when no cluster answers, or fails
them when ``CI`` is set (``.ci/run`` must have started it). At the end of the session it asserts that
no alflow job (comment ``alflow-run:<run id>``) is left in ``squeue``, apart from those that were
already there when the session began (a developer's own cluster may run real jobs); leftovers are
cancelled before the assertion fails.

``prefect_database`` (session): the SQLAlchemy URL of a fresh, empty PostgreSQL database made for this
test session in the server of ``$ALFLOW_E2E_POSTGRES_URL`` (``tests/e2e/prefect_support.py``), dropped
at the end. Without a PostgreSQL that answers: skip with the reason, or fail under ``CI``.

``prefect_server`` (session): ``prefect server start`` on that database; yields the environment that
points at it (``PREFECT_HOME``, ``PREFECT_API_URL``, ``PREFECT_API_DATABASE_CONNECTION_URL``,
``ALFLOW_HOME`` = the project root, ...). One server for every e2e test of the session: create pools
and limits with ``prefect_support.ensure_pool`` / ``ensure_limit``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator

import pytest

from alflow_infra.lifecycle import alflow_slurm_jobs
from tests.e2e import prefect_support


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


@pytest.fixture(scope="session")
def prefect_database() -> Iterator[str]:
    """A fresh PostgreSQL database for this session's ``prefect server`` (its URL); dropped at the end."""
    problem = prefect_support.postgres_problem()
    if problem is not None:
        if os.environ.get("CI"):
            pytest.fail(f"{problem} (CI is set: .ci/run must start it through scripts/ci-services.sh)")
        pytest.skip(f"{problem} (bash scripts/ci-services.sh starts it)")
    url = prefect_support.create_database()
    try:
        yield url
    finally:
        prefect_support.drop_database(url)


@pytest.fixture(scope="session")
def prefect_server(
    tmp_path_factory: pytest.TempPathFactory, prefect_database: str
) -> Iterator[dict[str, str]]:
    """A ``prefect server`` on ``prefect_database`` for the whole session; the environment pointing at it."""
    home = tmp_path_factory.mktemp("prefect-home")
    try:
        server = prefect_support.start_prefect_server(home, prefect_database)
    except AssertionError as exc:
        pytest.fail(str(exc))
    try:
        yield server.env
    finally:
        prefect_support.stop_prefect_server(server)
