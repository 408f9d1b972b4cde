"""The Slurm runner against bash and stand-in sbatch/scontrol/scancel programs on PATH; these tests start processes."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import time
from pathlib import Path

import pytest

from alflow.config import SlurmOptions
from alflow.frameworks.launch import Launch, MetricsEndpoint
from alflow_infra import lifecycle
from alflow_infra.errors import RunnerError
from alflow_infra.runners.slurm import JobInfo, SubprocessSlurm, render_script
from tests.unit.test_runners_slurm import (
    LOG,
    health_port,  # noqa: F401  (fixture reuse)
    sglang_launch,
)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("run_dirs_in_tmp_path")]


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_values_are_shell_quoted_and_the_script_parses(tmp_path: Path) -> None:
    hostile = "it's $(touch pwned) `x` ; rm -rf /"
    launch = sglang_launch("--served-model-name", hostile, env={"NOTE": hostile, "EMPTY": ""})
    options = SlurmOptions(modules=("gcc/12 && touch pwned",), container_image="img with space")
    script = render_script(launch, options, log_path=LOG)
    assert "export NOTE='it'\"'\"'s $(touch pwned) `x` ; rm -rf /'" in script
    assert "export EMPTY=''" in script
    assert "module load 'gcc/12 && touch pwned'" in script
    assert "--container-image='img with space'" in script
    path = tmp_path / "job.sbatch"
    path.write_text(script)
    subprocess.run(["bash", "-n", str(path)], check=True)
    # The export lines, run by a real shell, give back the exact values.
    exports = "\n".join(line for line in script.splitlines() if line.startswith("export NOTE="))
    out = subprocess.run(
        ["bash", "-c", exports + '\nprintf %s "$NOTE"'],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert out.stdout == hostile
    assert not (tmp_path / "pwned").exists()


# --- the real client commands, against stand-in programs ----------------------------------------------

FAKE_PROGRAMS = {
    "sbatch": """\
#!/bin/bash
echo "$@" > "$FAKE_DIR/sbatch.args"
env > "$FAKE_DIR/sbatch.env"
echo "977;cluster1"
""",
    "scontrol": """\
#!/bin/bash
echo "$@" >> "$FAKE_DIR/scontrol.args"
case "$1 $2" in
  "show job")
    if [ "$4" = 977 ]; then
      state=RUNNING; [ -f "$FAKE_DIR/cancelled" ] && state=CANCELLED
      echo "JobId=977 JobName=alflow-sim UserId=u(1000) JobState=$state Reason=None Dependency=(null) \
ExitCode=0:0 NodeList=n[1-2] BatchHost=n1 NumNodes=2 Command=/x/job.sbatch"
    elif [ "$4" = 978 ]; then
      echo "JobId=978 JobState=PENDING Reason=Priority NodeList=(null) ExitCode=0:0"
    else
      echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1
    fi ;;
  "show hostnames") printf 'n1\\nn2\\n' ;;
  "show node")
    if [ "$4" = n1 ]; then echo "NodeName=n1 Arch=x86_64 NodeAddr=127.0.0.1 NodeHostName=host State=ALLOCATED"
    else echo "Node $4 not found" >&2; exit 1; fi ;;
esac
""",
    "scancel": """\
#!/bin/bash
echo "$@" >> "$FAKE_DIR/scancel.args"
if [ "$1" = 977 ]; then touch "$FAKE_DIR/cancelled"; exit 0; fi
if [ "$1" = 976 ]; then echo "scancel: error: Kill job error on job id 976: Job/step already completing or completed" >&2; exit 1; fi
if [ "$1" = 975 ]; then echo "scancel: error: Invalid job id 975" >&2; exit 1; fi
echo "scancel: error: Access/permission denied" >&2; exit 1
""",
}


@pytest.fixture
def fake_bin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in FAKE_PROGRAMS.items():
        path = bin_dir / name
        path.write_text(body)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_DIR", str(tmp_path))
    return tmp_path


def test_subprocess_slurm_submits_with_parsable_and_the_given_env(fake_bin: Path) -> None:
    env = {**os.environ, "HF_TOKEN": "hf_x"}
    assert SubprocessSlurm().submit("/jobs/a/job.sbatch", env) == "977"
    assert (fake_bin / "sbatch.args").read_text() == "--parsable /jobs/a/job.sbatch\n"
    assert "HF_TOKEN=hf_x" in (fake_bin / "sbatch.env").read_text()


def test_subprocess_slurm_reads_job_states_hosts_and_addresses(fake_bin: Path) -> None:
    slurm = SubprocessSlurm()
    info = slurm.job("977")
    assert info == JobInfo(job_id="977", state="RUNNING", reason="None", nodelist="n[1-2]", exit_code="0:0")
    pending = slurm.job("978")
    assert pending is not None
    assert (pending.state, pending.nodelist, pending.describe()) == (
        "PENDING",
        "",
        "PENDING (Priority, exit code 0:0)",
    )
    assert slurm.job("1") is None
    assert slurm.hostnames("n[1-2]") == ["n1", "n2"]
    assert slurm.node_address("n1") == "127.0.0.1"
    assert slurm.node_address("n9") is None
    assert "show job -o 977" in (fake_bin / "scontrol.args").read_text()


def test_subprocess_slurm_cancel_tolerates_ended_jobs_only(fake_bin: Path) -> None:
    slurm = SubprocessSlurm()
    slurm.cancel("977")
    slurm.cancel("976")
    slurm.cancel("975")
    with pytest.raises(RunnerError, match="permission denied"):
        slurm.cancel("1")
    assert (fake_bin / "scancel.args").read_text().split() == ["977", "976", "975", "1"]


def test_subprocess_slurm_without_the_programs_is_a_runner_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(RunnerError, match="sbatch failed"):
        SubprocessSlurm().submit("/x.sbatch", {"PATH": str(tmp_path)})


def test_lifecycle_through_the_client_programs(fake_bin: Path, health_port: int) -> None:  # noqa: F811
    """make_runner -> sbatch -> scontrol -> health on the head's NodeAddr -> scancel, with no fakes in Python."""
    launch = Launch(
        framework="sim",
        dialect="vllm",
        model="sim",
        argv=("serve",),
        port=health_port,
        nodes=2,
        metrics_endpoints=(MetricsEndpoint(node=0, port=health_port), MetricsEndpoint(node=1, port=9100)),
    )
    options = SlurmOptions(nodes=2, poll_interval_s=0.05, log_dir=str(fake_bin / "jobs"))
    handle = lifecycle.start_launch(launch, options, run_id="run-9", timeout_s=10.0)
    assert handle.id == "977"
    assert handle.base_url == f"http://127.0.0.1:{health_port}"
    assert handle.nodes == 2
    # node 1 (n2) has no NodeAddr in this cluster: its host name stands in
    assert handle.metrics_urls == (f"http://127.0.0.1:{health_port}/metrics", "http://n2:9100/metrics")
    assert (fake_bin / "sbatch.args").read_text().startswith("--parsable ")
    started = time.monotonic()
    lifecycle.stop_server(handle, options)
    assert time.monotonic() - started < 5.0  # scontrol reported CANCELLED: no wait for stop_timeout_s
    assert (fake_bin / "scancel.args").read_text().split() == ["977"]
