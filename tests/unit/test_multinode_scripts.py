"""Server configurations to sbatch scripts, pinned (issue 10 acceptance), and run with stand-in programs.

Each case goes the whole way a run goes: a :class:`~alflow.config.ServerConfig` through its recipe to a
Launch, relocated the way the Slurm runner relocates launch files, rendered with
:func:`~alflow_infra.runners.slurm.render_script`, and compared with a golden file under
``tests/unit/golden/`` (update deliberately with ``ALFLOW_UPDATE_GOLDEN=1``, then review the diff).
The representative configurations: one node with 8 GPUs; 2 nodes x 8 GPUs tensor/expert parallel
(SGLang and vLLM); TensorRT-LLM on 2 nodes as an MPI launch; SGLang with 1 prefill + 2 decode nodes.
"""

from __future__ import annotations

import pytest

from alflow.config import ServerConfig, SlurmOptions, server_config
from alflow.frameworks.launch import Launch
from alflow.frameworks.recipes import ALL_ADDRESSES, build_launch
from alflow_infra.runners.slurm import render_script
from tests.unit.golden import assert_golden

pytestmark = pytest.mark.unit

JOB_DIR = "/shared/alflow/jobs/run1"
LOG = f"{JOB_DIR}/server.log"
COMMENT = "alflow-run:run1"
MTP3 = {"method": "mtp", "k": 3}


def config(**fields: object) -> ServerConfig:
    return server_config({"model": "deepseek-ai/DeepSeek-V3", "port": 30000, "speculative": MTP3, **fields})


def render(cfg: ServerConfig, options: SlurmOptions) -> tuple[Launch, str]:
    launch = build_launch(cfg, default_host=ALL_ADDRESSES)
    if launch.files:  # as SlurmRunner.start does: files in the job directory, argv rewritten
        launch = launch.relocated(f"{JOB_DIR}/files")
    mounts = (f"{JOB_DIR}:{JOB_DIR}",) if options.container_image else ()
    return launch, render_script(launch, options, log_path=LOG, extra_mounts=mounts, comment=COMMENT)


SGLANG_IMAGE = "lmsysorg/sglang:v0.5.16"
CASES = {
    "sglang_1node_8gpu": (
        config(framework="sglang", image=SGLANG_IMAGE, parallelism={"tp": 8}),
        SlurmOptions(partition="gpu", time_limit="01:00:00", modules=("cuda/12.4",)),
    ),
    "sglang_2node_8gpu_tp16_ep16": (
        config(
            framework="sglang",
            image=SGLANG_IMAGE,
            nodes=2,
            parallelism={"tp": 16, "ep": 16},
            extra_env={"NCCL_DEBUG": "WARN"},
        ),
        SlurmOptions(
            partition="gpu",
            account="spec-decode",
            time_limit="04:00:00",
            container_image=SGLANG_IMAGE,
            container_mounts=("/models:/root/.cache/huggingface:ro",),
            extra_sbatch_args=("--exclusive",),
        ),
    ),
    "vllm_2node_8gpu_tp16_ep16": (
        config(framework="vllm", nodes=2, parallelism={"tp": 16, "ep": 16}),
        SlurmOptions(partition="gpu", time_limit="04:00:00", modules=("cuda/12.4",)),
    ),
    "trtllm_2node_8gpu_mpi": (
        config(framework="trtllm", nodes=2, parallelism={"tp": 16, "ep": 16}),
        SlurmOptions(
            partition="gpu",
            time_limit="04:00:00",
            container_image="nvcr.io/nvidia/tensorrt-llm/release:1.1.0",
        ),
    ),
    "sglang_1prefill_2decode": (
        config(
            framework="sglang",
            image=SGLANG_IMAGE,
            port=8000,
            nodes=3,
            disaggregation={
                "prefill": {"parallelism": {"tp": 8}},
                "decode": {"replicas": 2, "parallelism": {"tp": 8}},
                "transfer_backend": "nixl",
            },
        ),
        SlurmOptions(partition="gpu", time_limit="04:00:00", extra_sbatch_args=("--exclusive",)),
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_rendered_script_is_pinned(name: str) -> None:
    cfg, options = CASES[name]
    _, script = render(cfg, options)
    assert_golden(f"slurm_{name}.sbatch", script)


def test_the_pinned_cases_request_what_their_parallelism_needs() -> None:
    scripts = {name: render(*CASES[name])[1] for name in CASES}
    assert (
        "#SBATCH --nodes=1\n#SBATCH --ntasks-per-node=1\n#SBATCH --gpus-per-node=8\n"
        in scripts["sglang_1node_8gpu"]
    )
    for name in ("sglang_2node_8gpu_tp16_ep16", "vllm_2node_8gpu_tp16_ep16"):
        assert "#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n#SBATCH --gpus-per-node=8\n" in scripts[name]
    trt = scripts["trtllm_2node_8gpu_mpi"]
    assert "#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=8\n#SBATCH --gpus-per-node=8\n" in trt
    assert (
        "exec srun --nodes=2 --ntasks=16 --ntasks-per-node=8 --kill-on-bad-exit=1 \\\n    --mpi=pmix \\\n"
        in trt
    )
    assert "trtllm-llmapi-launch trtllm-serve deepseek-ai/DeepSeek-V3" in trt
    assert f"--config {JOB_DIR}/files/extra-llm-api-options.yaml" in trt
    pd = scripts["sglang_1prefill_2decode"]
    assert "#SBATCH --nodes=3\n" in pd
    assert pd.count("srun --nodes=1 --ntasks=1 --ntasks-per-node=1 --relative=") == 4  # router, 1 P, 2 D
    assert "--relative=0 --kill-on-bad-exit=1 \\\n    --overlap \\\n" in pd  # the router shares node 0


def test_the_disaggregated_launch_scrapes_every_decode_instance() -> None:
    launch, _ = render(*CASES["sglang_1prefill_2decode"])
    assert [(g.name, g.first_node, g.nodes, g.port) for g in launch.groups] == [
        ("prefill0", 0, 1, 30000),
        ("decode0", 1, 1, 31000),
        ("decode1", 2, 1, 31001),
    ]
    assert [(e.node, e.port, e.path) for e in launch.metrics_endpoints] == [
        (1, 31000, "/metrics"),
        (2, 31001, "/metrics"),
    ]
    assert launch.port == 8000
    assert launch.argv[:4] == ("python3", "-m", "sglang_router.launch_router", "--pd-disaggregation")
