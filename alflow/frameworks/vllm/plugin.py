"""vLLM as a plugin: ``vllm serve`` (recipe), ``vllm:spec_decode_*`` counters, ``--speculative-config`` knobs."""

from __future__ import annotations

from alflow.acceptance.knobs import VllmKnobs
from alflow.frameworks.vllm.recipe import VllmRecipe
from alflow.metrics.dialects import VllmDialect
from alflow.plugins import Framework
from alflow.sim.dialects import VllmEmitter

PLUGIN = Framework(
    name="vllm",
    title="vLLM",
    recipe=VllmRecipe(),
    metrics=VllmDialect(),
    knobs=VllmKnobs(),
    sim=VllmEmitter(),
    synthetic_markers=frozenset({"synthetic_acceptance_length", "synthetic_acceptance_rates"}),
    gpu="nvidia",
)
