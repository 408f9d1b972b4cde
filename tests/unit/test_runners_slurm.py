"""Slurm runner: pinned sbatch scripts, quoting, job-state following, failure log tails, scancel.

The Slurm client calls are faked at the runner's own seam (:class:`SlurmCommands`) with a scripted
cluster; :class:`SubprocessSlurm` itself is checked against stand-in ``sbatch``/``scontrol``/``scancel``
programs on ``PATH``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from pydantic import ValidationError

from alflow.config import ServerPlacement, SlurmOptions
from alflow.frameworks.launch import Launch, LaunchFile, MetricsEndpoint, free_port
from alflow.util.rows import dump_row
from alflow_infra.errors import RunnerError, ServerStartError
from alflow_infra.runners import RUNNERS, SlurmRunner, make_runner
from alflow_infra.runners.slurm import JobInfo, parse_key_values, render_script
from tests.unit.golden import assert_golden
from tests.unit.loopback_http import Health, serving

LOG = "/shared/alflow/jobs/run1/server.log"

SGLANG_ARGV = (
    "python3",
    "-m",
    "sglang.launch_server",
    "--model-path",
    "deepseek-ai/DeepSeek-V3",
    "--port",
    "30000",
)


def sglang_launch(*extra: str, env: Mapping[str, str] | None = None, nodes: int = 1) -> Launch:
    return Launch(
        framework="sglang",
        dialect="sglang",
        model="deepseek-ai/DeepSeek-V3",
        argv=(*SGLANG_ARGV, *extra),
        port=30000,
        env=dict(env or {"SGLANG_ENABLE_TORCH_COMPILE": "0"}),
        nodes=nodes,
    )


# --- rendered scripts, pinned (golden files under tests/unit/golden/; see tests/unit/golden.py) --------


def test_single_node_8_gpus_script_is_pinned() -> None:
    options = SlurmOptions(gpus_per_node=8, partition="gpu", time_limit="01:00:00", modules=("cuda/12.4",))
    assert_golden(
        "slurm_launch_single_node.sbatch",
        render_script(sglang_launch("--tp-size", "8"), options, log_path=LOG),
    )


def test_two_nodes_8_gpus_tensor_expert_parallel_script_is_pinned() -> None:
    options = SlurmOptions(
        nodes=2,
        gpus_per_node=8,
        partition="gpu",
        account="spec-decode",
        time_limit="04:00:00",
        job_name="dsv3-tp16",
        modules=("cuda/12.4", "nccl/2.21"),
        extra_sbatch_args=("--exclusive", "--mem=0"),
    )
    launch = sglang_launch(
        "--tp-size",
        "16",
        "--ep-size",
        "16",
        env={"SGLANG_ENABLE_TORCH_COMPILE": "0", "NCCL_DEBUG": "WARN"},
        nodes=2,
    )
    assert_golden("slurm_launch_two_nodes.sbatch", render_script(launch, options, log_path=LOG))


def test_container_image_script_is_pinned() -> None:
    options = SlurmOptions(
        nodes=2,
        gpus_per_node=8,
        container_image="lmsysorg/sglang:v0.5.4",
        container_mounts=("/models:/root/.cache/huggingface:ro",),
    )
    script = render_script(
        sglang_launch("--tp-size", "16", nodes=2),
        options,
        log_path=LOG,
        extra_mounts=("/shared/alflow/jobs/run1:/shared/alflow/jobs/run1",),
    )
    assert_golden("slurm_launch_container_two_nodes.sbatch", script)


@pytest.mark.parametrize(
    ("field", "value"),
    [("partition", "gpu queue"), ("account", "a;b"), ("time_limit", "1:00 --x"), ("job_name", "x'y")],
)
def test_values_that_would_need_quoting_on_sbatch_lines_are_refused(field: str, value: str) -> None:
    options = SlurmOptions.model_validate({field: value})
    with pytest.raises(RunnerError, match="#SBATCH"):
        render_script(sglang_launch(), options, log_path=LOG)


def test_log_path_and_env_names_are_checked() -> None:
    with pytest.raises(RunnerError, match="log path"):
        render_script(sglang_launch(), SlurmOptions(), log_path="/tmp/my jobs/server.log")
    with pytest.raises(RunnerError, match="'%'"):
        render_script(sglang_launch(), SlurmOptions(), log_path="/shared/%j/server.log")
    with pytest.raises(RunnerError, match="job comment"):
        render_script(sglang_launch(), SlurmOptions(), log_path=LOG, comment="run 1")
    with pytest.raises(RunnerError, match="not a valid shell name"):
        render_script(sglang_launch(env={"BAD-NAME": "1"}), SlurmOptions(), log_path=LOG)


def test_options_model_registry_and_placement() -> None:
    placement = ServerPlacement.model_validate({"runner": {"kind": "slurm", "nodes": 2, "gpus_per_node": 8}})
    assert isinstance(placement.runner, SlurmOptions)
    assert placement.runner.nodes == 2
    with pytest.raises(ValidationError):
        SlurmOptions.model_validate({"nodes": 0})
    with pytest.raises(ValidationError):
        SlurmOptions.model_validate({"gpus": 8})
    for name, field in SlurmOptions.model_fields.items():
        assert field.description, name
    assert RUNNERS["slurm"] is SlurmRunner
    runner = make_runner(SlurmOptions(), run_id="r1")
    assert isinstance(runner, SlurmRunner)
    assert runner.run_id == "r1"


# --- the runner against a scripted cluster -------------------------------------------------------------


class ScriptedSlurm:
    """A fake cluster: each job() call returns the next scripted state (the last one repeats)."""

    def __init__(self, states: list[JobInfo | None], *, after_cancel: JobInfo | None = None) -> None:
        self.states = list(states)
        self.after_cancel = after_cancel
        self.cancelled_ = False
        self.submitted: list[tuple[str, dict[str, str]]] = []
        self.cancelled: list[str] = []
        self.job_calls = 0
        self.on_submit: list[str] = []

    def submit(self, script_path: str, env: Mapping[str, str]) -> str:
        self.submitted.append((script_path, dict(env)))
        log_path = Path(script_path).with_name("server.log")
        if self.on_submit:
            log_path.write_text("".join(line + "\n" for line in self.on_submit))
        return "4242"

    def job(self, job_id: str) -> JobInfo | None:
        assert job_id == "4242"
        self.job_calls += 1
        if self.cancelled_:
            return self.after_cancel
        if len(self.states) > 1:
            return self.states.pop(0)
        return self.states[0]

    def hostnames(self, nodelist: str) -> list[str]:
        assert nodelist == "n[1-2]"
        return ["n1", "n2"]

    def node_address(self, node: str) -> str | None:
        return {"n1": "127.0.0.1"}.get(node)

    def cancel(self, job_id: str) -> None:
        self.cancelled.append(job_id)
        self.cancelled_ = True


def job(state: str, nodelist: str = "", reason: str = "None", exit_code: str = "0:0") -> JobInfo:
    return JobInfo(job_id="4242", state=state, reason=reason, nodelist=nodelist, exit_code=exit_code)


RUNNING = job("RUNNING", "n[1-2]")
CANCELLED = job("CANCELLED", "n[1-2]", exit_code="0:15")


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


pytestmark = [pytest.mark.unit, pytest.mark.usefixtures("run_dirs_in_tmp_path")]


def make(
    fake: ScriptedSlurm,
    clock: FakeClock | None = None,
    secrets: Mapping[str, str] | None = None,
    **options: object,
) -> SlurmRunner:
    clock = clock or FakeClock()
    return SlurmRunner(
        SlurmOptions.model_validate({"poll_interval_s": 0.05, **options}),
        run_id="run-1",
        secret_source=dict(secrets or {}).get,
        commands=fake,
        clock=clock,
        sleep=clock.sleep,
    )


def test_start_waits_for_running_and_finds_the_head_address(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SGLANG_SIMULATE_ACC_LEN", "3.0")  # a stray knob must not reach the job
    fake = ScriptedSlurm([job("PENDING", reason="Resources"), job("CONFIGURING", "n[1-2]"), RUNNING])
    launch = sglang_launch(env={"NCCL_DEBUG": "INFO"})
    launch = dataclasses.replace(launch, secret_env=("HF_TOKEN",))
    runner = make(fake, secrets={"HF_TOKEN": "hf_supersecret"}, log_dir=str(tmp_path / "jobs"))
    handle = runner.start(launch)

    assert handle.runner == "slurm"
    assert handle.id == "4242"
    assert handle.base_url == "http://127.0.0.1:30000"
    assert handle.health_url == "http://127.0.0.1:30000/health"
    assert handle.metrics_url == "http://127.0.0.1:30000/metrics"
    script_path, env = fake.submitted[0]
    script = Path(script_path).read_text()
    assert Path(script_path).parent.parent == tmp_path / "jobs"
    slurm = handle.provenance.slurm
    assert isinstance(slurm, dict)
    assert slurm["job_id"] == "4242"
    assert slurm["script"] == script
    assert slurm["head_node"] == "n1"
    assert slurm["head_address"] == "127.0.0.1"
    assert slurm["hosts"] == ["n1", "n2"]
    assert handle.provenance.run_id == "run-1"
    # The secret travels in sbatch's environment, never in the script or the provenance.
    assert env["HF_TOKEN"] == "hf_supersecret"
    assert "SGLANG_SIMULATE_ACC_LEN" not in env
    assert "hf_supersecret" not in script
    assert "hf_supersecret" not in repr(dump_row(handle))
    assert "export NCCL_DEBUG=INFO" in script
    assert "#SBATCH --comment=alflow-run:run-1\n" in script
    assert f"#SBATCH --output={handle.log_path}" in script
    assert fake.cancelled == []


def test_head_falls_back_to_the_host_name_without_a_node_address(tmp_path: Path) -> None:
    fake = ScriptedSlurm([RUNNING])
    fake.node_address = lambda node: None  # type: ignore[method-assign]
    handle = make(fake).start(dataclasses.replace(sglang_launch(), image="lmsysorg/sglang:v0.5.4"))
    assert handle.base_url == "http://n1:30000"
    assert handle.image is None  # a bare command: the recipe's image is not what ran
    assert handle.provenance.image is None


def test_launch_files_are_written_to_the_job_dir_and_mounted_in_the_container() -> None:
    fake = ScriptedSlurm([RUNNING])
    launch = Launch(
        framework="trtllm",
        dialect="trtllm",
        model="m",
        argv=("trtllm-serve", "m", "--config", "/alflow/extra.yaml"),
        port=8000,
        files=(LaunchFile("extra.yaml", "speculative_config: {}\n"),),
    )
    handle = make(fake, container_image="nvcr.io/nvidia/trtllm:1.0").start(launch)
    script = Path(fake.submitted[0][0]).read_text()
    job_dir = Path(fake.submitted[0][0]).parent
    assert (job_dir / "files" / "extra.yaml").read_text() == "speculative_config: {}\n"
    assert f"--config {job_dir}/files/extra.yaml" in script
    assert f"--container-mounts={job_dir}:{job_dir}" in script
    assert handle.image == "nvcr.io/nvidia/trtllm:1.0"
    assert handle.provenance.image == "nvcr.io/nvidia/trtllm:1.0"


def test_a_job_that_fails_before_running_raises_with_its_log_and_is_cancelled() -> None:
    fake = ScriptedSlurm([job("PENDING"), job("FAILED", "n[1-2]", reason="NonZeroExitCode", exit_code="1:0")])
    fake.on_submit = ["module: cuda/12.4 not found", "fatal: cannot start"]
    with pytest.raises(ServerStartError) as err:
        make(fake).start(sglang_launch())
    assert "ended before it ran: FAILED (NonZeroExitCode, exit code 1:0)" in str(err.value)
    assert "fatal: cannot start" in err.value.log_tail
    assert fake.cancelled == ["4242"]


def test_a_failing_cancel_does_not_hide_the_start_failure(caplog: pytest.LogCaptureFixture) -> None:
    fake = ScriptedSlurm([job("FAILED", "n[1-2]", reason="NonZeroExitCode", exit_code="1:0")])

    def cancel(job_id: str) -> None:
        raise RunnerError("scancel 4242 failed: Access/permission denied")

    fake.cancel = cancel  # type: ignore[method-assign]
    with pytest.raises(ServerStartError, match="ended before it ran"):
        make(fake).start(sglang_launch())
    assert "could not cancel Slurm job 4242" in caplog.text


def test_a_job_stuck_in_the_queue_times_out_and_is_cancelled() -> None:
    clock = FakeClock()
    fake = ScriptedSlurm([job("PENDING", reason="Resources")], after_cancel=None)
    with pytest.raises(ServerStartError, match=r"not running within 5 s: PENDING \(Resources"):
        make(fake, clock, queue_timeout_s=5.0).start(sglang_launch())
    assert fake.cancelled == ["4242"]
    assert 5.0 <= clock.now < 5.2


@pytest.fixture
def health_port() -> Iterator[int]:
    with serving(Health) as url:
        yield int(url.rsplit(":", 1)[1])


def test_wait_ready_returns_once_the_head_serves_health(health_port: int) -> None:
    fake = ScriptedSlurm([RUNNING])
    runner = SlurmRunner(SlurmOptions(poll_interval_s=0.05), commands=fake)
    launch = Launch(framework="sim", dialect="vllm", model="sim", argv=("serve",), port=health_port)
    handle = runner.start(launch)
    runner.wait_ready(handle, timeout_s=10.0)
    assert fake.cancelled == []


def test_wait_ready_fails_fast_with_the_log_tail_when_the_job_fails() -> None:
    # Nothing listens on the port: only the job state can end the wait before its 60 s timeout.
    fake = ScriptedSlurm(
        [RUNNING, RUNNING, job("FAILED", "n[1-2]", reason="NonZeroExitCode", exit_code="3:0")]
    )
    runner = SlurmRunner(
        SlurmOptions(poll_interval_s=0.01), commands=fake, secret_source={"HF_TOKEN": "hf_supersecret"}.get
    )
    launch = Launch(framework="sim", dialect="vllm", model="sim", argv=("serve",), port=free_port())
    handle = runner.start(launch)
    assert handle.log_path is not None
    Path(handle.log_path).write_text("loading weights\ntoken hf_supersecret\nCUDA error: out of memory\n")
    started = time.monotonic()
    with pytest.raises(ServerStartError) as err:
        runner.wait_ready(handle, timeout_s=60.0)
    assert time.monotonic() - started < 10.0
    assert "Slurm job 4242 is FAILED (NonZeroExitCode, exit code 3:0)" in str(err.value)
    assert "CUDA error: out of memory" in err.value.log_tail
    assert "hf_supersecret" not in err.value.log_tail
    assert "***" in runner.logs(handle)


@pytest.mark.parametrize("state", ["CANCELLED", "TIMEOUT", "COMPLETED", "NODE_FAIL", "COMPLETING"])
def test_every_ended_state_fails_the_wait(state: str) -> None:
    fake = ScriptedSlurm([RUNNING, job(state, "n[1-2]")])
    runner = SlurmRunner(SlurmOptions(poll_interval_s=0.01), commands=fake)
    launch = Launch(framework="sim", dialect="vllm", model="sim", argv=("serve",), port=free_port())
    handle = runner.start(launch)
    with pytest.raises(ServerStartError, match=f"is {state}"):
        runner.wait_ready(handle, timeout_s=30.0)


def test_a_job_slurm_forgot_fails_the_wait() -> None:
    fake = ScriptedSlurm([RUNNING, None])
    runner = SlurmRunner(SlurmOptions(poll_interval_s=0.01), commands=fake)
    launch = Launch(framework="sim", dialect="vllm", model="sim", argv=("serve",), port=free_port())
    handle = runner.start(launch)
    with pytest.raises(ServerStartError, match="no longer known to Slurm"):
        runner.wait_ready(handle, timeout_s=30.0)


def test_job_state_queries_are_rate_limited_while_waiting() -> None:
    clock = FakeClock()
    fake = ScriptedSlurm([RUNNING])
    runner = make(fake, clock, poll_interval_s=1.0)
    handle = runner.start(sglang_launch())
    calls = fake.job_calls
    for _ in range(10):
        assert runner._dead_reason(handle) is None
    assert fake.job_calls == calls + 1
    clock.now += 1.0
    assert runner._dead_reason(handle) is None
    assert fake.job_calls == calls + 2


def test_stop_cancels_and_waits_until_the_job_ended() -> None:
    fake = ScriptedSlurm([RUNNING], after_cancel=CANCELLED)
    runner = make(fake)
    handle = runner.start(sglang_launch())
    runner.stop(handle)
    assert fake.cancelled == ["4242"]
    runner.stop(handle)  # idempotent: scancel of an ended job is fine
    assert fake.cancelled == ["4242", "4242"]


def test_stop_gives_up_waiting_after_the_stop_timeout(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    fake = ScriptedSlurm([RUNNING], after_cancel=job("COMPLETING", "n[1-2]"))
    runner = make(fake, clock, stop_timeout_s=2.0)
    handle = runner.start(sglang_launch())
    runner.stop(handle)
    assert fake.cancelled == ["4242"]
    assert 2.0 <= clock.now < 2.5
    assert "still COMPLETING" in caplog.text


def test_parse_key_values_keeps_the_first_occurrence() -> None:
    assert parse_key_values("A=1 B=x=y C= D A=2") == {"A": "1", "B": "x=y", "C": ""}


# --- the server config's node count is authoritative; GPUs and metrics endpoints per node ---------------


def test_runner_nodes_must_agree_with_the_server() -> None:
    with pytest.raises(RunnerError, match=r"nodes=2 but the sglang server spans 1 node\(s\)"):
        render_script(sglang_launch(), SlurmOptions(nodes=2), log_path=LOG)
    script = render_script(sglang_launch(nodes=2), SlurmOptions(), log_path=LOG)
    assert "#SBATCH --nodes=2\n" in script
    assert "exec srun --nodes=2 --ntasks=2 " in script


def test_gpus_per_node_come_from_the_launch_unless_the_options_say() -> None:
    launch = dataclasses.replace(sglang_launch(nodes=2), gpus_per_node=8)
    assert "#SBATCH --gpus-per-node=8\n" in render_script(launch, SlurmOptions(), log_path=LOG)
    assert "#SBATCH --gpus-per-node=16\n" in render_script(
        launch, SlurmOptions(gpus_per_node=16), log_path=LOG
    )
    with pytest.raises(RunnerError, match="gpus_per_node=4 but the sglang server uses 8"):
        render_script(launch, SlurmOptions(gpus_per_node=4), log_path=LOG)


def test_the_handle_lists_every_metrics_endpoint_on_its_node(tmp_path: Path) -> None:
    fake = ScriptedSlurm([RUNNING])
    fake.node_address = {"n1": "10.0.0.1", "n2": "10.0.0.2"}.get  # type: ignore[method-assign,assignment]
    launch = dataclasses.replace(
        sglang_launch(nodes=2),
        metrics_endpoints=(
            MetricsEndpoint(node=1, port=31000),
            MetricsEndpoint(node=1, port=31001, path="/m"),
        ),
    )
    handle = make(fake).start(launch)
    assert handle.nodes == 2
    assert handle.base_url == "http://10.0.0.1:30000"
    assert handle.metrics_url == "http://10.0.0.1:30000/metrics"
    assert handle.metrics_urls == ("http://10.0.0.2:31000/metrics", "http://10.0.0.2:31001/m")
    assert handle.all_metrics_urls == handle.metrics_urls
    slurm = handle.provenance.slurm
    assert isinstance(slurm, dict)
    assert slurm["addresses"] == ["10.0.0.1", "10.0.0.2"]
    assert slurm["nodes"] == 2


def test_without_endpoints_the_head_metrics_url_stands_alone() -> None:
    handle = make(ScriptedSlurm([RUNNING])).start(sglang_launch())
    assert handle.metrics_urls == ()
    assert handle.all_metrics_urls == ("http://127.0.0.1:30000/metrics",)


def test_a_job_with_fewer_hosts_than_the_server_spans_fails_and_is_cancelled() -> None:
    fake = ScriptedSlurm([RUNNING])
    with pytest.raises(ServerStartError, match=r"got 2 node\(s\) \(n\[1-2\]\) but the server spans 3"):
        make(fake).start(sglang_launch(nodes=3))
    assert fake.cancelled == ["4242"]
