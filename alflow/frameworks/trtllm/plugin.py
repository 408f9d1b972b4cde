"""TensorRT-LLM as a plugin: ``trtllm-serve`` (recipe), ``trtllm_spec_decode_*`` counters, the forced-accept knob."""

from __future__ import annotations

from alflow.frameworks.registry import Framework
from alflow.frameworks.trtllm.knobs import TRTLLM_ENV, TrtllmKnobs
from alflow.frameworks.trtllm.metrics import TrtllmDialect
from alflow.frameworks.trtllm.recipe import TrtllmRecipe
from alflow.frameworks.trtllm.sim import TrtllmEmitter, read_trtllm_env
from alflow.plugins import number_of

PLUGIN = Framework(
    name="trtllm",
    title="TensorRT-LLM",
    recipe=TrtllmRecipe(),
    metrics=TrtllmDialect(),
    knobs=TrtllmKnobs(),
    sim=TrtllmEmitter(),
    sim_env=read_trtllm_env,
    knob_env=frozenset({TRTLLM_ENV}),
    synthetic_markers={TRTLLM_ENV: lambda value: bool(number_of(value))},  # 0 is off
    reasoning_fields=("reasoning", "reasoning_content"),
    gpu="nvidia",
)
