"""SGLang: ``python3 -m sglang.launch_server --model-path MODEL ...`` (DOMAIN.md sections 3 and 8).

- Image ``lmsysorg/sglang``.
- ``--speculative-algorithm`` NEXTN (built-in MTP heads), EAGLE3 and STANDALONE (with
  ``--speculative-draft-model-path``) or NGRAM; ``--speculative-num-steps K``,
  ``--speculative-eagle-topk 1``, ``--speculative-num-draft-tokens K+1``.
- ``--enable-metrics`` always (off by default in SGLang), ``--disable-radix-cache`` (prefix caching
  off), ``--tp-size`` always, ``--dp-size``/``--pp-size``/``--ep-size`` when above 1 (EP must equal TP),
  ``--context-length`` for the maximum length.
- Multi-node (``nodes > 1``): ``--nnodes N --node-rank RANK --dist-init-addr HEAD:PORT`` with the
  runner's node placeholders. Disaggregated (``disaggregation``): prefill and decode instances
  (``--disaggregation-mode``, ``--disaggregation-transfer-backend``, ``--disaggregation-bootstrap-port``)
  behind ``python3 -m sglang_router.launch_router --pd-disaggregation --prefill URL PORT --decode URL``.
- Synthetic acceptance: the ``SGLANG_SIMULATE_ACC_*`` environment from the knob renderer. The token
  mode variable is read only from v0.5.16: an older image tag (or live server) is refused (it would
  emit token id 100 for every output token), an unknown or ``latest`` tag gives a warning.
- Block drafters: ``DSPARK`` (``--speculative-dspark-block-size K``), ``DFLASH`` and ``DFLASH2``
  (``--speculative-num-draft-tokens K+1``; DFLASH2 from v0.5.19, PR #35371), with ``--speculative-draft-model-path`` when the config
  names a drafter. DSpark refuses ``SGLANG_SIMULATE_ACC_LEN > 1`` unless every verify step checks the
  whole block, so synthetic DSpark also sets ``SGLANG_RAGGED_VERIFY_MODE=static``. Fractional
  ``SGLANG_SIMULATE_ACC_LEN`` with DSpark was rounded by releases before PR #33463 (merged 2026-08):
  its first tag is not pinned, so that case is a warning here and the pre-flight measures it. DFlash honours
  ``SGLANG_SIMULATE_ACC_LEN`` from PR #32595 (one draw per verify step for the whole batch, as EAGLE): synthetic
  DFLASH needs v0.5.19 here (an older tag is refused, an unversioned one warns).
- ``GET /server_info`` (deprecated ``/get_server_info``) carries ``"version": __version__``: the live gate.
"""

from __future__ import annotations

from dataclasses import dataclass

from alflow.acceptance.knobs import SyntheticKnobs
from alflow.acceptance.runtime_k import KnobSpec, RuntimeKKnob
from alflow.config import Disaggregation, Parallelism, ServerConfig, SpecMethod
from alflow.errors import RecipeError
from alflow.frameworks.launch import HEAD_ADDR, NODE_RANK, Launch, LaunchGroup, MetricsEndpoint, node_addr
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
from alflow.frameworks.sglang.knobs import SGLANG_LEN_ENV, SGLANG_TOKEN_MODE_ENV
from alflow.frameworks.sglang.names import SGLANG_METRICS_PATH, SGLANG_SPEC_VERIFY_CALLS_SINCE
from alflow.frameworks.sim_source import SimSource
from alflow.frameworks.versions import Capability, version
from alflow.util.rows import dump_row

SGLANG_IMAGE = "lmsysorg/sglang:latest"
SGLANG_DIST_INIT_PORT = 5000
"""Rendezvous port on the head of a multi-node server when the config names none."""
SGLANG_ROUTER = ("python3", "-m", "sglang_router.launch_router")
"""The router (frontend) of a disaggregated server; it ships in the SGLang image."""
SGLANG_ALGORITHMS: dict[SpecMethod, str] = {
    SpecMethod.MTP: "NEXTN",
    SpecMethod.EAGLE3: "EAGLE3",
    SpecMethod.DRAFT_MODEL: "STANDALONE",
    SpecMethod.NGRAM: "NGRAM",
    SpecMethod.DSPARK: "DSPARK",
    SpecMethod.DFLASH: "DFLASH",
    SpecMethod.DFLASH2: "DFLASH2",
}
"""``--speculative-algorithm`` values (upper case, as SGLang spells the others; DFLASH2 is sgl-project/sglang
PR #35371, in the v0.5.19 release notes)."""
SYNTHETIC_ALGORITHMS = frozenset({"NEXTN", "EAGLE3", "STANDALONE", "DSPARK", "DFLASH", "DFLASH2"})
"""Algorithms where ``SGLANG_SIMULATE_ACC_LEN`` is known to apply: the EAGLE-family verify path, DSpark, and the
DFlash worker from PR #32595 (``apply_dflash_simulated_acceptance`` in speculative/dflash_utils.py, applied in
``forward_batch_generation`` after the full draft and verify compute; DFLASH2 runs on the same worker)."""
SGLANG_RAGGED_VERIFY_ENV = "SGLANG_RAGGED_VERIFY_MODE"
SGLANG_VERIFY_ALL = "static"
"""``SGLANG_RAGGED_VERIFY_MODE`` value that verifies the whole block every step (values: static, compact,
cap-accept): DSpark needs it for ``SGLANG_SIMULATE_ACC_LEN > 1``."""
SGLANG_RUNTIME_K: tuple[KnobSpec, ...] = (
    KnobSpec(
        "--speculative-adaptive",
        "flag",
        "SGLang adaptive speculative decoding: speculative_num_steps (and the verified draft tokens) switch at run "
        "time among candidate steps; the active values are the gauges sglang:spec_num_steps and "
        "sglang:spec_num_draft_tokens",
        "sgl-project/sglang PR #21599 (python/sglang/srt/server_args.py), gauges PR #25940",
    ),
    KnobSpec(
        SGLANG_RAGGED_VERIFY_ENV,
        "env",
        "SGLang ragged verify (DSpark confidence-scheduled verification): compact/cap-accept trim each request's "
        "verify window below the drafted block",
        "sgl-project/sglang python/sglang/srt/speculative/ragged_verify.py; PR #31434",
        off_values=frozenset({SGLANG_VERIFY_ALL}),
    ),
)
"""SGLang's runtime-varying-K switches (DOMAIN.md section 9); only ``static`` ragged verify checks the whole block."""
SGLANG_BALANCED_ROUTING_ENV = ("SGLANG_SIMULATE_UNIFORM_EXPERTS", "SGLANG_SIMULATE_ROUND_ROBIN_EXPERTS")
"""SGLang's simulated expert routing (``envs.SGLANG_SIMULATE_UNIFORM_EXPERTS`` / ``..._ROUND_ROBIN_EXPERTS`` in
``python/sglang/srt/environ.py``, read where the MoE layer picks each token's top-k experts, which refuses both at
once as "mutually exclusive"): every token goes to experts drawn uniformly or round-robin instead of the router's. Perfectly balanced experts cost less than a real run's skewed
routing (the fused top-k fast paths are switched off too), and the model no longer computes its own output:
refused in every flow, and never inherited by a launched server (the plugin's ``shortcut_env``)."""
SGLANG_LOSSY_THRESHOLDS = ("--speculative-accept-threshold-single", "--speculative-accept-threshold-acc")
"""SGLang's relaxed acceptance (``python/sglang/srt/server_args.py``, both default 1.0): ``single`` accepts a draft
token whose target probability exceeds it, ``acc`` raises a draft's accept probability from p to min(1, p / acc);
used by ``tree_speculative_sampling_target_only``. At any value but 1.0 the output no longer follows the target
model (lossy, like vLLM's ``fly``): refused with real acceptance (M0, M1), where it would inflate the AL that is
measured; synthetic acceptance replaces the accept decision after the kernel, so M2 is unaffected."""
SGLANG_VERSION_PATHS = ("/server_info", "/get_server_info")
"""Where SGLang says ``"version": __version__`` (python/sglang/srt/entrypoints/http_server.py)."""
SGLANG_TOKEN_MODE_CAP = Capability(
    framework="SGLang",
    feature=f"{SGLANG_TOKEN_MODE_ENV}=real-draft-token",
    minimum=version("0.5.16"),
    source=(
        "sgl-project/sglang PR #29645, merged 2026-07-01; v0.5.16 (2026-07-25) is the first release checked "
        "to read it (v0.5.15 of 2026-07-10 may, unverified)"
    ),
    consequence="an older image ignores it (silent no-op) and emits token id 100 for every output token",
)
SGLANG_VERIFY_CALLS_CAP = Capability(
    framework="SGLang",
    feature="the counter sglang:spec_verify_calls_total (the verify steps of alflow's counter AL)",
    minimum=version("0.5.15"),
    source=(
        f"{SGLANG_SPEC_VERIFY_CALLS_SINCE}; v0.5.15 (2026-07-10) is the first release checked to contain it "
        "(an earlier tag after the merge may, unverified)"
    ),
    consequence=(
        "an older image has the other sglang: counters but not the verify steps: AL cannot come from the counters, "
        "only from per-request sglext.spec_tokens_details (PR #33518, later still), so every run that reads AL fails"
    ),
)
"""Needed by every speculative SGLang run: v0.5.16 predates PR #33518, so the counters are the source."""
SGLANG_DFLASH_SYNTHETIC_CAP = Capability(
    framework="SGLang",
    feature=f"{SGLANG_LEN_ENV} with --speculative-algorithm DFLASH (the DFlash worker's forced acceptance)",
    minimum=version("0.5.19"),
    source=(
        "sgl-project/sglang PR #32595 (apply_dflash_simulated_acceptance, python/sglang/srt/speculative/"
        "dflash_utils.py; opened 2026-07-28). v0.5.19 (2026-09-07) is an assumption, not a checked first release: "
        "the PR's merge date and first tag are not pinned here, so v0.5.17 (2026-08-08) and v0.5.18 (2026-08-25) "
        "may carry it (unverified) and a newer image is trusted to; the pre-flight measures the forced length"
    ),
    consequence=(
        "an older DFlash worker ignores the variable: the run measures real acceptance while the report says "
        "synthetic (the pre-flight would fail it)"
    ),
)
SGLANG_DFLASH2_CAP = Capability(
    framework="SGLang",
    feature="--speculative-algorithm DFLASH2 (the DFlash 2 drafter)",
    minimum=version("0.5.19"),
    source=(
        "sgl-project/sglang PR #35371, merged after v0.5.18 (sglang PR #37392's cookbook note); "
        "in the v0.5.19 release notes (2026-09-07)"
    ),
    consequence="an older server does not know the algorithm and exits at start",
)
SGLANG_PARALLEL_FLAGS = ("--tp-size", "--pp-size", "--dp-size", "--ep-size")
SGLANG_MANAGED_FLAGS = frozenset(
    {
        "--model-path",
        "--model",
        "--host",
        "--port",
        "--revision",
        *SGLANG_PARALLEL_FLAGS,
        "--tp",
        "--dp",
        "--ep",
        "--speculative-algorithm",
        "--speculative-num-steps",
        "--speculative-eagle-topk",
        "--speculative-num-draft-tokens",
        "--speculative-draft-model-path",
        "--speculative-ngram-min-match-window-size",
        "--speculative-ngram-max-match-window-size",
        "--enable-metrics",
        "--disable-radix-cache",
        "--context-length",
        "--nnodes",
        "--node-rank",
        "--dist-init-addr",
        "--disaggregation-mode",
        "--disaggregation-transfer-backend",
        "--disaggregation-bootstrap-port",
    }
)
"""Flags the SGLang recipe sets from the config (extra_args may not repeat them)."""


_THRESHOLD_PREFIX = len("--speculative-accept-t")
"""The shortest prefix of the two threshold flags that names no other SGLang flag."""


def refuse_unfaithful(config: ServerConfig) -> None:
    """Refuse simulated expert routing (every flow) and a relaxed acceptance threshold with real acceptance.

    See :data:`SGLANG_BALANCED_ROUTING_ENV` and :data:`SGLANG_LOSSY_THRESHOLDS`; each refusal is one line naming the
    setting, its value and why.
    """
    for name in SGLANG_BALANCED_ROUTING_ENV:
        value = config.extra_env.get(name)
        if value is not None and value.strip().lower() not in ("", "0", "false", "no", "off"):
            raise RecipeError(
                f"server.extra_env.{name}={value!r}: refused: SGLang then routes every token to experts drawn "
                "uniformly or round-robin, not the router's choice (python/sglang/srt/environ.py), so the server "
                "neither computes the model's output nor pays a real run's expert imbalance; remove it (or set it to 0)"
            )
    if config.synthetic is not None:
        return
    args = config.extra_args
    for i, arg in enumerate(args):
        flag, sep, inline = arg.partition("=")
        # argparse takes an unambiguous prefix of a flag (allow_abbrev): --speculative-accept-threshold-s is one
        if len(flag) < _THRESHOLD_PREFIX or not any(t.startswith(flag) for t in SGLANG_LOSSY_THRESHOLDS):
            continue
        value = inline if sep else (args[i + 1] if i + 1 < len(args) else "")
        try:
            lossless = float(value) == 1.0
        except ValueError:
            lossless = False
        if not lossless:
            raise RecipeError(
                f"server.extra_args {flag} {value!r}: refused with real acceptance: a threshold other than 1.0 "
                "accepts drafts the target model would reject (lossy, python/sglang/srt/server_args.py), so the "
                "AL measured for a reference (M0) or a gate (M1) would be inflated; remove it or set it to 1.0"
            )


@dataclass(frozen=True)
class SglangRecipe(LaunchRecipe):
    """The SGLang recipe."""

    framework: str = "sglang"
    default_image: str | None = SGLANG_IMAGE
    metrics_path: str = SGLANG_METRICS_PATH

    def algorithm(self, method: SpecMethod) -> str:
        """SGLang's ``--speculative-algorithm`` for ``method``, or a refusal naming the ones it has."""
        return method_name(
            "SGLang", SGLANG_ALGORITHMS, method, "--speculative-algorithm, python/sglang/srt/server_args.py"
        )

    def knobs(self, config: ServerConfig) -> SyntheticKnobs | None:
        """The ``SGLANG_SIMULATE_ACC_*`` knobs, refusing algorithms where they are not known to apply."""
        knobs = render_synthetic(config, self.framework)
        if knobs is not None and config.speculative is not None:
            algorithm = self.algorithm(config.speculative.method)
            if algorithm not in SYNTHETIC_ALGORITHMS:
                raise RecipeError(
                    f"SGLang synthetic acceptance (SGLANG_SIMULATE_ACC_LEN) is applied on the EAGLE-family "
                    f"verify path ({', '.join(sorted(SYNTHETIC_ALGORITHMS))}); with --speculative-algorithm "
                    f"{algorithm} it is not known to take effect, so the run would measure real acceptance. "
                    "Use method mtp, eagle3 or draft_model, or switch synthetic acceptance off"
                )
        return knobs

    def knob_hints(self, config: ServerConfig) -> tuple[str, ...]:
        """Likely causes of a pre-flight failure on SGLang."""
        hints = [
            f"an image before {SGLANG_TOKEN_MODE_CAP.minimum} or one that does not read SGLANG_SIMULATE_ACC_* "
            "(check the environment reached the container)",
            "the speculative algorithm is not on the verify path where SGLANG_SIMULATE_ACC_LEN applies",
        ]
        if config.speculative is not None and config.speculative.method in (
            SpecMethod.DFLASH,
            SpecMethod.DFLASH2,
        ):
            hints.append(
                f"a DFlash worker without sgl-project/sglang PR #32595 (before {SGLANG_DFLASH_SYNTHETIC_CAP.minimum})"
            )
        if config.speculative is not None and config.speculative.method is SpecMethod.DSPARK:
            hints.append(
                f"DSpark without {SGLANG_RAGGED_VERIFY_ENV}={SGLANG_VERIFY_ALL}, or an image before PR #33463 "
                "that rounds a fractional SGLANG_SIMULATE_ACC_LEN"
            )
        return tuple(hints)

    def runtime_k(self, config: ServerConfig) -> tuple[RuntimeKKnob, ...]:
        """SGLang's runtime-varying-K switches (:data:`SGLANG_RUNTIME_K`), refused with synthetic acceptance.

        Looked for in ``extra_args``, ``extra_env`` and the rendered speculative arguments; with real acceptance
        they are returned for the launch to record.
        """
        rendered = self.speculative_args(config)
        return find_runtime_k(
            config, SGLANG_RUNTIME_K, rendered_where="the rendered arguments", rendered_args=rendered
        )

    def speculative_args(self, config: ServerConfig) -> list[str]:
        """The ``--speculative-*`` arguments for the configured method and K."""
        spec = config.speculative
        if spec is None:
            return []
        algorithm = self.algorithm(spec.method)
        args = ["--speculative-algorithm", algorithm]
        if spec.method is SpecMethod.NGRAM:
            args += ["--speculative-num-draft-tokens", str(spec.k + 1)]
            args += flag_value("--speculative-ngram-min-match-window-size", spec.prompt_lookup_min)
            return args + flag_value("--speculative-ngram-max-match-window-size", spec.prompt_lookup_max)
        args += flag_value("--speculative-draft-model-path", spec.draft_model)
        if spec.method is SpecMethod.DSPARK:
            return [*args, "--speculative-dspark-block-size", str(spec.k)]
        if spec.method in (SpecMethod.DFLASH, SpecMethod.DFLASH2):
            return [*args, "--speculative-num-draft-tokens", str(spec.k + 1)]
        args += [
            "--speculative-num-steps",
            str(spec.k),
            "--speculative-eagle-topk",
            "1",
            "--speculative-num-draft-tokens",
            str(spec.k + 1),
        ]
        return args

    def requirements(self, config: ServerConfig) -> tuple[Capability, ...]:
        """The releases this configuration needs.

        The verify-step counter always; the token-mode knob and (DFLASH) the forced acceptance when synthetic;
        DFLASH2 itself.
        """
        spec = config.speculative
        needs = [SGLANG_TOKEN_MODE_CAP] if config.synthetic is not None else []
        if spec is not None:
            needs.append(SGLANG_VERIFY_CALLS_CAP)
            if spec.method is SpecMethod.DFLASH2:
                needs.append(SGLANG_DFLASH2_CAP)
            if spec.method is SpecMethod.DFLASH and config.synthetic is not None:
                needs.append(SGLANG_DFLASH_SYNTHETIC_CAP)
        return tuple(needs)

    def block_drafter_env(
        self, config: ServerConfig, knobs: SyntheticKnobs | None
    ) -> tuple[dict[str, str], tuple[str, ...]]:
        """DSpark under synthetic acceptance: the verify-all schedule, and a warning for a fractional length."""
        spec = config.speculative
        if knobs is None or spec is None or spec.method is not SpecMethod.DSPARK:
            return {}, ()
        length = float(knobs.env[SGLANG_LEN_ENV])
        env: dict[str, str] = {}
        if length > 1:
            chosen = config.extra_env.get(SGLANG_RAGGED_VERIFY_ENV)
            if chosen is not None and chosen != SGLANG_VERIFY_ALL:
                raise RecipeError(
                    f"extra_env sets {SGLANG_RAGGED_VERIFY_ENV}={chosen!r}: SGLang's DSpark refuses "
                    f"{SGLANG_LEN_ENV} > 1 unless every verify step checks the whole block "
                    f"({SGLANG_RAGGED_VERIFY_ENV}={SGLANG_VERIFY_ALL}); drop the setting"
                )
            env[SGLANG_RAGGED_VERIFY_ENV] = SGLANG_VERIFY_ALL
        warnings: tuple[str, ...] = ()
        if not length.is_integer():
            warnings = (
                f"SGLang DSpark rounded a fractional {SGLANG_LEN_ENV} ({knobs.env[SGLANG_LEN_ENV]}) before "
                "sgl-project/sglang PR #33463 (merged 2026-08; its first release is not pinned here): the "
                "pre-flight measures whether this image realises the fraction",
            )
        return env, warnings

    def server_argv(self, config: ServerConfig, par: Parallelism, port: int, nodes: int) -> list[str]:
        """``sglang.launch_server`` for one instance on ``nodes`` nodes (without ``extra_args``).

        Several nodes add ``--nnodes N --node-rank RANK --dist-init-addr HEAD:PORT`` with the runner's
        node placeholders (each node gets its rank; HEAD is the instance's first node).
        """
        if par.ep > 1 and par.ep != par.tp:
            raise RecipeError(
                f"SGLang expert parallelism needs --ep-size equal to --tp-size; got ep={par.ep}, tp={par.tp}"
            )
        argv = ["python3", "-m", "sglang.launch_server", "--model-path", config.model]
        argv += [
            "--host",
            bind_host_of(config),
            "--port",
            str(port),
            *flag_value("--revision", config.revision),
        ]
        argv += parallel_args(par, *SGLANG_PARALLEL_FLAGS)
        if nodes > 1:
            dist_port = config.dist_init_port or SGLANG_DIST_INIT_PORT
            argv += [
                "--nnodes",
                str(nodes),
                "--node-rank",
                NODE_RANK,
                "--dist-init-addr",
                f"{HEAD_ADDR}:{dist_port}",
            ]
        argv += self.speculative_args(config)
        argv.append("--enable-metrics")
        if not config.enable_prefix_caching:
            argv.append("--disable-radix-cache")
        return argv + flag_value("--context-length", config.max_model_len)

    def build(self, config: ServerConfig) -> Launch:
        """``sglang.launch_server`` with speculation, metrics on, radix cache off, knobs in the env.

        ``nodes > 1``: one server spanning the nodes (see :meth:`server_argv`); ``disaggregation``:
        prefill and decode instances behind ``sglang_router`` (see :meth:`disaggregated`).
        """
        check_extra_args(self.framework, config.extra_args, SGLANG_MANAGED_FLAGS)
        refuse_vllm_only_fields(config, self.framework)
        refuse_unfaithful(config)
        knobs = self.knobs(config)
        block_env, block_warnings = self.block_drafter_env(config, knobs)
        runtime_k = self.runtime_k(config)  # after the DSpark verify-all rule, whose refusal says more
        env = merge_env({**(knobs.env if knobs else {}), **block_env}, config.extra_env)
        requirements = self.requirements(config)
        image = config.image or self.default_image
        warnings = (knobs.warnings if knobs else ()) + block_warnings
        port = resolve_port(config)
        dis = config.disaggregated()
        if dis is not None:
            argv, groups, endpoints, per_node = self.disaggregated(config, dis, port)
        else:
            per_node = gpus_per_node(config, config.parallelism, config.nodes)
            argv = self.server_argv(config, config.parallelism, port, config.nodes) + list(config.extra_args)
            groups, endpoints = (), ()
        return self.launch(
            config,
            argv,
            port,
            env=env,
            warnings=warnings,
            image_warnings=image_gate(image, requirements),
            synthetic=dump_row(knobs) if knobs else None,
            gpus_per_node=per_node,
            groups=groups,
            metrics_endpoints=endpoints,
            requirements=requirements,
            version_paths=SGLANG_VERSION_PATHS,
            runtime_k=runtime_k,
        )

    def disaggregated(
        self, config: ServerConfig, dis: Disaggregation, router_port: int
    ) -> tuple[list[str], tuple[LaunchGroup, ...], tuple[MetricsEndpoint, ...], int]:
        """Router argv, the prefill and decode groups, the decode metrics endpoints, GPUs per node.

        Nodes are laid out prefill instances first, then decode instances. Each instance is a
        ``launch_server`` with ``--disaggregation-mode prefill|decode`` and the transfer backend (prefill
        also its ``--disaggregation-bootstrap-port``); the router is
        ``sglang_router.launch_router --pd-disaggregation --prefill URL BOOTSTRAP_PORT ... --decode URL ...``
        on the first node, naming each instance's first node through the runner's node-address
        placeholders. Speculation and the synthetic knobs go to every instance; the spec-decode counters
        are read from the decode instances.
        """
        groups: list[LaunchGroup] = []
        endpoints: list[MetricsEndpoint] = []
        router = [*SGLANG_ROUTER, "--pd-disaggregation"]
        per_node: list[int] = []
        node = 0
        for mode, role, base_port in (
            ("prefill", dis.prefill, dis.prefill_port),
            ("decode", dis.decode, dis.decode_port),
        ):
            per_node.append(gpus_per_node(config, role.parallelism, role.nodes, f"each {mode} instance"))
            for i in range(role.replicas):
                port = base_port + i
                argv = self.server_argv(config, role.parallelism, port, role.nodes)
                argv += [
                    "--disaggregation-mode",
                    mode,
                    "--disaggregation-transfer-backend",
                    dis.transfer_backend,
                ]
                url = f"http://{node_addr(node)}:{port}"
                if mode == "prefill":
                    bootstrap = str(dis.bootstrap_port + i)
                    argv += ["--disaggregation-bootstrap-port", bootstrap]
                    router += ["--prefill", url, bootstrap]
                else:
                    router += ["--decode", url]
                    endpoints.append(MetricsEndpoint(node=node, port=port, path=self.metrics_path))
                argv += config.extra_args
                groups.append(LaunchGroup(f"{mode}{i}", mode, node, role.nodes, tuple(argv), port))
                node += role.nodes
        router += ["--host", bind_host_of(config), "--port", str(router_port), *dis.router_args]
        return router, tuple(groups), tuple(endpoints), max(per_node)

    def sim_source(self, config: ServerConfig) -> SimSource:
        """For the simulator in the SGLang dialect: the same ``SGLANG_SIMULATE_ACC_*`` environment."""
        runtime_k = self.runtime_k(config)
        knobs = self.knobs(config)
        if knobs is None:
            return SimSource(version_paths=SGLANG_VERSION_PATHS, runtime_k=runtime_k)
        block_env, block_warnings = self.block_drafter_env(config, knobs)
        return SimSource(
            env={**knobs.env, **block_env},
            warnings=knobs.warnings + block_warnings,
            synthetic=dump_row(knobs),
            requirements=self.requirements(config),
            version_paths=SGLANG_VERSION_PATHS,
            runtime_k=runtime_k,
        )
