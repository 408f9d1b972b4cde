"""AMD's ATOM as a plugin (ROCm GPUs): recipe, ``atom:mtp_*`` reader, ``--spec-decode-acceptance-length`` knob."""

from __future__ import annotations

from alflow.frameworks.atom.knobs import FIXED_SEED, LENGTH_FLAG, RATE_FLAG, AtomKnobs
from alflow.frameworks.atom.metrics import AtomDialect
from alflow.frameworks.atom.recipe import AtomRecipe
from alflow.frameworks.atom.sim import K_FLAG, AtomEmitter, read_args
from alflow.frameworks.registry import Framework
from alflow.plugins import is_given

PLUGIN = Framework(
    name="atom",
    title="ATOM",
    recipe=AtomRecipe(),
    metrics=AtomDialect(),
    knobs=AtomKnobs(),
    sim=AtomEmitter(),
    sim_args=read_args,
    sim_flags=frozenset({K_FLAG, LENGTH_FLAG, RATE_FLAG}),
    synthetic_markers={"spec_decode_acceptance_length": is_given, "spec_decode_acceptance_rate": is_given},
    token_id_prompts=False,  # CompletionRequest.prompt: str (atom/entrypoints/openai/protocol.py:200)
    reasoning_fields=("reasoning_content",),
    repeated_draws=FIXED_SEED,
    gpu="amd",
)
