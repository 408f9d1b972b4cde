"""alflow's simulated engine as a plugin: it speaks another framework's dialect (``sim_dialect``) and needs no GPU."""

from __future__ import annotations

from alflow.frameworks.sim.recipe import SimRecipe
from alflow.plugins import Framework

PLUGIN = Framework(
    name="sim",
    title="alflow sim",
    recipe=SimRecipe(),
    engine_note="SIMULATED: numbers come from alflow's simulated engine, not a real GPU server.",
    own_fields={
        "two_model": "two_model applies to TensorRT-LLM only, not {framework!r}",
        "sim_dialect": "sim_dialect applies to framework 'sim' only, not {framework!r}",
    },
)
