"""The multi-node contract in the single-host runners (process, docker) and the external runner.

Single-host runners fill the node placeholders for node 0 of 1 (head = the address the server reaches
itself at), refuse servers spanning several nodes with an error naming the slurm runner, and fill
``ServerHandle.metrics_urls`` from the Launch's metrics endpoints. The external runner takes several
metrics URLs from its config.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from pydantic import ValidationError

from alflow.config import DockerOptions, ExternalServer
from alflow.frameworks.launch import (
    HEAD_ADDR,
    NNODES,
    NODE_RANK,
    Launch,
    LaunchGroup,
    MetricsEndpoint,
    node_addr,
    single_host,
    single_host_metrics_urls,
    substitute_node,
)
from alflow_infra.errors import RunnerError
from alflow_infra.runners import DockerRunner, ExternalRunner, ProcessRunner
from alflow_infra.runners.docker import container_spec

PLACEHOLDER_ARGS = ("--nnodes", NNODES, "--node-rank", NODE_RANK, "--dist-init-addr", f"{HEAD_ADDR}:5000")


pytestmark = [pytest.mark.unit, pytest.mark.usefixtures("run_dirs_in_tmp_path")]


def launch(
    *, nodes: int = 1, host: str = "0.0.0.0", argv: tuple[str, ...] = ("serve",), **extra: Any
) -> Launch:
    return Launch(
        framework="sglang",
        dialect="sglang",
        model="m",
        argv=(*argv, *PLACEHOLDER_ARGS),
        port=30000,
        host=host,
        nodes=nodes,
        image="lmsysorg/sglang:v0.5.16",
        **extra,
    )


def test_single_host_fills_the_placeholders_for_node_0_of_1() -> None:
    filled = single_host(launch(), runner="process", head_addr="127.0.0.1")
    assert filled.argv == ("serve", "--nnodes", "1", "--node-rank", "0", "--dist-init-addr", "127.0.0.1:5000")
    assert substitute_node((f"http://{node_addr(0)}:1",), rank=0, head_addr="h", nnodes=1) == ("http://h:1",)


@pytest.mark.parametrize("runner", ["process", "docker"])
def test_single_host_refuses_several_nodes_and_names_the_slurm_runner(runner: str) -> None:
    with pytest.raises(RunnerError, match=rf"the {runner} runner .* spanning 2 nodes: use the slurm runner"):
        single_host(launch(nodes=2), runner=runner, head_addr="127.0.0.1")
    disaggregated = Launch(
        framework="sglang",
        dialect="sglang",
        model="m",
        argv=("router",),
        port=8000,
        nodes=2,
        groups=(
            LaunchGroup("prefill0", "prefill", 0, 1, ("p",), 30000),
            LaunchGroup("decode0", "decode", 1, 1, ("d",), 31000),
        ),
    )
    with pytest.raises(RunnerError, match="a disaggregated server: use the slurm runner"):
        single_host(disaggregated, runner=runner, head_addr="127.0.0.1")


def test_an_mpi_launch_is_refused_on_one_host() -> None:
    with pytest.raises(RunnerError, match="only the slurm runner starts it"):
        single_host(launch(mpi="pmix", tasks_per_node=8), runner="process", head_addr="127.0.0.1")


def test_single_host_metrics_urls_follow_the_endpoints_and_mapped_ports() -> None:
    with_endpoints = launch(metrics_endpoints=(MetricsEndpoint(0, 30000), MetricsEndpoint(0, 30001, "/m")))
    assert single_host_metrics_urls(with_endpoints, "127.0.0.1") == (
        "http://127.0.0.1:30000/metrics",
        "http://127.0.0.1:30001/m",
    )
    assert single_host_metrics_urls(with_endpoints, "h", {30001: 49000}) == (
        "http://h:30000/metrics",
        "http://h:49000/m",
    )
    assert single_host_metrics_urls(launch(), "h") == ()


def test_process_runner_refuses_a_multi_node_launch() -> None:
    with pytest.raises(RunnerError, match="use the slurm runner"):
        ProcessRunner().start(launch(nodes=2))


class _Image:
    id = "sha256:local"
    attrs: ClassVar[dict[str, Any]] = {"RepoDigests": []}


class _Images:
    def get(self, ref: str) -> _Image:
        return _Image()


class _Container:
    id = "c0ffee"


class _Containers:
    def __init__(self) -> None:
        self.spec: dict[str, Any] = {}

    def create(self, **spec: Any) -> _Container:
        self.spec = spec
        return _Container()


class _Api:
    base_url = "http+docker://localhost"


class _Client:
    def __init__(self) -> None:
        self.images = _Images()
        self.containers = _Containers()
        self.api = _Api()


def test_docker_runner_fills_the_placeholders_and_lists_metrics_urls() -> None:
    client = _Client()
    runner = DockerRunner(DockerOptions(gpus="none"), client=client)  # type: ignore[arg-type]
    handle = runner.create(launch(metrics_endpoints=(MetricsEndpoint(0, 30000),)))
    assert client.containers.spec["command"] == [
        "--nnodes",
        "1",
        "--node-rank",
        "0",
        "--dist-init-addr",
        "127.0.0.1:5000",
    ]
    assert handle.metrics_urls == ("http://127.0.0.1:30000/metrics",)
    assert handle.nodes == 1


def test_docker_runner_refuses_a_multi_node_launch_before_touching_the_engine() -> None:
    runner = DockerRunner(DockerOptions(gpus="none"), client=object())  # type: ignore[arg-type]
    with pytest.raises(RunnerError, match=r"the docker runner .* use the slurm runner"):
        runner.create(launch(nodes=2))


def test_bridge_networking_maps_every_metrics_port() -> None:
    spec = container_spec(
        launch(metrics_endpoints=(MetricsEndpoint(0, 30000), MetricsEndpoint(0, 30005))),
        DockerOptions(network="bridge", gpus="none"),
        image="img",
        run_id="r",
        secrets={},
        created_s=0,
        name="n",
    )
    assert spec["ports"] == {"30000/tcp": None, "30005/tcp": None}


def test_external_server_with_several_metrics_urls() -> None:
    urls = ("http://10.0.0.2:31000/metrics", "http://10.0.0.3:31000/metrics")
    handle = ExternalRunner(
        ExternalServer(base_url="http://10.0.0.1:8000", dialect="sglang", metrics_urls=urls)
    ).attach()
    assert handle.metrics_urls == urls
    assert handle.metrics_url == urls[0]
    assert handle.all_metrics_urls == urls
    one = ExternalRunner(ExternalServer(base_url="http://h:1", dialect="vllm")).attach()
    assert one.metrics_urls == ()
    assert one.all_metrics_urls == ("http://h:1/metrics",)


def test_external_metrics_urls_are_checked() -> None:
    with pytest.raises(ValidationError, match=r"give an http\(s\)://HOST"):
        ExternalServer(base_url="http://h:1", dialect="vllm", metrics_urls=("h:2/metrics",))
    with pytest.raises(ValidationError, match="is not among metrics_urls"):
        ExternalServer(
            base_url="http://h:1", dialect="vllm", metrics_url="http://x/m", metrics_urls=("http://y/m",)
        )
    ok = ExternalServer(
        base_url="http://h:1",
        dialect="vllm",
        metrics_url="http://y/m",
        metrics_urls=("http://x/m", "http://y/m"),
    )
    assert ExternalRunner(ok).attach().metrics_url == "http://y/m"


# --- Launch: the multi-node fields are checked where they are made -----------------------------------


def _group(name: str, first: int, nodes: int) -> LaunchGroup:
    return LaunchGroup(name, "decode", first, nodes, ("serve",), 31000)


@pytest.mark.parametrize(
    ("groups", "nodes", "message"),
    [
        ((_group("a", 0, 1), _group("b", 0, 1)), 2, "both run on node 0"),
        ((_group("a", 0, 1), _group("b", 1, 2)), 2, "runs on node 2 but the Launch spans 2"),
        ((_group("a", 0, 1),), 2, r"no launch group runs on node\(s\) \[1\]"),
        ((_group("a", 0, 1), _group("a", 1, 1)), 2, "names must be unique"),
    ],
)
def test_launch_groups_must_tile_the_nodes(groups: tuple[LaunchGroup, ...], nodes: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Launch(
            framework="sglang",
            dialect="sglang",
            model="m",
            argv=("router",),
            port=1,
            nodes=nodes,
            groups=groups,
        )


def test_launch_group_and_mpi_fields_are_checked() -> None:
    with pytest.raises(ValueError, match="must be a plain word"):
        LaunchGroup("bad name", "decode", 0, 1, ("serve",), 1)
    with pytest.raises(ValueError, match="needs a program"):
        LaunchGroup("g", "decode", 0, 1, (), 1)
    with pytest.raises(ValueError, match="needs an MPI launch"):
        launch(tasks_per_node=8)
    with pytest.raises(ValueError, match="must be >= 0"):
        node_addr(-1)
    with pytest.raises(ValueError, match="takes no mpi or worker_argv of its own"):
        Launch(
            framework="sglang",
            dialect="sglang",
            model="m",
            argv=("router",),
            port=1,
            nodes=1,
            worker_argv=("w",),
            groups=(_group("a", 0, 1),),
        )


def test_relocated_rewrites_worker_and_group_arguments() -> None:
    from alflow.frameworks.launch import LaunchFile

    base = Launch(
        framework="trtllm",
        dialect="trtllm",
        model="m",
        argv=("serve", "/alflow/x.yaml"),
        worker_argv=("work", "/alflow/x.yaml"),
        port=1,
        nodes=2,
        files=(LaunchFile("x.yaml", "a: 1\n"),),
    )
    moved = base.relocated("/jobs/1/files")
    assert moved.argv == ("serve", "/jobs/1/files/x.yaml")
    assert moved.worker_argv == ("work", "/jobs/1/files/x.yaml")
    assert moved.provenance().worker_argv == ["work", "/jobs/1/files/x.yaml"]
