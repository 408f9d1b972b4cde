"""Docker runner without a daemon: the container spec, launch-file archive, options, cleanup selection."""

from __future__ import annotations

import io
import json
import tarfile
from typing import Any

import pytest
from docker.types import DeviceRequest
from pydantic import ValidationError

from alflow.config import DockerOptions, SpeculativeConfig, SyntheticAcceptance, server_config
from alflow.frameworks.launch import Launch
from alflow.frameworks.recipes import build_launch
from alflow.util.rows import dump_row
from alflow_infra.cli import parse_duration
from alflow_infra.errors import RunnerError
from alflow_infra.runners import RUNNERS, DockerRunner, make_runner
from alflow_infra.runners.docker import (
    LABEL,
    LABEL_CREATED,
    LABEL_RUN_ID,
    cleanup_containers,
    container_spec,
    device_requests,
    files_archive,
    parse_volume,
)

pytestmark = pytest.mark.unit


def trtllm_launch() -> Launch:
    return build_launch(
        server_config(
            framework="trtllm",
            model="org/model",
            port=8000,
            speculative=SpeculativeConfig(method="mtp", k=3),
            synthetic=SyntheticAcceptance(target_al=2.78),
        )
    )


def spec(options: DockerOptions, secrets: dict[str, str] | None = None) -> dict[str, Any]:
    return container_spec(
        trtllm_launch(),
        options,
        image="nvcr.io/nvidia/tensorrt-llm/release:1.2.0",
        run_id="run-123",
        secrets=secrets or {},
        created_s=1_700_000_000,
        name="alflow-trtllm-x",
    )


def test_default_spec_gpus_all_ipc_host_host_network_labels() -> None:
    s = spec(DockerOptions(), {"HF_TOKEN": "hf_x"})
    assert s["entrypoint"] == ["trtllm-serve"]
    assert s["command"][:2] == ["org/model", "--host"]
    (req,) = s["device_requests"]
    assert isinstance(req, DeviceRequest)
    assert req["Count"] == -1
    assert req["Capabilities"] == [["gpu"]]
    assert s["ipc_mode"] == "host"
    assert "shm_size" not in s
    assert s["network_mode"] == "host"
    assert "ports" not in s
    assert s["labels"][LABEL] == "1"
    assert s["labels"][LABEL_RUN_ID] == "run-123"
    assert s["labels"][LABEL_CREATED] == "1700000000"
    assert s["environment"] == {"TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS": "1.78", "HF_TOKEN": "hf_x"}
    (cache_host,) = s["volumes"]
    assert cache_host.endswith("/.cache/huggingface")
    assert not cache_host.startswith("~")
    assert s["volumes"][cache_host] == {"bind": "/root/.cache/huggingface", "mode": "rw"}


def test_gpu_ids_shm_size_bridge_named_volume() -> None:
    opts = DockerOptions(
        gpus=("0", "GPU-3f2a"),
        ipc_mode=None,
        shm_size="32g",
        network="bridge",
        model_cache="hf-cache",
        volumes=("/data/models:/models:ro",),
        labels={"team": "perf"},
    )
    s = spec(opts)
    (req,) = s["device_requests"]
    assert req["DeviceIDs"] == ["0", "GPU-3f2a"]
    assert req["Capabilities"] == [["gpu"]]
    assert "Count" not in req or req["Count"] in (None, 0)
    assert s["shm_size"] == "32g"
    assert "ipc_mode" not in s
    assert s["ports"] == {"8000/tcp": None}
    assert "network_mode" not in s
    assert s["volumes"]["hf-cache"] == {"bind": "/root/.cache/huggingface", "mode": "rw"}
    assert s["volumes"]["/data/models"] == {"bind": "/models", "mode": "ro"}
    assert s["labels"]["team"] == "perf"


def test_no_gpus() -> None:
    assert device_requests("none") == []
    assert spec(DockerOptions(gpus="none"))["device_requests"] == []


def test_options_validation() -> None:
    with pytest.raises(ValidationError, match="not both"):
        DockerOptions(ipc_mode="host", shm_size="1g")
    with pytest.raises(ValidationError, match="empty list"):
        DockerOptions(gpus=())
    with pytest.raises(RunnerError, match="HOST:CONTAINER"):
        parse_volume("/only-one-part")
    with pytest.raises(RunnerError, match="HOST:CONTAINER"):
        parse_volume("/a:/b:rx")


def test_files_archive_holds_the_yaml_under_files_dir() -> None:
    launch = trtllm_launch()
    data = files_archive(launch.files, launch.files_dir)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        names = tar.getnames()
        assert names == ["alflow", "alflow/extra-llm-api-options.yaml"]
        member = tar.extractfile("alflow/extra-llm-api-options.yaml")
        assert member is not None
        assert member.read().decode() == launch.files[0].content


def test_registry_and_make_runner() -> None:
    assert set(RUNNERS) == {"process", "docker", "external", "slurm"}
    runner = make_runner(DockerOptions(gpus="none"), run_id="r1")
    assert isinstance(runner, DockerRunner)
    assert runner.run_id == "r1"


class FakeContainer:
    def __init__(self, cid: str, created: str | None, run_id: str = "r") -> None:
        labels = {LABEL: "1", LABEL_RUN_ID: run_id}
        if created is not None:
            labels[LABEL_CREATED] = created
        self.id = cid
        self.name = f"alflow-{cid}"
        self.status = "running"
        self.labels = labels
        self.attrs = {"Config": {"Labels": labels}}


class FakeApi:
    def __init__(self) -> None:
        self.removed: list[str] = []

    def remove_container(self, cid: str, force: bool, v: bool) -> None:
        assert force
        assert v
        self.removed.append(cid)


class FakeContainers:
    def __init__(self, items: list[FakeContainer]) -> None:
        self.items = items
        self.filters: Any = None

    def list(self, all: bool, filters: Any) -> list[FakeContainer]:  # noqa: A002 - docker SDK keyword
        assert all
        self.filters = filters
        return self.items


class FakeClient:
    def __init__(self, items: list[FakeContainer]) -> None:
        self.api = FakeApi()
        self.containers = FakeContainers(items)


def test_cleanup_selects_by_age_and_honours_dry_run() -> None:
    now = 10_000.0
    items = [FakeContainer("old", "1000"), FakeContainer("new", "9990"), FakeContainer("nolabel", None)]
    client = FakeClient(items)
    dry = cleanup_containers(client, older_than_s=60, dry_run=True, now_s=now)  # type: ignore[arg-type]
    assert client.api.removed == []
    assert [(e.id, e.selected, e.removed) for e in dry] == [
        ("nolabel", True, False),
        ("old", True, False),
        ("new", False, False),
    ]
    done = cleanup_containers(client, older_than_s=60, run_id="r", now_s=now)  # type: ignore[arg-type]
    assert sorted(client.api.removed) == ["nolabel", "old"]
    assert {e.id: e.removed for e in done} == {"old": True, "new": False, "nolabel": True}
    assert client.containers.filters == {"label": [f"{LABEL}=1", f"{LABEL_RUN_ID}=r"]}


@pytest.mark.parametrize(
    ("text", "seconds"), [("90", 90), ("90s", 90), ("10m", 600), ("2h", 7200), ("1d", 86400), ("0", 0)]
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_parse_duration_rejects_garbage() -> None:
    import typer

    with pytest.raises(typer.BadParameter):
        parse_duration("soon")


class FakeImage:
    def __init__(self, image_id: str, digests: list[str]) -> None:
        self.id = image_id
        self.attrs = {"RepoDigests": digests}


class FakeImages:
    def __init__(self, present: bool) -> None:
        self.present = present
        self.pulled: list[str] = []

    def get(self, ref: str) -> FakeImage:
        import docker.errors

        if not self.present:
            raise docker.errors.ImageNotFound(ref)
        return FakeImage("sha256:local", [])

    def pull(self, ref: str) -> FakeImage:
        self.pulled.append(ref)
        self.present = True
        return FakeImage("sha256:pulled", [f"{ref.split(':', maxsplit=1)[0]}@sha256:feed"])


class ImageClient:
    def __init__(self, present: bool) -> None:
        self.images = FakeImages(present)


@pytest.mark.parametrize(
    ("policy", "present", "pulled", "digest"),
    [
        ("always", True, True, "vllm/vllm-openai@sha256:feed"),
        ("missing", True, False, "sha256:local"),
        ("missing", False, True, "vllm/vllm-openai@sha256:feed"),
        ("never", True, False, "sha256:local"),
    ],
)
def test_pull_policy_and_recorded_digest(policy: str, present: bool, pulled: bool, digest: str) -> None:
    client = ImageClient(present)
    runner = DockerRunner(DockerOptions(pull=policy), client=client)  # type: ignore[arg-type]
    _, recorded = runner.ensure_image("vllm/vllm-openai:v0.11.0")
    assert client.images.pulled == (["vllm/vllm-openai:v0.11.0"] if pulled else [])
    assert recorded == digest


def test_pull_never_without_the_image_is_an_error() -> None:
    runner = DockerRunner(DockerOptions(pull="never"), client=ImageClient(False))  # type: ignore[arg-type]
    with pytest.raises(RunnerError, match="pull='never'"):
        runner.ensure_image("vllm/vllm-openai:v0.11.0")


def test_docker_runner_needs_an_image() -> None:
    launch = Launch(framework="x", dialect="vllm", model="m", argv=("a",), port=1)
    with pytest.raises(RunnerError, match="needs an image"):
        DockerRunner(client=ImageClient(True)).create(launch)  # type: ignore[arg-type]


class RecordingContainers:
    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []

    def create(self, **spec: Any) -> FakeContainer:
        self.created.append(spec)
        return FakeContainer("c0ffee", "1")


class CreatingClient(ImageClient):
    def __init__(self) -> None:
        super().__init__(present=True)
        self.containers = RecordingContainers()
        self.api = FakeApi()  # a local engine (no tcp base_url)


def test_secrets_reach_the_container_environment_and_only_their_names_the_provenance() -> None:
    secret = "hf_UnitDockerSecret77"
    client = CreatingClient()
    options = DockerOptions(
        pull="never", gpus="none", model_cache=None, secrets=("HF_TOKEN", "WANDB_API_KEY")
    )
    runner = DockerRunner(options, client=client, secret_source={"HF_TOKEN": secret}.get)  # type: ignore[arg-type]
    launch = build_launch(
        server_config(framework="vllm", model="org/m", image="vllm/vllm-openai:v0.11.0", port=8000)
    )
    handle = runner.create(launch)
    (created,) = client.containers.created
    assert created["environment"]["HF_TOKEN"] == secret  # the server gets the value ...
    assert "WANDB_API_KEY" not in created["environment"]  # (a secret the source does not know is not passed)
    assert handle.provenance.secrets_passed == ["HF_TOKEN"]  # ... the provenance its name only
    assert secret not in json.dumps(dump_row(handle))


def test_the_images_version_label_is_kept_for_the_live_gate() -> None:
    """A server that reports no version is gated on its image's OCI version label (alflow_infra.lifecycle)."""
    client = ImageClient(True)
    runner = DockerRunner(DockerOptions(pull="missing"), client=client)  # type: ignore[arg-type]
    image = client.images.get("any")
    image.attrs["Config"] = {"Labels": {"org.opencontainers.image.version": "1.3.0rc12"}}
    client.images.get = lambda ref: image  # type: ignore[method-assign]
    runner.ensure_image("nvcr.io/nvidia/tensorrt-llm/release:latest")
    assert runner._image_versions["nvcr.io/nvidia/tensorrt-llm/release:latest"] == "1.3.0rc12"
