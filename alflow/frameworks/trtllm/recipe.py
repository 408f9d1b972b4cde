"""TensorRT-LLM: ``trtllm-serve MODEL --config FILE.yaml ...`` (DOMAIN.md sections 3, 4 and 8).

- Image ``nvcr.io/nvidia/tensorrt-llm/release``.
- A generated YAML (LLM API options) mounted into the container: ``speculative_config`` with
  ``decoding_type`` MTP / Eagle3 / NGram / DraftTarget and ``max_draft_len`` K (MTP also
  ``num_nextn_predict_layers`` K; Eagle3 and DraftTarget ``speculative_model``); always
  ``enable_iter_perf_stats: true`` and ``return_perf_metrics: true`` (without the latter there is
  no ``/prometheus/metrics``); prefix caching off: ``kv_cache_config: {enable_block_reuse: false}``.
- Flags ``--tp_size``, ``--pp_size``, ``--ep_size``, ``--max_seq_len``; data parallelism is attention
  DP (``enable_attention_dp: true``, size = TP).
- Synthetic acceptance: ``TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS = AL - 1`` from the knob
  renderer, which refuses a fractional value on the two-model path (NGram, or a drafter with
  ``two_model: true``), where it would switch the feature off with only a log warning. DraftTarget is a
  one-engine drafter by default since PR #11758, so its fractions are allowed (gated).
- Multi-node (``nodes > 1``): an MPI launch, ``srun --mpi=pmix`` with one task per GPU running
  ``trtllm-llmapi-launch trtllm-serve ...`` (``Launch.mpi``, ``Launch.tasks_per_node``); TP x PP GPUs
  split evenly over the nodes.
- Prometheus text at ``/prometheus/metrics`` (``/metrics`` is JSON and drains on each read);
  ``trtllm_speculative_config_info`` there says which speculative method ran (``spec_method``,
  ``spec_num_tokens``); ``GET /version`` -> ``{"version": ...}`` (tensorrt_llm/serve/openai_server.py).
- Release gates (:mod:`alflow.frameworks.versions`): every speculative run reads AL from the per-position counters of
  v1.3.0rc19 (PR #12636); a fractional forced value needs the float parser of
  PR #13569 (one-model path; older images parse it as an integer on every path, log a warning and
  switch the feature off); DFlash needs v1.3.0rc14. DSpark is not gated (its first tag is not pinned;
  an older image refuses the decoding type at start).
- Block drafters: ``decoding_type`` ``DSpark`` / ``DFlash`` with ``speculative_model`` and
  ``max_draft_len`` K (DSpark's K must equal the checkpoint's ``dspark_block_size``).
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml

from alflow.acceptance.knobs import SyntheticKnobs
from alflow.acceptance.runtime_k import KnobSpec, RuntimeKKnob
from alflow.config import ServerConfig, SpecMethod
from alflow.errors import RecipeError
from alflow.frameworks.launch import DEFAULT_FILES_DIR, Launch, LaunchFile
from alflow.frameworks.recipe_kit import (
    LaunchRecipe,
    bind_host_of,
    check_extra_args,
    find_runtime_k,
    flag_value,
    gpus_per_node,
    image_gate,
    merge_env,
    method_name,
    parallel_args,
    refuse_vllm_only_fields,
    render_synthetic,
    resolve_port,
)
from alflow.frameworks.sim_source import SimSource
from alflow.frameworks.trtllm.knobs import TRTLLM_ENV
from alflow.frameworks.trtllm.names import (
    TRTLLM_METRICS_PATH,
    TRTLLM_PER_POSITION_RELEASE,
    TRTLLM_PER_POSITION_SOURCE,
)
from alflow.frameworks.versions import Capability, version
from alflow.util.rows import dump_row

TRTLLM_IMAGE = "nvcr.io/nvidia/tensorrt-llm/release:latest"
TRTLLM_OPTIONS_FILE = "extra-llm-api-options.yaml"
TRTLLM_LAUNCHER = "trtllm-llmapi-launch"
"""Wraps ``trtllm-serve`` in a multi-node MPI launch (one task per GPU)."""
TRTLLM_MPI = "pmix"
"""The ``srun --mpi`` plugin of a multi-node TensorRT-LLM launch."""
TRTLLM_DECODING_TYPES: dict[SpecMethod, str] = {
    SpecMethod.MTP: "MTP",
    SpecMethod.EAGLE3: "Eagle3",
    SpecMethod.NGRAM: "NGram",
    SpecMethod.DRAFT_MODEL: "DraftTarget",
    SpecMethod.DSPARK: "DSpark",
    SpecMethod.DFLASH: "DFlash",
}
TRTLLM_VERSION_PATHS = ("/version",)
"""``GET /version`` -> ``{"version": VERSION}`` (tensorrt_llm/serve/openai_server.py, ``register_routes``)."""
TRTLLM_FRACTIONAL = Capability(
    framework="TensorRT-LLM",
    feature=f"a fractional {TRTLLM_ENV} (get_force_num_accepted_tokens_float, one-model path)",
    minimum=version("1.3.0rc15"),
    source=(
        "NVIDIA/TensorRT-LLM PR #13569, merged as a13c19b about 2026-05-06; v1.3.0rc14 was tagged 2026-05-07 "
        "and is not verified to contain it, so the first release counted is v1.3.0rc15"
    ),
    consequence=(
        "an older image parses the value as an integer on every path: a warning in the server log and "
        "synthetic acceptance OFF, so the run would measure real acceptance and call it synthetic"
    ),
)
TRTLLM_EXACT_AL = Capability(
    framework="TensorRT-LLM",
    feature=(
        "the per-position spec-decode counters trtllm_spec_decode_drafted_tokens_total{token_position} and "
        "..._accepted_tokens_total{token_position} (the only input of alflow's exact AL)"
    ),
    minimum=version(TRTLLM_PER_POSITION_RELEASE),
    source=TRTLLM_PER_POSITION_SOURCE,
    consequence=(
        "an older image exposes only the iteration counters, drained at other times: no measurement window "
        "can read AL, so every M0/M1/M2 run would fail at its first window"
    ),
)
"""Needed by every speculative TensorRT-LLM run (each reads AL). Per-request perf metrics
(``request_perf_metrics.speculative_decoding``) were zero in the PyTorch flow until PR #17082 (merged
2026-07-31); alflow reads none of them (the per-position Prometheus counters come from the per-step vectors,
not from those totals), so no release floor is set for it."""
TRTLLM_DRAFT_TARGET_ONE_ENGINE = (
    "TensorRT-LLM builds DraftTarget as a one-engine external drafter by default (DRAFT_TARGET_ONE_MODEL, "
    "is_external_drafter() -> use_one_engine() in tensorrt_llm/_torch/speculative/interface.py; NVIDIA/TensorRT-LLM "
    "PR #11758), where a fractional forced value is read as a float; the PR's first release is not pinned here, so "
    "an image that still ran DraftTarget on the two-model path would read it as an integer and switch synthetic "
    "acceptance off: the pre-flight measures whether this image realises the fraction"
)
"""The warning of a fractional forced value with DraftTarget (no release gate: the first tag with PR #11758 is
not pinned, and every accepted image already has rc19's counters)."""
TRTLLM_DFLASH = Capability(
    framework="TensorRT-LLM",
    feature="the DFlash drafter (decoding_type DFlash)",
    minimum=version("1.3.0rc14"),
    source="NVIDIA/TensorRT-LLM PR #12794, in the v1.3.0rc14 release notes",
    consequence="an older image refuses the decoding type at start",
)
TRTLLM_RUNTIME_K: tuple[KnobSpec, ...] = (
    KnobSpec(
        "draft_len_schedule",
        "key",
        "TensorRT-LLM dynamic draft length: each iteration's draft length is chosen from the batch size "
        "(0 above the largest key: speculation off)",
        "NVIDIA/TensorRT-LLM PR #8194 (two-model), PR #10860 (one-model path), PR #12262 (every algorithm); "
        "speculative_config.draft_len_schedule, tensorrt_llm/_torch/speculative/drafter.py",
    ),
    KnobSpec(
        "max_concurrency",
        "key",
        "TensorRT-LLM: speculation off above this batch size (translated into a draft_len_schedule)",
        "NVIDIA/TensorRT-LLM PR #10860 and PR #16888; speculative_config.max_concurrency",
    ),
    *(
        KnobSpec(
            key,
            "key",
            "TensorRT-LLM's acceptance-rate gate: speculation off for good once the rolling acceptance rate over "
            "acceptance_rate_window_size requests drops below acceptance_rate_threshold",
            "NVIDIA/TensorRT-LLM PR #12905; speculative_config." + key + ", SpeculationGate in "
            "tensorrt_llm/_torch/pyexecutor/py_executor.py",
        )
        for key in ("acceptance_rate_window_size", "acceptance_rate_threshold")
    ),
)
"""TensorRT-LLM's runtime-varying-K keys of ``speculative_config`` (DOMAIN.md section 9). The options file is the
recipe's own (``--config`` / ``--extra_llm_api_options`` may not be repeated in extra_args), so they can only come
from what the recipe renders; JSON values in extra_args are searched as well."""
TRTLLM_MANAGED_FLAGS = frozenset(
    {
        "--host",
        "--port",
        "--config",
        "--extra_llm_api_options",
        "--tp_size",
        "--pp_size",
        "--ep_size",
        "--max_seq_len",
    }
)
"""Flags the TensorRT-LLM recipe sets from the config (extra_args may not repeat them)."""


@dataclass(frozen=True)
class TrtllmRecipe(LaunchRecipe):
    """The TensorRT-LLM recipe."""

    framework: str = "trtllm"
    default_image: str | None = TRTLLM_IMAGE
    metrics_path: str = TRTLLM_METRICS_PATH

    def decoding_type(self, method: SpecMethod) -> str:
        """TensorRT-LLM's ``decoding_type`` for ``method``, or a refusal naming the ones it has."""
        return method_name(
            "TensorRT-LLM",
            TRTLLM_DECODING_TYPES,
            method,
            "speculative_config decoding_type, tensorrt_llm/llmapi/llm_args.py",
        )

    def knobs(self, config: ServerConfig) -> SyntheticKnobs | None:
        """``TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS``; refuses two-model mode for a one-model method."""
        spec = config.speculative
        if config.two_model_choice() and spec is not None and spec.method is SpecMethod.MTP:
            raise RecipeError("TensorRT-LLM MTP has no two-model mode: drop two_model or use eagle3")
        if config.two_model_choice() and spec is not None and spec.method is SpecMethod.DRAFT_MODEL:
            raise RecipeError(
                "TensorRT-LLM DraftTarget runs as a one-engine external drafter (PR #11758) and alflow renders no "
                "switch to a two-model path for it: drop two_model"
            )
        return render_synthetic(config, self.framework)

    def speculative_label(self, config: ServerConfig) -> str | None:
        """The ``decoding_type`` the server reports in ``trtllm_speculative_config_info{spec_method}``."""
        return None if config.speculative is None else self.decoding_type(config.speculative.method)

    def knob_hints(self, config: ServerConfig) -> tuple[str, ...]:
        """Likely causes of a pre-flight failure on TensorRT-LLM."""
        del config
        return (
            f"an image before {TRTLLM_FRACTIONAL.minimum} parses a fractional {TRTLLM_ENV} as an integer: a "
            "warning in the server log and the feature off (PR #13569)",
            "the two-model path ran (ngram, EAGLE3 two-model, or a DraftTarget image before PR #11758's one-engine "
            "drafter): it parses the value as an integer (see trtllm_speculative_config_info and the server log)",
            f"{TRTLLM_ENV}=0 (target AL 1) means off",
        )

    def runtime_k(self, config: ServerConfig) -> tuple[RuntimeKKnob, ...]:
        """TensorRT-LLM's runtime-varying-K keys (:data:`TRTLLM_RUNTIME_K`), refused with synthetic acceptance.

        Looked for in the rendered options and ``extra_args``; with real acceptance they are returned for the
        launch to record.
        """
        rendered = self.options(config).get("speculative_config")
        mapping = rendered if isinstance(rendered, dict) else None
        return find_runtime_k(config, TRTLLM_RUNTIME_K, mapping, "the rendered speculative_config")

    def requirements(self, config: ServerConfig, knobs: SyntheticKnobs | None) -> tuple[Capability, ...]:
        """The releases this configuration needs: the AL counters, the float parser for a fractional value, DFlash."""
        needs: list[Capability] = []
        if knobs is not None and not float(knobs.env[TRTLLM_ENV]).is_integer():
            needs.append(TRTLLM_FRACTIONAL)
        if config.speculative is not None and config.speculative.method is SpecMethod.DFLASH:
            needs.append(TRTLLM_DFLASH)
        if config.speculative is not None:
            needs.append(TRTLLM_EXACT_AL)  # last: a knob's own refusal names the knob first
        return tuple(needs)

    def warnings(self, config: ServerConfig, knobs: SyntheticKnobs | None = None) -> tuple[str, ...]:
        """Things a reviewer should know about this configuration (not errors)."""
        spec = config.speculative
        if config.two_model_choice() and spec is not None and spec.method is SpecMethod.EAGLE3:
            return (
                "TensorRT-LLM is removing the EAGLE3 two-model path: recent versions set eagle3_one_model back "
                "to true with only a log warning, so check the server log for which path actually ran",
            )
        fractional = knobs is not None and not float(knobs.env[TRTLLM_ENV]).is_integer()
        if fractional and spec is not None and spec.method is SpecMethod.DRAFT_MODEL:
            return (TRTLLM_DRAFT_TARGET_ONE_ENGINE,)
        return ()

    def options(self, config: ServerConfig) -> dict[str, object]:
        """The LLM API options written to the YAML file given with ``--config``."""
        opts: dict[str, object] = {}
        spec = config.speculative
        if spec is not None:
            sc: dict[str, object] = {
                "decoding_type": self.decoding_type(spec.method),
                "max_draft_len": spec.k,
            }
            if spec.method is SpecMethod.MTP:
                sc["num_nextn_predict_layers"] = spec.k
            if spec.draft_model:
                sc["speculative_model"] = spec.draft_model
            if spec.method is SpecMethod.EAGLE3:
                sc["eagle3_one_model"] = not config.two_model_choice()
            if spec.method is SpecMethod.NGRAM and spec.prompt_lookup_max is not None:
                sc["max_matching_ngram_size"] = spec.prompt_lookup_max
            opts["speculative_config"] = sc
        opts["enable_iter_perf_stats"] = True
        opts["return_perf_metrics"] = True
        opts["kv_cache_config"] = {"enable_block_reuse": config.enable_prefix_caching}
        if config.parallelism.dp > 1:
            opts["enable_attention_dp"] = True
        if config.revision:
            opts["revision"] = config.revision
        return opts

    def build(self, config: ServerConfig) -> Launch:
        """``trtllm-serve`` with the generated options YAML and the knob in the environment."""
        par = config.parallelism
        if par.dp > 1 and par.dp != par.tp:
            raise RecipeError(
                f"TensorRT-LLM data parallelism is attention DP over the TP ranks: dp must equal tp "
                f"(got dp={par.dp}, tp={par.tp})"
            )
        if config.speculative is not None and config.speculative.prompt_lookup_min is not None:
            raise RecipeError(
                "TensorRT-LLM NGram has no minimum lookup window: prompt_lookup_min would be ignored; drop it"
            )
        check_extra_args(self.framework, config.extra_args, TRTLLM_MANAGED_FLAGS)
        refuse_vllm_only_fields(config, self.framework)
        runtime_k = self.runtime_k(config)
        knobs = self.knobs(config)
        requirements = self.requirements(config, knobs)
        image = config.image or self.default_image
        gate_warnings = image_gate(image, requirements)
        env = merge_env(knobs.env if knobs else {}, config.extra_env)
        port = resolve_port(config)
        options = LaunchFile(TRTLLM_OPTIONS_FILE, yaml.safe_dump(self.options(config), sort_keys=False))
        argv = ["trtllm-serve", config.model, "--host", bind_host_of(config), "--port", str(port)]
        argv += ["--config", f"{DEFAULT_FILES_DIR}/{options.name}"]
        argv += parallel_args(par, "--tp_size", "--pp_size", None, "--ep_size")
        argv += [*flag_value("--max_seq_len", config.max_model_len), *config.extra_args]
        per_node = gpus_per_node(config, par, config.nodes)
        if config.nodes > 1:
            argv = [TRTLLM_LAUNCHER, *argv]
        return self.launch(
            config,
            argv,
            port,
            env=env,
            files=(options,),
            warnings=self.warnings(config, knobs) + (knobs.warnings if knobs else ()),
            image_warnings=gate_warnings,
            synthetic=dump_row(knobs) if knobs else None,
            gpus_per_node=per_node,
            mpi=TRTLLM_MPI if config.nodes > 1 else None,
            tasks_per_node=per_node if config.nodes > 1 else 1,
            requirements=requirements,
            version_paths=TRTLLM_VERSION_PATHS,
            runtime_k=runtime_k,
        )

    def sim_source(self, config: ServerConfig) -> SimSource:
        """For the simulator in the TensorRT-LLM dialect: the same forced-count environment variable."""
        knobs = self.knobs(config)
        return SimSource(
            env=dict(knobs.env) if knobs else {},
            warnings=knobs.warnings if knobs else (),
            synthetic=dump_row(knobs) if knobs else None,
            requirements=self.requirements(config, knobs),
            version_paths=TRTLLM_VERSION_PATHS,
            runtime_k=self.runtime_k(config),
        )
