"""``alflow infra cleanup``: registration, table and JSON output, a missing engine (no daemon needed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

import alflow_infra.cli
from alflow_infra.errors import RunnerError
from alflow_infra.lifecycle import SlurmJob
from alflow_infra.runners.docker import CleanupEntry
from alflow_infra.runners.slurm import SubprocessSlurm

pytestmark = pytest.mark.unit

ENTRIES = [
    CleanupEntry("c1", "alflow-vllm-a", "running", "run-1", "vllm", 7200.0, selected=True, removed=False),
    CleanupEntry("c2", "alflow-sim-b", "exited", "run-2", "sim", 10.0, selected=False, removed=False),
]


@pytest.fixture
def app(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> typer.Typer:
    monkeypatch.setenv("ALFLOW_STATE_DIR", str(tmp_path / "state"))  # an empty registry
    monkeypatch.setattr(alflow_infra.cli, "alflow_slurm_job_list", list)  # no Slurm jobs
    root = typer.Typer()

    @root.callback()
    def _root() -> None:
        """Root."""

    alflow_infra.cli.register(root)
    return root


def test_cleanup_dry_run_table_and_json(app: typer.Typer, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []

    def fake_cleanup(client: object, **kwargs: Any) -> list[CleanupEntry]:
        calls.append(kwargs)
        return ENTRIES

    monkeypatch.setattr(alflow_infra.cli, "docker_client", object)
    monkeypatch.setattr(alflow_infra.cli, "cleanup_containers", fake_cleanup)
    runner = CliRunner()
    result = runner.invoke(app, ["infra", "cleanup", "--older-than", "1h", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "would remove" in result.output
    assert "alflow-vllm-a" in result.output
    assert "kept" in result.output
    assert calls[-1] == {"older_than_s": 3600.0, "run_id": None, "dry_run": True}

    result = runner.invoke(app, ["infra", "cleanup", "--older-than", "30m", "--run-id", "run-1", "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert payload["older_than_s"] == 1800.0
    assert [c["name"] for c in payload["containers"]] == ["alflow-vllm-a", "alflow-sim-b"]
    assert calls[-1]["run_id"] == "run-1"


def test_cleanup_without_an_engine_skips_containers_and_says_so(
    app: typer.Typer, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_engine() -> object:
        raise RunnerError("no Docker engine reachable (test)")

    monkeypatch.setattr(alflow_infra.cli, "docker_client", no_engine)
    result = CliRunner().invoke(app, ["infra", "cleanup"])
    assert result.exit_code == 0, result.output
    assert "docker: skipped (no Docker engine reachable (test))" in result.output
    result = CliRunner().invoke(app, ["infra", "cleanup", "--json"])
    assert json.loads(result.output)["skipped"]["docker"] == "no Docker engine reachable (test)"


def test_slurm_jobs_of_runs_that_are_over_are_cancelled_and_live_ones_kept(
    app: typer.Typer, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = [SlurmJob("11", "run-over", 0.0), SlurmJob("12", "run-live", 0.0), SlurmJob("13", "young", None)]
    cancelled: list[str] = []
    monkeypatch.setattr(alflow_infra.cli, "alflow_slurm_job_list", lambda: jobs)
    monkeypatch.setattr(alflow_infra.cli.shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr(SubprocessSlurm, "cancel", lambda self, job_id: cancelled.append(job_id))
    monkeypatch.setattr(alflow_infra.cli, "docker_client", object)
    monkeypatch.setattr(alflow_infra.cli, "cleanup_containers", lambda client, **kw: [])
    monkeypatch.setitem(alflow_infra.cli._IS_LIVE, "fn", lambda run_id: run_id == "run-live")
    dry = json.loads(
        CliRunner().invoke(app, ["infra", "cleanup", "--older-than", "0", "--dry-run", "--json"]).output
    )
    assert [(j["name"], j["selected"], j["removed"]) for j in dry["slurm_jobs"]] == [
        ("11", True, False),
        ("12", False, False),
        ("13", True, False),
    ]
    assert cancelled == []
    done = json.loads(CliRunner().invoke(app, ["infra", "cleanup", "--older-than", "0", "--json"]).output)
    assert [j["name"] for j in done["slurm_jobs"] if j["removed"]] == ["11", "13"]
    assert cancelled == ["11", "13"]
    monkeypatch.delitem(alflow_infra.cli._IS_LIVE, "fn")
    unknown = json.loads(CliRunner().invoke(app, ["infra", "cleanup", "--older-than", "0", "--json"]).output)
    assert not any(j["selected"] for j in unknown["slurm_jobs"])  # no way to tell: nothing cancelled


def test_bad_duration_is_a_usage_error(app: typer.Typer) -> None:
    result = CliRunner().invoke(app, ["infra", "cleanup", "--older-than", "soon"])
    assert result.exit_code == 2
    assert "not a duration" in result.output


def test_sim_image_command(app: typer.Typer, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[bool] = []

    def fake_ensure(client: object, rebuild: bool = False) -> str:
        seen.append(rebuild)
        return "sha256:" + "ab" * 32

    monkeypatch.setattr(alflow_infra.cli, "docker_client", object)
    monkeypatch.setattr(alflow_infra.cli, "ensure_sim_image", fake_ensure)
    result = CliRunner().invoke(app, ["infra", "sim-image", "--rebuild", "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert payload["image"] == "alflow-sim-base:local"
    assert payload["id"].startswith("sha256:abab")
    assert any(m.startswith("/usr:/usr:ro") for m in payload["mounts"])
    assert seen == [True]
