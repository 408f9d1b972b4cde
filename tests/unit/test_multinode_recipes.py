"""Multi-node configurations: recipes (one server across nodes, disaggregated prefill/decode), the
config's checks, GPU counting and the GPU layout flows use for per-GPU throughput."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest
from pydantic import ValidationError

from alflow.config import Parallelism, ServerConfig, SlurmOptions, server_config
from alflow.frameworks.launch import HEAD_ADDR, NODE_RANK, Launch, node_addr
from alflow.frameworks.recipes import ALL_ADDRESSES, build_launch
from alflow.methods.topology import gpu_layout, topology
from alflow.metrics.client import GpuLayout
from alflow_infra.errors import RecipeError
from alflow_infra.runners.slurm import JobInfo, SlurmRunner

pytestmark = pytest.mark.unit

MTP3 = {"method": "mtp", "k": 3}


def config(framework: str, **fields: object) -> ServerConfig:
    return server_config(
        {"framework": framework, "model": "org/moe", "port": 30000, "speculative": MTP3, **fields}
    )


def flag(argv: tuple[str, ...], name: str) -> str:
    return argv[argv.index(name) + 1]


# --- one server spanning nodes ------------------------------------------------------------------------


def test_sglang_spans_nodes_with_rank_and_head_placeholders() -> None:
    launch = build_launch(
        config("sglang", nodes=2, parallelism={"tp": 16, "ep": 16}), default_host=ALL_ADDRESSES
    )
    assert (launch.nodes, launch.gpus_per_node, launch.worker_argv, launch.mpi) == (2, 8, None, None)
    assert flag(launch.argv, "--nnodes") == "2"
    assert flag(launch.argv, "--node-rank") == NODE_RANK
    assert flag(launch.argv, "--dist-init-addr") == f"{HEAD_ADDR}:5000"
    custom = build_launch(
        config("sglang", nodes=2, parallelism={"tp": 16}, dist_init_port=20000), default_host=ALL_ADDRESSES
    )
    assert flag(custom.argv, "--dist-init-addr") == f"{HEAD_ADDR}:20000"
    single = build_launch(config("sglang", parallelism={"tp": 8}), default_host=ALL_ADDRESSES)
    assert "--nnodes" not in single.argv
    assert single.gpus_per_node == 8


def test_vllm_head_and_headless_workers() -> None:
    launch = build_launch(
        config("vllm", nodes=2, parallelism={"tp": 8, "pp": 2}, dist_init_port=29600),
        default_host=ALL_ADDRESSES,
    )
    assert launch.worker_argv is not None
    assert launch.worker_argv == (*launch.argv, "--headless")
    assert flag(launch.argv, "--node-rank") == NODE_RANK
    assert flag(launch.argv, "--master-addr") == HEAD_ADDR
    assert flag(launch.argv, "--master-port") == "29600"
    assert launch.gpus_per_node == 8
    with_extra = build_launch(
        config("vllm", nodes=2, parallelism={"tp": 16}, extra_args=("--enforce-eager",)),
        default_host=ALL_ADDRESSES,
    )
    assert with_extra.worker_argv is not None
    assert with_extra.worker_argv[-2:] == ("--headless", "--enforce-eager")
    assert with_extra.argv[-1] == "--enforce-eager"
    assert build_launch(config("vllm", parallelism={"tp": 8}), default_host=ALL_ADDRESSES).worker_argv is None


def test_vllm_data_parallel_across_nodes_is_refused() -> None:
    with pytest.raises(RecipeError, match=r"vLLM data parallelism across nodes \(dp=2, nodes=2\)"):
        build_launch(
            config("vllm", nodes=2, parallelism={"tp": 8, "dp": 2, "ep": 16}), default_host=ALL_ADDRESSES
        )


def test_trtllm_spans_nodes_as_an_mpi_launch() -> None:
    launch = build_launch(
        config("trtllm", nodes=2, parallelism={"tp": 16, "ep": 16}), default_host=ALL_ADDRESSES
    )
    assert launch.argv[:2] == ("trtllm-llmapi-launch", "trtllm-serve")
    assert (launch.mpi, launch.tasks_per_node, launch.gpus_per_node) == ("pmix", 8, 8)
    single = build_launch(config("trtllm", parallelism={"tp": 8, "dp": 8}), default_host=ALL_ADDRESSES)
    assert single.argv[0] == "trtllm-serve"
    assert (single.mpi, single.tasks_per_node, single.gpus_per_node) == (
        None,
        1,
        8,
    )  # attention DP: no extra GPUs


@pytest.mark.parametrize("framework", ["sglang", "vllm", "trtllm"])
def test_gpus_that_do_not_split_evenly_over_the_nodes_are_refused(framework: str) -> None:
    with pytest.raises(RecipeError, match=r"uses 12 GPU\(s\) .* cannot be split evenly over 8 nodes"):
        build_launch(config(framework, nodes=8, parallelism={"tp": 12}), default_host=ALL_ADDRESSES)


@pytest.mark.parametrize(
    ("framework", "flag_name"),
    [
        ("sglang", "--node-rank"),
        ("sglang", "--dist-init-addr"),
        ("vllm", "--headless"),
        ("vllm", "--master-addr"),
    ],
)
def test_extra_args_may_not_set_the_node_flags(framework: str, flag_name: str) -> None:
    with pytest.raises(RecipeError, match=f"extra_args repeats '{flag_name}'"):
        build_launch(config(framework, extra_args=(flag_name, "x")), default_host=ALL_ADDRESSES)


# --- disaggregated prefill/decode -----------------------------------------------------------------------

PD = {
    "prefill": {"nodes": 2, "parallelism": {"tp": 16}},
    "decode": {"replicas": 2, "parallelism": {"tp": 8, "dp": 8, "ep": 8}},
}


def test_sglang_disaggregated_groups_router_and_decode_endpoints() -> None:
    cfg = config(
        "sglang",
        port=8000,
        nodes=4,
        disaggregation={**PD, "router_args": ["--policy", "round_robin"]},
        extra_args=("--enable-dp-attention",),
        synthetic={"target_al": 2.5},
        image="lmsysorg/sglang:v0.5.16",
    )
    launch = build_launch(cfg, default_host=ALL_ADDRESSES)
    assert [(g.name, g.role, g.first_node, g.nodes, g.port) for g in launch.groups] == [
        ("prefill0", "prefill", 0, 2, 30000),
        ("decode0", "decode", 2, 1, 31000),
        ("decode1", "decode", 3, 1, 31001),
    ]
    prefill, decode0, _ = launch.groups
    assert flag(prefill.argv, "--disaggregation-mode") == "prefill"
    assert flag(prefill.argv, "--disaggregation-bootstrap-port") == "8998"
    assert flag(prefill.argv, "--nnodes") == "2"  # the 2-node prefill instance rendezvous at its own head
    assert flag(prefill.argv, "--dist-init-addr") == f"{HEAD_ADDR}:5000"
    assert flag(decode0.argv, "--disaggregation-mode") == "decode"
    assert "--nnodes" not in decode0.argv
    for group in launch.groups:
        assert flag(group.argv, "--disaggregation-transfer-backend") == "mooncake"
        assert group.argv[-1] == "--enable-dp-attention"
        assert flag(group.argv, "--speculative-algorithm") == "NEXTN"
    assert launch.argv == (
        "python3",
        "-m",
        "sglang_router.launch_router",
        "--pd-disaggregation",
        "--prefill",
        f"http://{node_addr(0)}:30000",
        "8998",
        "--decode",
        f"http://{node_addr(2)}:31000",
        "--decode",
        f"http://{node_addr(3)}:31001",
        "--host",
        "0.0.0.0",
        "--port",
        "8000",
        "--policy",
        "round_robin",
    )
    assert [(e.node, e.port) for e in launch.metrics_endpoints] == [(2, 31000), (3, 31001)]
    assert launch.env  # the synthetic knobs reach every step (exported by the job script)
    assert (launch.nodes, launch.gpus_per_node) == (4, 8)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"framework": "vllm"}, "vLLM's disaggregated prefill is experimental"),
        ({"framework": "trtllm"}, "trtllm-serve disaggregated"),
        ({"framework": "sim"}, "the simulator has no disaggregated mode"),
        ({"nodes": 3}, "nodes=3 but the disaggregated layout uses 4 node"),
        ({"parallelism": {"tp": 8}}, "parallelism is set per role"),
    ],
)
def test_disaggregation_config_is_checked(fields: Mapping[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        server_config({"framework": "sglang", "model": "m", "nodes": 4, "disaggregation": PD, **fields})


def test_disaggregated_ports_must_not_collide() -> None:
    with pytest.raises(ValidationError, match=r"prefill ports .* and decode ports .* overlap"):
        server_config(
            {
                "framework": "sglang",
                "model": "m",
                "nodes": 3,
                "disaggregation": {
                    "prefill": {"replicas": 2},
                    "decode": {},
                    "prefill_port": 30000,
                    "decode_port": 30001,
                },
            }
        )


def test_a_role_whose_gpus_do_not_split_over_its_nodes_is_refused() -> None:
    cfg = config(
        "sglang",
        nodes=3,
        disaggregation={
            "prefill": {"nodes": 2, "parallelism": {"tp": 3}},
            "decode": {"parallelism": {"tp": 8}},
        },
    )
    with pytest.raises(RecipeError, match=r"each prefill instance uses 3 GPU\(s\)"):
        build_launch(cfg, default_host=ALL_ADDRESSES)


# --- GPU counting and the layout flows use --------------------------------------------------------------


@pytest.mark.parametrize(
    ("framework", "par", "extra", "gpus"),
    [
        ("vllm", {"tp": 8, "dp": 2, "ep": 16}, (), 16),
        ("vllm", {"tp": 8, "pp": 2}, (), 16),
        ("sglang", {"tp": 8, "dp": 4}, (), 32),
        ("sglang", {"tp": 16, "dp": 8, "ep": 16}, ("--enable-dp-attention",), 16),
        ("trtllm", {"tp": 8, "dp": 8}, (), 8),
        ("tiny", {"tp": 1, "dp": 2}, (), 2),
    ],
)
def test_each_frameworks_variant_counts_gpus_by_its_rules_and_the_sim_by_its_dialects(
    framework: str, par: dict[str, int], extra: tuple[str, ...], gpus: int
) -> None:
    parallelism = Parallelism.model_validate(par)
    config = server_config(framework=framework, model="m", extra_args=extra)
    assert config.instance_gpus(parallelism) == gpus
    if framework != "tiny":
        sim = server_config(framework="sim", model="m", sim_dialect=framework, extra_args=extra)
        assert sim.instance_gpus(parallelism) == gpus
        assert sim.gpu_framework == framework


def test_gpu_layout_of_one_server_counts_every_nodes_gpus() -> None:
    two_nodes = config("sglang", nodes=2, parallelism={"tp": 16, "ep": 16})
    assert gpu_layout(two_nodes) == GpuLayout(tp=16, pp=1, dp=1, nodes=2)
    assert gpu_layout(two_nodes).gpus == 16
    assert topology(two_nodes) == {"nodes": 2, "gpus": 16, "prefill_gpus": None, "decode_gpus": None}
    assert gpu_layout(config("vllm", parallelism={"tp": 4, "dp": 2, "ep": 8})).gpus == 8
    assert gpu_layout(config("trtllm", parallelism={"tp": 8, "dp": 8})).gpus == 8
    sim = server_config(framework="sim", model="m", sim_dialect="trtllm", parallelism=Parallelism(tp=4, dp=4))
    assert gpu_layout(sim).gpus == 4  # the simulator counts like the dialect it speaks


def test_gpu_layout_of_a_disaggregated_server_splits_prefill_and_decode() -> None:
    cfg = config("sglang", nodes=4, disaggregation=PD)
    layout = gpu_layout(cfg)
    # prefill: one 16-GPU instance; decode: 2 instances of tp 8 x dp 8 (no dp attention here: 64 each)
    assert (layout.prefill_gpus, layout.decode_gpus) == (16, 128)
    assert cfg.total_gpus == layout.gpus == 144
    assert topology(cfg) == {"nodes": 4, "gpus": 144, "prefill_gpus": 16, "decode_gpus": 128}


# --- the Slurm runner's handle for a disaggregated launch -----------------------------------------------


class ThreeNodes:
    def submit(self, script_path: str, env: Mapping[str, str]) -> str:
        return "55"

    def job(self, job_id: str) -> JobInfo | None:
        return JobInfo(job_id=job_id, state="RUNNING", nodelist="g[1-3]")

    def hostnames(self, nodelist: str) -> list[str]:
        return ["g1", "g2", "g3"]

    def node_address(self, node: str) -> str | None:
        return {"g1": "10.1.0.1", "g2": "10.1.0.2", "g3": "10.1.0.3"}[node]

    def cancel(self, job_id: str) -> None:
        pass


def test_the_slurm_handle_of_a_disaggregated_server(tmp_path: Path) -> None:
    cfg = config(
        "sglang",
        port=8000,
        nodes=3,
        disaggregation={
            "prefill": {"parallelism": {"tp": 8}},
            "decode": {"replicas": 2, "parallelism": {"tp": 8}},
        },
    )
    launch: Launch = build_launch(cfg, default_host=ALL_ADDRESSES)
    runner = SlurmRunner(SlurmOptions(log_dir=str(tmp_path)), run_id="r", commands=ThreeNodes())
    handle = runner.start(launch)
    assert handle.base_url == "http://10.1.0.1:8000"  # the router on the first node
    assert handle.nodes == 3
    assert handle.metrics_urls == ("http://10.1.0.2:31000/metrics", "http://10.1.0.3:31001/metrics")
    assert handle.metrics_url == handle.metrics_urls[0]  # the router has no spec-decode counters
    script = Path(str(handle.provenance.slurm["script_path"])).read_text()  # type: ignore[index]
    assert "#SBATCH --gpus-per-node=8" in script
    assert "--relative=2" in script
