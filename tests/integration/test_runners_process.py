"""Process runner: start, health wait with early-exit detection, logs, SIGTERM then SIGKILL, files, secrets."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from alflow.config import ProcessOptions
from alflow.frameworks.launch import Launch, LaunchFile, free_port
from alflow.util.rows import dump_row
from alflow_infra.errors import ServerStartError
from alflow_infra.runners import ProcessRunner, ServerHandle, make_runner, running_server
from alflow_infra.runners.base import health_ok
from alflow_infra.runners.process import pid_of, process_id

# A tiny server: /health answers 200 once READY_AFTER seconds have passed; behaviour from the env.
SERVER = r"""
import http.server, os, signal, subprocess, sys, time
port = int(sys.argv[1])
mode = os.environ.get("MODE", "ok")
print("server starting", flush=True)
if os.environ.get("SHOW_SECRET"):
    print("token is", os.environ.get("HF_TOKEN"), flush=True)
if len(sys.argv) > 2:
    print("file says:", open(sys.argv[2]).read().strip(), flush=True)
if mode == "crash":
    print("fatal: model weights not found", flush=True)
    sys.exit(3)
if mode == "stubborn":
    signal.signal(signal.SIGTERM, lambda *a: print("ignoring SIGTERM", flush=True))
    child = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
    print("child", child.pid, flush=True)
start = time.monotonic()
ready_after = float(os.environ.get("READY_AFTER", "0"))
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        ok = mode != "never" and time.monotonic() - start >= ready_after
        self.send_response(200 if ok else 503)
        self.end_headers()
        self.wfile.write(b"ok" if ok else b"loading")
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("run_dirs_in_tmp_path")]


def server_launch(
    env: dict[str, str] | None = None, *, files: tuple[LaunchFile, ...] = (), timeout_s: float = 10.0
) -> Launch:
    port = free_port()
    argv = [sys.executable, "-c", SERVER, str(port)]
    if files:
        argv.append(f"/alflow/{files[0].name}")
    return Launch(
        framework="test",
        dialect="vllm",
        model="m",
        argv=tuple(argv),
        port=port,
        host="127.0.0.1",
        env=env or {},
        files=files,
        readiness_timeout_s=timeout_s,
    )


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is not alive for our purposes
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except OSError:
        return False
    return state != "Z"


def test_start_wait_stop(tmp_path: Path) -> None:
    runner = ProcessRunner(ProcessOptions(log_dir=str(tmp_path)))
    launch = server_launch({"READY_AFTER": "0.5"})
    t0 = time.monotonic()
    with running_server(runner, launch) as handle:
        assert time.monotonic() - t0 >= 0.5
        assert handle.runner == "process"
        assert handle.base_url == f"http://127.0.0.1:{launch.port}"
        assert handle.metrics_url == handle.base_url + "/metrics"
        assert health_ok(handle.health_url)
        pid = pid_of(handle.id)
        assert alive(pid)
        assert handle.log_path is not None
        assert Path(handle.log_path).is_relative_to(tmp_path)
        assert "server starting" in runner.logs(handle)
        assert handle.provenance.argv == list(launch.argv)
    assert not alive(pid)
    runner.stop(handle)  # idempotent


def test_early_exit_fails_fast_with_log_tail() -> None:
    runner = ProcessRunner()
    handle = runner.start(server_launch({"MODE": "crash"}, timeout_s=60))
    t0 = time.monotonic()
    with pytest.raises(ServerStartError, match="exited with code 3") as info:
        runner.wait_ready(handle)
    assert time.monotonic() - t0 < 5
    assert "fatal: model weights not found" in str(info.value)
    assert "fatal: model weights not found" in info.value.log_tail
    runner.stop(handle)


def test_timeout_when_never_healthy() -> None:
    runner = ProcessRunner()
    with (
        pytest.raises(ServerStartError, match="not healthy") as info,
        running_server(runner, server_launch({"MODE": "never"}), timeout_s=1.0),
    ):
        pytest.fail("must not become ready")
    assert "server starting" in info.value.log_tail


def test_sigterm_then_sigkill_for_the_whole_group(tmp_path: Path) -> None:
    runner = ProcessRunner(
        ProcessOptions(stop_timeout_s=0.5, log_dir=str(tmp_path))
    )  # the log read after the stop
    handle = runner.start(server_launch({"MODE": "stubborn"}))
    runner.wait_ready(handle)
    deadline = time.monotonic() + 5
    while "child" not in runner.logs(handle) and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int(
        next(line for line in runner.logs(handle).splitlines() if line.startswith("child")).split()[1]
    )
    pid = pid_of(handle.id)
    assert alive(child)
    t0 = time.monotonic()
    runner.stop(handle)
    elapsed = time.monotonic() - t0
    assert 0.4 < elapsed < 5, elapsed  # waited for SIGTERM, then killed
    time.sleep(0.1)
    assert not alive(pid)
    assert not alive(child)  # the grandchild ignored SIGTERM and died with the group
    assert "ignoring SIGTERM" in Path(str(handle.log_path)).read_text()


def test_files_are_written_and_argv_relocated(tmp_path: Path) -> None:
    runner = ProcessRunner(ProcessOptions(log_dir=str(tmp_path)))
    launch = server_launch(files=(LaunchFile("opts.yaml", "speculative_config: {max_draft_len: 3}\n"),))
    with running_server(runner, launch) as handle:
        assert "file says: speculative_config: {max_draft_len: 3}" in runner.logs(handle)
        argv = handle.provenance.argv
        assert isinstance(argv, list)
        assert str(tmp_path) in argv[-1]


def test_without_log_dir_the_servers_temporary_folder_goes_with_it() -> None:
    """Round 8 R8-8: every run without ``log_dir`` left ``/tmp/alflow-<tag>-*/server.log`` behind for good."""
    runner = ProcessRunner()
    with running_server(runner, server_launch()) as handle:
        folder = Path(str(handle.log_path)).parent
        assert folder.name.startswith("alflow-")
        assert folder.is_dir()
    assert not folder.exists()


def test_secrets_pass_by_name_and_are_redacted() -> None:
    secret = "hf_SuperSecretValue123"
    runner = ProcessRunner(secret_source={"HF_TOKEN": secret}.get)
    with running_server(runner, server_launch({"SHOW_SECRET": "1"})) as handle:
        logs = runner.logs(handle)
        assert "token is ***" in logs
        assert secret not in logs
        assert secret in Path(str(handle.log_path)).read_text()  # the child really got it
        assert secret not in repr(handle)


def test_registry_builds_a_process_runner() -> None:
    runner = make_runner(ProcessOptions(stop_timeout_s=1.0))
    assert isinstance(runner, ProcessRunner)
    assert runner.options.stop_timeout_s == 1.0


def test_stop_from_another_runner_instance() -> None:
    first = ProcessRunner()
    handle = first.start(server_launch())
    first.wait_ready(handle)
    t0 = time.monotonic()
    ProcessRunner(ProcessOptions(stop_timeout_s=5.0)).stop(handle)
    assert time.monotonic() - t0 < 2.0  # SIGTERM was enough
    assert not alive(pid_of(handle.id))
    assert not Path(f"/proc/{pid_of(handle.id)}").exists()  # reaped too: no zombie left
    first.stop(handle)  # idempotent


def test_stale_handle_never_kills_a_reused_pid() -> None:
    """A handle whose start time does not match the live process (pid reused) stops nothing."""
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    try:
        real = process_id(other.pid)
        assert real.startswith(f"{other.pid}@")
        stale = ServerHandle(
            runner="process",
            id=f"{other.pid}@1",
            base_url="",
            metrics_url="",
            health_url="",
            dialect="vllm",
            model="m",
        )
        ProcessRunner(ProcessOptions(stop_timeout_s=0.2)).stop(stale)
        assert other.poll() is None
        same = ServerHandle(**{**dump_row(stale), "id": real})
        ProcessRunner(ProcessOptions(stop_timeout_s=2)).stop(same)
        assert other.wait(timeout=5) == -15  # SIGTERM
    finally:
        other.kill()
        other.wait()


def test_stray_knob_variables_in_the_runners_environment_are_not_inherited(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS", "1.5")
    monkeypatch.setenv("ALFLOW_TEST_PASSTHROUGH", "yes")
    script = (
        "import os; print('knob', os.environ.get('TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS'),"
        " os.environ.get('ALFLOW_TEST_PASSTHROUGH'), flush=True)"
    )
    launch = Launch(
        framework="test", dialect="vllm", model="m", argv=(sys.executable, "-c", script), port=free_port()
    )
    runner = ProcessRunner()
    handle = runner.start(launch)
    with pytest.raises(ServerStartError, match="exited with code 0"):
        runner.wait_ready(handle, timeout_s=10)
    assert "knob None yes" in runner.logs(handle)
    runner.stop(handle)
