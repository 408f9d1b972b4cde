"""The simulator: ``python -m alflow.sim serve ...`` speaking one framework's dialect.

The speculative config and synthetic knobs reach the simulator the way they reach the real
framework (vLLM's ``--speculative-config`` JSON, SGLang's and TensorRT-LLM's environment variables),
rendered by that framework's recipe, so the knob path is exercised end to end; ``--k`` and
``--method`` are passed as well. The interpreter is the one running alflow (``sys.executable``); the
local container image (:mod:`infra.images`) bind-mounts it at the same path.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from alflow.config import ServerConfig
from alflow.sim.config import SimConfig
from infra.launch import Launch
from infra.recipes._common import check_extra_args, merge_env, resolve_port
from infra.recipes.dialects import DIALECTS

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
    }
)
"""Flags the simulator recipe sets from the config (fault and timing flags are free)."""
SIM_OVERRIDE_FLAGS = frozenset({"--synthetic-al", "--synthetic-rates", "--synthetic-scheme"})
"""Simulator flags that override the configured synthetic setting: allowed (a deliberate fault for
tests of the synthetic audit), with a warning in the Launch."""


@dataclass(frozen=True)
class SimRecipe:
    """The simulator recipe."""

    framework: str = "sim"
    default_image: str | None = SIM_IMAGE
    python: str = field(default_factory=lambda: sys.executable)

    def build(self, config: ServerConfig) -> Launch:
        """``python -m alflow.sim serve`` in ``config.sim_dialect`` with that framework's knob path."""
        check_extra_args(self.framework, config.extra_args, SIM_MANAGED_FLAGS)
        dialect = DIALECTS[config.sim_dialect]
        source = dialect.sim_source(config)
        port = resolve_port(config)
        argv = [self.python, "-m", "alflow.sim", "serve", "--host", config.host, "--port", str(port)]
        argv += ["--dialect", config.sim_dialect, "--model-name", config.model]
        spec = config.speculative
        if spec is not None:
            argv += ["--k", str(spec.k), "--method", spec.method.value]
        argv += source.args
        if config.max_model_len is not None:
            argv += ["--max-model-len", str(config.max_model_len)]
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
            host=config.host,
            env=env,
            health_path=dialect.health_path,
            metrics_path=dialect.metrics_path,
            readiness_timeout_s=config.readiness_timeout_s,
            image=config.image or self.default_image,
            warnings=warnings,
            synthetic=source.synthetic,
        )
