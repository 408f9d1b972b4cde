"""The simulator: ``python -m alflow.sim serve ...`` speaking one framework's dialect.

The speculative config and synthetic knobs reach the simulator the way they reach the real
framework (vLLM's ``--speculative-config`` JSON, SGLang's and TensorRT-LLM's environment variables),
rendered by that framework's recipe, so the knob path is exercised end to end; ``--k`` and
``--method`` are passed as well. The interpreter is the one running alflow (``sys.executable``); the
local container image (:mod:`alflow_infra.images`) bind-mounts it at the same path.

Multi-node (``config.nodes > 1``, issue 10): every node runs the same argument list with the
multi-node placeholders (``--nnodes @ALFLOW_NNODES@ --node-rank @ALFLOW_NODE_RANK@ --head-addr
@ALFLOW_HEAD_ADDR@``) that the runner fills in per node, and ``--dist-port`` = port + nodes (node R
listens on port + R, so nodes sharing one host do not collide). ``parallelism.dp > 1`` makes it
``--node-parallel dp`` (one engine per node, data-parallel ranks): every node exposes its own
metrics, listed in ``Launch.metrics_endpoints`` for the scraper to sum; otherwise ``tp`` (one model
across the nodes): only the head exposes metrics.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from alflow.config import ServerConfig, SpecMethod
from alflow.errors import RecipeError
from alflow.frameworks.launch import HEAD_ADDR, NNODES, NODE_RANK, Launch, MetricsEndpoint
from alflow.frameworks.recipe_kit import bind_host_of, check_extra_args, merge_env, method_name, resolve_port
from alflow.frameworks.recipes import dialect_source, get_recipe
from alflow.frameworks.sim.config import SimServer
from alflow.sim.acceptance import METHODS as SIM_METHODS
from alflow.sim.config import SimConfig

SIM_IMAGE = "alflow-sim-base:local"
SIM_MANAGED_FLAGS = frozenset(
    {
        "--host",
        "--port",
        "--dialect",
        "--model-name",
        "--k",
        "--method",
        "--speculative-config",
        "--max-model-len",
        "--nnodes",
        "--node-rank",
        "--head-addr",
        "--dist-port",
        "--node-parallel",
    }
)
"""Flags the simulator recipe sets from the config (fault and timing flags are free)."""
SIM_OVERRIDE_FLAGS = frozenset({"--synthetic-al", "--synthetic-rates", "--synthetic-scheme"})
"""Simulator flags that override the configured synthetic setting: allowed (a deliberate fault for
tests of the synthetic audit), with a warning in the Launch."""


def _dialect_recipe(config: ServerConfig) -> object:
    """The recipe of the framework whose dialect the simulator of ``config`` speaks."""
    return get_recipe(config.sim_dialect if isinstance(config, SimServer) else config.framework)


@dataclass(frozen=True)
class SimRecipe:
    """The simulator recipe."""

    framework: str = "sim"
    default_image: str | None = SIM_IMAGE
    process_image_label: bool = True
    """A process-run sim is the program its image holds: the image name stays the run's label (a series' image)."""
    python: str = field(default_factory=lambda: sys.executable)

    def knob_hints(self, config: ServerConfig) -> tuple[str, ...]:
        """Its dialect's framework's hints, and the simulator's own fault switches."""
        source: object = getattr(_dialect_recipe(config), "knob_hints", None)
        hints: tuple[str, ...] = tuple(source(config)) if callable(source) else ()
        return (
            *hints,
            "the simulator was started with --ignore-synthetic or a --synthetic-* override in extra_args",
        )

    def speculative_label(self, config: ServerConfig) -> str | None:
        """The speculative method as its dialect's framework names it on a live server (None where it names none)."""
        label: object = getattr(_dialect_recipe(config), "speculative_label", None)
        value = label(config) if callable(label) else None
        return None if value is None else str(value)

    def build(self, config: ServerConfig) -> Launch:
        """``python -m alflow.sim serve`` in ``config.sim_dialect`` with that framework's knob path."""
        if not isinstance(config, SimServer):
            raise RecipeError(
                f"the sim recipe builds framework 'sim' configurations, not {config.framework!r}"
            )
        check_extra_args(self.framework, config.extra_args, SIM_MANAGED_FLAGS)
        dialect = dialect_source(config.sim_dialect)
        source = dialect.sim_source(config)
        # node R listens on port + R and the head's join port is port + nodes: all must be free
        port = resolve_port(config, config.nodes + 1 if config.nodes > 1 else 1)
        argv = [self.python, "-m", "alflow.sim", "serve", "--host", bind_host_of(config), "--port", str(port)]
        argv += ["--dialect", config.sim_dialect, "--model-name", config.model]
        spec = config.speculative
        if spec is not None:
            simulated = {m: m.value for m in SpecMethod if m.value in SIM_METHODS}
            method = method_name("the simulated engine", simulated, spec.method, "alflow/sim/acceptance.py")
            argv += ["--k", str(spec.k), "--method", method]
        argv += source.args
        if config.max_model_len is not None:
            argv += ["--max-model-len", str(config.max_model_len)]
        endpoints: tuple[MetricsEndpoint, ...] = ()
        if config.nodes > 1:
            mode = self.node_parallel(config)
            argv += ["--nnodes", NNODES, "--node-rank", NODE_RANK, "--head-addr", HEAD_ADDR]
            argv += ["--dist-port", str(port + config.nodes), "--node-parallel", mode]
            if port + config.nodes > 65535:
                raise RecipeError(
                    f"port {port} leaves no room for {config.nodes} nodes and the join port (port + nodes <= 65535)"
                )
            if mode == "dp":
                endpoints = tuple(
                    MetricsEndpoint(node=rank, port=port + rank, path=dialect.metrics_path)
                    for rank in range(config.nodes)
                )
        argv += config.extra_args
        env = {"PYTHONUNBUFFERED": "1", **merge_env(source.env, config.extra_env)}
        overrides = sorted({a.split("=", 1)[0] for a in config.extra_args} & SIM_OVERRIDE_FLAGS)
        warnings = source.warnings
        if overrides:
            warnings += (
                f"extra_args {', '.join(overrides)} override the configured synthetic acceptance: the simulator "
                "will not realise the configured target (a deliberate fault?)",
            )
        return Launch(
            framework=self.framework,
            dialect=config.sim_dialect,
            model=SimConfig(model_name=config.model).served_model_name,
            argv=tuple(argv),
            port=port,
            host=bind_host_of(config),
            env=env,
            health_path=dialect.health_path,
            metrics_path=dialect.metrics_path,
            readiness_timeout_s=config.readiness_timeout_s,
            image=config.image or self.default_image,
            warnings=warnings,
            synthetic=source.synthetic,
            nodes=config.nodes,
            metrics_endpoints=endpoints,
            requirements=source.requirements,
            version_paths=source.version_paths,
            runtime_k=source.runtime_k,
        )

    @staticmethod
    def node_parallel(config: ServerConfig) -> str:
        """How a multi-node simulated server uses its nodes: ``dp`` when ``parallelism.dp > 1``, else ``tp``."""
        dp = config.parallelism.dp
        if dp == 1:
            return "tp"
        if dp % config.nodes:
            raise RecipeError(
                f"parallelism.dp={dp} cannot be spread evenly over nodes={config.nodes} "
                "(the simulator runs one data-parallel engine per node)"
            )
        return "dp"
