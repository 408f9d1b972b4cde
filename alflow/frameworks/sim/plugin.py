"""alflow's simulated engine as a plugin: it speaks another framework's dialect (``sim_dialect``) and needs no GPU."""

from __future__ import annotations

from alflow.frameworks.sim.recipe import SimRecipe
from alflow.registry import Framework

PLUGIN = Framework(
    name="sim",
    title="alflow sim",
    recipe=SimRecipe(),
)
