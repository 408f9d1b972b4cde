"""TensorRT-LLM as a plugin: ``trtllm-serve`` (recipe), ``trtllm_spec_decode_*`` counters, the forced-accept knob."""

from __future__ import annotations

from alflow.acceptance.knobs import TRTLLM_ENV, TrtllmKnobs
from alflow.frameworks.trtllm.recipe import TrtllmRecipe
from alflow.metrics.dialects import TrtllmDialect
from alflow.plugins import Framework
from alflow.sim.dialects import TrtllmEmitter

PLUGIN = Framework(
    name="trtllm",
    title="TensorRT-LLM",
    recipe=TrtllmRecipe(),
    metrics=TrtllmDialect(),
    knobs=TrtllmKnobs(),
    sim=TrtllmEmitter(),
    knob_env=frozenset({TRTLLM_ENV}),
    reasoning_fields=("reasoning", "reasoning_content"),
    gpu="nvidia",
)
