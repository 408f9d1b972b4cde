"""vLLM as a plugin: ``vllm serve`` (recipe), ``vllm:spec_decode_*`` counters, ``--speculative-config`` knobs."""

from __future__ import annotations

from alflow.frameworks.registry import Framework
from alflow.frameworks.vllm.knobs import VllmKnobs
from alflow.frameworks.vllm.metrics import VllmDialect
from alflow.frameworks.vllm.recipe import VLLM_SYNTHETIC_ONLY_ENV, VllmRecipe
from alflow.frameworks.vllm.sim import SPECULATIVE_CONFIG_FLAG, VllmEmitter, read_args
from alflow.plugins import is_given

PLUGIN = Framework(
    name="vllm",
    title="vLLM",
    recipe=VllmRecipe(),
    metrics=VllmDialect(),
    knobs=VllmKnobs(),
    sim=VllmEmitter(),
    sim_args=read_args,
    sim_flags=frozenset({SPECULATIVE_CONFIG_FLAG}),
    shortcut_env=frozenset({VLLM_SYNTHETIC_ONLY_ENV}),
    synthetic_markers={
        "rejection_sample_method": lambda value: value == "synthetic",
        "synthetic_acceptance_length": is_given,
        "synthetic_acceptance_rates": is_given,
    },
    gpu="nvidia",
)
