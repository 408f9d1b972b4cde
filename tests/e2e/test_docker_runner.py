"""The docker runner against a real dockerd: the sim in a container, crash at start, cleanup, GPU config.

Needs a running Docker engine (``bash scripts/ci-services.sh``). Without one these tests are skipped,
or fail when ``CI`` is set. The local image is made by :mod:`alflow_infra.images` (no registry); containers
use host networking. A session fixture asserts that no alflow container is left behind.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest
import yaml

from alflow.config import DockerOptions, SpeculativeConfig, SyntheticAcceptance, server_config
from alflow.frameworks.launch import Launch, free_port
from alflow.frameworks.recipes import build_launch
from alflow.frameworks.sim.recipe import SIM_IMAGE
from alflow.util.rows import dump_row
from alflow_infra.errors import RunnerError, ServerStartError
from alflow_infra.images import ensure_sim_image, sim_docker_options
from alflow_infra.lifecycle import start_server, stop_server
from alflow_infra.runners import DockerRunner, ServerHandle, running_server
from alflow_infra.runners.docker import LABEL, LABEL_CREATED, LABEL_RUN_ID, docker_client

pytestmark = pytest.mark.services

ALFLOW = str(Path(sys.executable).with_name("alflow"))
SESSION = f"test-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def client() -> docker.DockerClient:
    """The Docker client; skip (or fail under CI) when no engine answers."""
    try:
        return docker_client(timeout_s=30)
    except RunnerError as exc:
        message = f"no Docker engine for the e2e docker tests: {exc}"
        if os.environ.get("CI"):
            pytest.fail(message + " (CI is set: .ci/run must start dockerd via scripts/ci-services.sh)")
        pytest.skip(message)


@pytest.fixture(scope="session", autouse=True)
def no_container_left_behind(client: docker.DockerClient) -> Iterator[None]:
    """After the session, no alflow-labelled container created during it may remain (removed, then failed)."""
    before = {c.id for c in client.containers.list(all=True, filters={"label": f"{LABEL}=1"})}
    yield
    left = [
        c for c in client.containers.list(all=True, filters={"label": f"{LABEL}=1"}) if c.id not in before
    ]
    for container in left:
        container.remove(force=True, v=True)
    assert not left, f"alflow containers left behind: {[c.name for c in left]}"


@pytest.fixture(scope="session")
def sim_image(client: docker.DockerClient) -> str:
    return ensure_sim_image(client)


def run_id() -> str:
    return f"{SESSION}-{uuid.uuid4().hex[:6]}"


def sim_launch(*extra: str, al: float | None = 3.24) -> Launch:
    return build_launch(
        server_config(
            framework="sim",
            model="llama-3.3-70b",
            host="127.0.0.1",
            sim_dialect="vllm",
            speculative=SpeculativeConfig(method="eagle3", k=5, draft_model="org/drafter"),
            synthetic=None if al is None else SyntheticAcceptance(target_al=al),
            readiness_timeout_s=30,
            extra_args=("--time-scale", "0", *extra),
        )
    )


def gone(client: docker.DockerClient, container_id: str) -> bool:
    try:
        client.containers.get(container_id)
    except docker.errors.NotFound:
        return True
    return False


def test_sim_in_a_container_serves_a_bench_and_is_removed(
    client: docker.DockerClient, sim_image: str, tmp_path: Path
) -> None:
    runner = DockerRunner(sim_docker_options(log_dir=str(tmp_path)), client=client, run_id=run_id())
    launch = sim_launch()
    with running_server(runner, launch) as handle:
        assert handle.runner == "docker"
        assert handle.image == SIM_IMAGE
        assert handle.image_digest == sim_image  # a local image has no repo digest: its id
        container = client.containers.get(handle.id)
        assert container.status == "running"
        assert container.labels[LABEL] == "1"
        assert container.labels[LABEL_RUN_ID] == runner.run_id
        assert abs(int(container.labels[LABEL_CREATED]) - time.time()) < 120
        assert container.attrs["HostConfig"]["NetworkMode"] == "host"
        argv = [ALFLOW, "bench", "--base-url", handle.base_url, "--endpoint", "completions"]
        argv += ["--dataset", "random", "--vocab-size", "20000", "--isl", "32", "--osl", "64", "--ignore-eos"]
        argv += ["--concurrency", "4", "--num-prompts", "16", "--dialect", "vllm", "--k", "5"]
        argv += ["--json", "--no-progress"]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
        summary = json.loads(done.stdout)
        assert summary["completed"] == 16
        stats = summary["spec_decode"]["stats"]
        assert stats["al"] == pytest.approx(3.24, abs=0.15)
        assert "alflow-sim listening on" in runner.logs(handle)
    assert gone(client, handle.id)
    # the whole log was saved before the container was removed
    assert handle.log_path == str(tmp_path / f"{handle.name}.log")
    assert "alflow-sim listening on" in Path(handle.log_path).read_text()


def test_crash_at_start_fails_within_seconds_with_log_tail_and_is_removed(
    client: docker.DockerClient, sim_image: str
) -> None:
    runner = DockerRunner(sim_docker_options(), client=client, run_id=run_id())
    handle = runner.start(sim_launch("--fail-startup", al=None))
    t0 = time.monotonic()
    try:
        with pytest.raises(ServerStartError, match="exited with exit code 1") as info:
            runner.wait_ready(handle)
        assert time.monotonic() - t0 < 10
        assert "--fail-startup" in info.value.log_tail
        assert handle.name is not None
        assert handle.name in str(info.value)
    finally:
        runner.stop(handle)
    assert gone(client, handle.id)
    assert not client.containers.list(all=True, filters={"label": f"{LABEL_RUN_ID}={runner.run_id}"})


KILLED_FLOW = """
import os, signal, sys
from alflow_infra.images import sim_docker_options
from alflow.frameworks.recipes import build_launch
from alflow_infra.runners import DockerRunner
from alflow.config import server_config
launch = build_launch(server_config(framework="sim", model="m", host="127.0.0.1", extra_args=("--time-scale", "0")))
handle = DockerRunner(sim_docker_options(), run_id=sys.argv[1]).start(launch)
print(handle.id, flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # killed before its finally: the container stays
"""


def cleanup_cli(*args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "alflow_infra.cli", "cleanup", "--json", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out: dict[str, Any] = json.loads(done.stdout)
    return out


def test_killed_flow_leaves_a_container_that_cleanup_removes(
    client: docker.DockerClient, sim_image: str
) -> None:
    rid = run_id()
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_FLOW, rid], capture_output=True, text=True, timeout=60, check=False
    )
    assert killed.returncode == -9, killed.stderr
    container_id = killed.stdout.strip()
    assert client.containers.get(container_id).status == "running"

    young = cleanup_cli("--run-id", rid, "--older-than", "1h")
    assert [(c["id"], c["selected"], c["removed"]) for c in young["containers"]] == [
        (container_id, False, False)
    ]
    dry = cleanup_cli("--run-id", rid, "--older-than", "0", "--dry-run")
    assert [(c["id"], c["selected"], c["removed"]) for c in dry["containers"]] == [
        (container_id, True, False)
    ]
    assert not gone(client, container_id)

    done = cleanup_cli("--run-id", rid, "--older-than", "0s")
    assert [(c["id"], c["removed"]) for c in done["containers"]] == [(container_id, True)]
    assert done["containers"][0]["run_id"] == rid
    assert gone(client, container_id)


def archive_text(container: Any, path: str) -> str:
    stream, _ = container.get_archive(path)
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
        member = tar.extractfile(Path(path).name)
        assert member is not None
        return member.read().decode()


def test_gpu_device_requests_and_container_config(
    client: docker.DockerClient, sim_image: str, tmp_path: Path
) -> None:
    secret = "hf_e2eSecretValue42"
    launch = build_launch(
        server_config(
            framework="trtllm",
            model="org/model",
            image=SIM_IMAGE,
            speculative=SpeculativeConfig(method="mtp", k=3),
            synthetic=SyntheticAcceptance(target_al=2.78),
        )
    )
    opts = DockerOptions(pull="never", model_cache=str(tmp_path), labels={"team": "perf"})
    runner = DockerRunner(opts, client=client, run_id=run_id(), secret_source={"HF_TOKEN": secret}.get)
    handle = runner.create(launch)  # created, not started: no GPU needed to inspect it
    try:
        attrs = client.containers.get(handle.id).attrs
        host = attrs["HostConfig"]
        (request,) = host["DeviceRequests"]
        assert request["Count"] == -1
        assert request["Capabilities"] == [["gpu"]]
        assert host["IpcMode"] == "host"
        assert host["NetworkMode"] == "host"
        assert f"{tmp_path}:/root/.cache/huggingface:rw" in host["Binds"]
        config = attrs["Config"]
        assert config["Entrypoint"] == ["trtllm-serve"]
        assert config["Cmd"] == list(launch.argv[1:])
        assert "TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS=1.78" in config["Env"]
        assert f"HF_TOKEN={secret}" in config["Env"]  # the container gets the secret ...
        assert secret not in json.dumps(dump_row(handle))  # ... the handle and provenance never do
        assert handle.provenance.secrets_passed == ["HF_TOKEN"]  # only its name
        assert config["Labels"]["team"] == "perf"
        assert config["Labels"][LABEL_RUN_ID] == runner.run_id
        text = archive_text(client.containers.get(handle.id), "/alflow/extra-llm-api-options.yaml")
        assert yaml.safe_load(text)["speculative_config"]["decoding_type"] == "MTP"
        assert text == launch.files[0].content
    finally:
        runner.stop(handle)
    assert gone(client, handle.id)

    ids = DockerRunner(
        DockerOptions(gpus=("0", "2"), ipc_mode=None, shm_size="1g", pull="never", model_cache=None),
        client=client,
        run_id=run_id(),
    )
    handle = ids.create(launch)
    try:
        host = client.containers.get(handle.id).attrs["HostConfig"]
        (request,) = host["DeviceRequests"]
        assert request["DeviceIDs"] == ["0", "2"]
        assert request["Capabilities"] == [["gpu"]]
        assert host["ShmSize"] == 1024**3
        assert host["IpcMode"] != "host"
    finally:
        ids.stop(handle)
    assert gone(client, handle.id)


def test_secret_values_never_reach_logs_from_the_runner(
    client: docker.DockerClient, sim_image: str, tmp_path: Path
) -> None:
    secret = "hf_anotherSecret987"
    port = free_port()
    script = "import os, time; print('token', os.environ['HF_TOKEN'], flush=True); time.sleep(60)"
    launch = Launch(
        framework="probe",
        dialect="vllm",
        model="m",
        argv=(sys.executable, "-c", script),
        port=port,
        host="127.0.0.1",
        image=SIM_IMAGE,
    )
    # PID 1 in a container ignores SIGTERM unless it handles it: a short stop timeout, then SIGKILL
    options = sim_docker_options(stop_timeout_s=1.0, log_dir=str(tmp_path))
    runner = DockerRunner(options, client=client, run_id=run_id(), secret_source={"HF_TOKEN": secret}.get)
    handle = runner.start(launch)
    try:
        deadline = time.monotonic() + 10
        while "token" not in runner.logs(handle) and time.monotonic() < deadline:
            time.sleep(0.1)
        logs = runner.logs(handle)
        assert "token ***" in logs
        assert secret not in logs
        with pytest.raises(ServerStartError) as info:
            runner.wait_ready(handle, timeout_s=0.5)  # nothing listens: the failure carries redacted logs
        assert secret not in str(info.value)
    finally:
        runner.stop(handle)
    assert gone(client, handle.id)
    saved = Path(str(handle.log_path)).read_text()
    assert "token ***" in saved
    assert secret not in saved


def test_missing_image_with_pull_never_is_a_clear_error(client: docker.DockerClient) -> None:
    runner = DockerRunner(DockerOptions(pull="never", gpus="none"), client=client, run_id=run_id())
    launch = build_launch(server_config(framework="vllm", model="m", image="alflow-no-such-image:0"))
    with pytest.raises(RunnerError, match="not present locally and pull='never'"):
        runner.start(launch)


def test_a_container_that_cannot_start_is_removed(client: docker.DockerClient, sim_image: str) -> None:
    """Here dockerd has no GPU runtime: starting with a GPU request fails, and nothing is left."""
    if "nvidia" in (client.info().get("Runtimes") or {}):
        pytest.skip("this engine has an NVIDIA runtime: a GPU request would start")
    runner = DockerRunner(
        sim_docker_options(gpus="all"),
        client=client,
        run_id=run_id(),
    )
    with pytest.raises(RunnerError, match="cannot start container"):
        runner.start(sim_launch(al=None))
    assert not client.containers.list(all=True, filters={"label": f"{LABEL_RUN_ID}={runner.run_id}"})


def test_lifecycle_with_docker_options_stops_from_a_fresh_runner(
    client: docker.DockerClient, sim_image: str
) -> None:
    """start_server/stop_server: the handle alone (plain data) is enough to stop the container later."""
    options = sim_docker_options()
    config = server_config(
        framework="sim", model="m", host="127.0.0.1", readiness_timeout_s=30, extra_args=("--time-scale", "0")
    )
    rid = run_id()
    handle = start_server(config, options, run_id=rid)
    # as if it came back from a task result: plain data, no live SDK object
    copy = ServerHandle(**json.loads(json.dumps(dump_row(handle))))
    try:
        assert copy == handle
        assert handle.provenance.run_id == rid
        assert client.containers.get(handle.id).status == "running"
    finally:
        stop_server(copy, options)
    assert gone(client, handle.id)


def test_a_run_holding_the_host_slot_reclaims_leftovers(client: docker.DockerClient, sim_image: str) -> None:
    """What a killed run left holds GPUs: the next run on the host removes it before starting."""
    from alflow.config import DockerOptions, ProcessOptions
    from alflow_infra.lifecycle import reclaim_host

    rid = run_id()
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_FLOW, rid], capture_output=True, text=True, timeout=60, check=False
    )
    assert killed.returncode == -9, killed.stderr
    container_id = killed.stdout.strip()
    assert reclaim_host(ProcessOptions()) == []
    assert not gone(client, container_id)
    removed = reclaim_host(DockerOptions(gpus="none"))
    assert len(removed) == 1
    assert gone(client, container_id)
