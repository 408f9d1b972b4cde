"""alflow's simulated engine as a plugin: it speaks another framework's dialect (``sim_dialect``) and needs no GPU."""

from __future__ import annotations

from alflow.frameworks.registry import Framework
from alflow.frameworks.sim.recipe import SimRecipe

PLUGIN = Framework(
    name="sim",
    title="alflow sim",
    recipe=SimRecipe(),
)
