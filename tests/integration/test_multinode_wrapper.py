"""The Slurm runner's per-node wrapper, run by real bash (no Slurm needed).

The wrapper (:data:`alflow_infra.runners.slurm_script.NODE_WRAPPER`) is what every node of a multi-node job runs: it
fills the node placeholders of its argument list and execs it. Here the final program is
``printf '%s\\n'``, so each output line is one argument exactly as the server would receive it. Hostile
values (spaces, quotes, ``$()``, backticks, ``&``, backslashes, glob characters) must arrive verbatim and
never run. A second group of tests runs the whole rendered sbatch script with stand-in ``srun`` and
``scontrol`` programs on PATH, so address resolution and the srun lines are exercised too.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from alflow.config import SlurmOptions
from alflow.frameworks.launch import HEAD_ADDR, NNODES, NODE_RANK, Launch, LaunchGroup, node_addr
from alflow_infra.runners.slurm_script import NODE_WRAPPER, render_script, wrapper_args

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed"),
]

HOSTILE = 'it\'s "$(touch pwned)" `touch pwned2` & \\1 ; rm -rf * $HOME ${x}'
PRINT = ("printf", "%s\\n")


def run_wrapper(
    tmp_path: Path,
    argv: Sequence[str],
    worker_argv: Sequence[str] | None = None,
    *,
    node_id: int,
    addrs: Sequence[str],
    first_node: int = 0,
    nodes: int = 2,
) -> list[str]:
    env = {
        "PATH": os.environ["PATH"],
        "SLURM_NODEID": str(node_id),
        "ALFLOW_NODE_ADDRS": "\n".join(addrs),
    }
    params = wrapper_args(argv, worker_argv, first_node=first_node, nodes=nodes)
    out = subprocess.run(
        ["bash", "-c", NODE_WRAPPER, "alflow-node", *params],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert not (tmp_path / "pwned").exists()
    assert not (tmp_path / "pwned2").exists()
    return out.stdout.splitlines()


def test_the_wrapper_holds_no_single_quote() -> None:
    """The script carries it in single quotes: one inside would end the quoting."""
    assert "'" not in NODE_WRAPPER


def test_placeholders_are_filled_per_node(tmp_path: Path) -> None:
    argv = (*PRINT, "--nnodes", NNODES, "--node-rank", NODE_RANK, "--dist-init-addr", f"{HEAD_ADDR}:5000")
    addrs = ["10.0.0.1", "10.0.0.2"]
    assert run_wrapper(tmp_path, argv, node_id=0, addrs=addrs) == [
        "--nnodes",
        "2",
        "--node-rank",
        "0",
        "--dist-init-addr",
        "10.0.0.1:5000",
    ]
    assert run_wrapper(tmp_path, argv, node_id=1, addrs=addrs)[3] == "1"


def test_hostile_values_arrive_verbatim_and_never_run(tmp_path: Path) -> None:
    head = "head addr 'q' \"dq\" $(touch pwned) & \\"
    addrs = [head, "second `touch pwned2`"]
    argv = (
        *PRINT,
        HOSTILE,
        f"{HEAD_ADDR}:{HOSTILE}",
        f"{NODE_RANK}{NODE_RANK}",
        f"http://{node_addr(1)}:8000",
        "",
        "*",
        "@ALFLOW_NODE_ADDR_7@",  # no such node: left as it is
    )
    lines = run_wrapper(tmp_path, argv, node_id=1, addrs=addrs)
    assert lines == [
        HOSTILE,
        f"{head}:{HOSTILE}",
        "11",
        "http://second `touch pwned2`:8000",
        "",
        "*",
        "@ALFLOW_NODE_ADDR_7@",
    ]


def test_workers_run_their_own_argument_list(tmp_path: Path) -> None:
    head = (*PRINT, "serve", "--node-rank", NODE_RANK)
    workers = (*PRINT, "serve", "--node-rank", NODE_RANK, "--headless", HOSTILE)
    addrs = ["a", "b", "c"]
    assert run_wrapper(tmp_path, head, workers, node_id=0, addrs=addrs, nodes=3) == [
        "serve",
        "--node-rank",
        "0",
    ]
    assert run_wrapper(tmp_path, head, workers, node_id=2, addrs=addrs, nodes=3) == [
        "serve",
        "--node-rank",
        "2",
        "--headless",
        HOSTILE,
    ]


def test_a_group_takes_its_head_from_its_first_node(tmp_path: Path) -> None:
    """A decode group on job nodes 1..2: rank is step-relative, the head is job node 1."""
    argv = (*PRINT, NODE_RANK, HEAD_ADDR, NNODES)
    addrs = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    assert run_wrapper(tmp_path, argv, node_id=1, addrs=addrs, first_node=1, nodes=2) == [
        "1",
        "10.0.0.2",
        "2",
    ]


def test_the_wrapper_fails_clearly_outside_a_step(tmp_path: Path) -> None:
    params = wrapper_args(PRINT, None, first_node=0, nodes=1)
    out = subprocess.run(
        ["bash", "-c", NODE_WRAPPER, "alflow-node", *params],
        env={"PATH": os.environ["PATH"], "ALFLOW_NODE_ADDRS": "a"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode != 0
    assert "SLURM_NODEID is not set" in out.stderr


# --- the whole rendered script, with stand-in srun and scontrol ---------------------------------------

FAKE_SRUN = """\
#!/bin/bash
# Stand-in srun: runs the command once per node of the step, SLURM_NODEID step-relative, output per node.
nodes=1 relative=0 tasks=1
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes=*) nodes="${1#--nodes=}" ;;
    --relative=*) relative="${1#--relative=}" ;;
    --ntasks-per-node=*) tasks="${1#--ntasks-per-node=}" ;;
    --*) ;;
    *) break ;;
  esac
  shift
done
printf '%s\\n' "$@" > "$FAKE_DIR/srun-$relative-$$.argv"
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; exit 143' TERM
for ((i = 0; i < nodes; i++)); do
  for ((t = 0; t < tasks; t++)); do
    SLURM_NODEID="$i" "$@" >> "$FAKE_DIR/node-$((relative + i)).out" &
    pids+=("$!")
  done
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
exit "$status"
"""

FAKE_SCONTROL = """\
#!/bin/bash
case "$1 $2" in
  "show hostnames") printf 'n1\\nn2\\nn3\\n' | head -n "$FAKE_NODES" ;;
  "show node")
    case "$4" in
      n1) echo "NodeName=n1 Arch=x86_64 NodeAddr=10.0.0.1 NodeHostName=h1 State=ALLOCATED" ;;
      n2) echo "NodeName=n2 NodeAddr=10.0.0.2 State=ALLOCATED" ;;
      *) echo "Node $4 not found" >&2; exit 1 ;;
    esac ;;
esac
"""


def run_script(
    tmp_path: Path, launch: Launch, env: Mapping[str, str] | None = None, path_prefix: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the rendered script of ``launch`` with the stand-in srun/scontrol (then ``path_prefix``) on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    for name, body in (("srun", FAKE_SRUN), ("scontrol", FAKE_SCONTROL)):
        path = bin_dir / name
        path.write_text(body)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    script = tmp_path / "job.sbatch"
    script.write_text(render_script(launch, SlurmOptions(), log_path=str(tmp_path / "server.log")))
    return subprocess.run(
        ["bash", str(script)],
        env={
            "PATH": os.pathsep.join(p for p in (str(bin_dir), path_prefix, os.environ["PATH"]) if p),
            "FAKE_DIR": str(tmp_path),
            "FAKE_NODES": str(launch.nodes),
            "SLURM_JOB_ID": "77",
            "SLURM_JOB_NODELIST": f"n[1-{launch.nodes}]",
            "SLURM_JOB_NUM_NODES": str(launch.nodes),
            **(env or {}),
        },
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )


def node_output(tmp_path: Path, node: int) -> list[str]:
    return (tmp_path / f"node-{node}.out").read_text().splitlines()


def test_a_two_node_script_fills_each_node_with_the_resolved_addresses(tmp_path: Path) -> None:
    launch = Launch(
        framework="sglang",
        dialect="sglang",
        model="m",
        argv=(
            *PRINT,
            "--node-rank",
            NODE_RANK,
            "--dist-init-addr",
            f"{HEAD_ADDR}:5000",
            "--nnodes",
            NNODES,
            HOSTILE,
        ),
        port=30000,
        nodes=2,
        env={"NOTE": HOSTILE},
    )
    result = run_script(tmp_path, launch)
    assert result.returncode == 0, result.stderr
    assert "head n1 at 10.0.0.1" in result.stdout
    expected = ["--node-rank", "0", "--dist-init-addr", "10.0.0.1:5000", "--nnodes", "2", HOSTILE]
    assert node_output(tmp_path, 0) == expected
    assert node_output(tmp_path, 1) == [*expected[:1], "1", *expected[2:]]
    assert not (tmp_path / "pwned").exists()
    assert not (tmp_path / "pwned2").exists()


def test_an_mpi_script_runs_one_task_per_gpu(tmp_path: Path) -> None:
    launch = Launch(
        framework="trtllm",
        dialect="trtllm",
        model="m",
        argv=(*PRINT, f"rank={NODE_RANK}"),
        port=8000,
        nodes=2,
        mpi="pmix",
        tasks_per_node=4,
        gpus_per_node=4,
    )
    result = run_script(tmp_path, launch)
    assert result.returncode == 0, result.stderr
    assert node_output(tmp_path, 0) == ["rank=0"] * 4
    assert node_output(tmp_path, 1) == ["rank=1"] * 4
    argv_files = list(tmp_path.glob("srun-0-*.argv"))
    assert len(argv_files) == 1


def test_a_disaggregated_script_runs_each_group_on_its_nodes(tmp_path: Path) -> None:
    """Frontend and prefill on node 0, a 2-node decode group on nodes 1..2 (node 3 has no NodeAddr)."""
    serve = 'for a in "$@"; do printf "%s %s\\n" "$0" "$a"; done; exec sleep 30'
    # The frontend prints once the groups have printed, then exits 3: the job must end with that status
    # and stop the groups (which would sleep on).
    frontend = (
        "for _ in $(seq 200); do [ -s node-1.out ] && [ -s node-2.out ] && grep -q prefill node-0.out && break; "
        'sleep 0.05; done; printf "frontend %s\\n" "$@"; exit 3'
    )
    launch = Launch(
        framework="sglang",
        dialect="sglang",
        model="m",
        argv=("bash", "-c", frontend, "fe", f"http://{node_addr(0)}:30000", f"http://{node_addr(1)}:31000"),
        port=8000,
        nodes=3,
        groups=(
            LaunchGroup(
                "prefill0", "prefill", 0, 1, ("bash", "-c", serve, "prefill", NODE_RANK, HEAD_ADDR), 30000
            ),
            LaunchGroup(
                "decode0",
                "decode",
                1,
                2,
                ("bash", "-c", serve, "decode", NODE_RANK, HEAD_ADDR, NNODES),
                31000,
            ),
        ),
    )
    result = run_script(tmp_path, launch)
    assert result.returncode == 3
    assert "a job step ended (exit status 3)" in result.stderr
    assert sorted(node_output(tmp_path, 0)) == [
        "frontend http://10.0.0.1:30000",
        "frontend http://10.0.0.2:31000",
        "prefill 0",
        "prefill 10.0.0.1",
    ]
    assert node_output(tmp_path, 1) == ["decode 0", "decode 10.0.0.2", "decode 2"]
    assert node_output(tmp_path, 2) == ["decode 1", "decode 10.0.0.2", "decode 2"]
    assert sorted(p.name.split("-")[1] for p in tmp_path.glob("srun-*.argv")) == ["0", "0", "1"]


def test_a_failing_step_ends_a_disaggregated_job_with_its_status(tmp_path: Path) -> None:
    launch = Launch(
        framework="sglang",
        dialect="sglang",
        model="m",
        argv=("sleep", "30"),
        port=8000,
        nodes=2,
        groups=(
            LaunchGroup("prefill0", "prefill", 0, 1, ("sleep", "30"), 30000),
            LaunchGroup("decode0", "decode", 1, 1, ("bash", "-c", "exit 7"), 31000),
        ),
    )
    result = run_script(tmp_path, launch)
    assert result.returncode == 7
    assert "exit status 7" in result.stderr


def test_a_job_with_fewer_nodes_than_the_server_stops_at_once(tmp_path: Path) -> None:
    launch = Launch(framework="sim", dialect="vllm", model="m", argv=PRINT, port=8000, nodes=2)
    result = run_script(tmp_path, launch, env={"FAKE_NODES": "1"})
    assert result.returncode == 1
    assert "expected 2 node(s)" in result.stderr
