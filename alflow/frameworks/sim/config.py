"""The simulator's server configuration (``python -m alflow.sim serve``), speaking one framework's dialect."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Literal

from pydantic import Field

from alflow.config.server import Parallelism, ServerBase, ServerDialect, TwoModelSwitch
from alflow.plugins import config_model_of


class SimServer(TwoModelSwitch):
    """alflow's simulated engine (``python -m alflow.sim serve``), speaking one framework's dialect."""

    ENGINE_NOTE: ClassVar[str | None] = (
        "SIMULATED: numbers come from alflow's simulated engine, not a real GPU server."
    )
    OWN_FIELDS: ClassVar[Mapping[str, str]] = {
        **TwoModelSwitch.OWN_FIELDS,
        "sim_dialect": "sim_dialect applies to framework 'sim' only, not {framework!r}",
    }

    framework: Literal["sim"] = Field("sim", description="Serving framework: sim (the simulator).")
    sim_dialect: ServerDialect = Field(
        "vllm",
        description="framework=sim only: which framework's API, knobs and metrics the simulator speaks.",
    )

    @property
    def gpu_framework(self) -> str:
        """The dialect the simulator speaks: its GPU-counting rules apply."""
        return self.sim_dialect

    def instance_gpus(self, parallelism: Parallelism) -> int:
        """The GPUs its dialect's framework would use: that framework's config variant's rule."""
        variant = config_model_of(self.sim_dialect)
        if not issubclass(variant, ServerBase):
            raise TypeError(f"framework {self.sim_dialect!r}'s config model is not a ServerBase")
        rule = variant.model_construct(
            framework=self.sim_dialect, model=self.model, extra_args=self.extra_args
        )
        return rule.instance_gpus(parallelism)
