"""alflow's tiny CPU engine as a plugin: a small real model with n-gram drafting, speaking vLLM's metrics."""

from __future__ import annotations

from alflow.frameworks.tiny.recipe import TinyRecipe
from alflow.plugins import Framework

PLUGIN = Framework(
    name="tiny",
    title="alflow tiny",
    recipe=TinyRecipe(),
    engine_note=(
        "TINY CPU ENGINE: real measurements of a small model (alflow tiny serve: n-gram drafting on CPU), "
        "not of a GPU serving framework; compare them only with other tiny-engine runs."
    ),
)
