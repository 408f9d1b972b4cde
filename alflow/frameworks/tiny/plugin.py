"""alflow's tiny CPU engine as a plugin: a small real model with n-gram drafting, speaking vLLM's metrics."""

from __future__ import annotations

from alflow.frameworks.registry import Framework
from alflow.frameworks.tiny.recipe import TinyRecipe

PLUGIN = Framework(
    name="tiny",
    title="alflow tiny",
    recipe=TinyRecipe(),
)
