"""SGLang as a plugin: ``sglang.launch_server`` (recipe), ``sglang:`` counters, ``SGLANG_SIMULATE_ACC_*`` knobs."""

from __future__ import annotations

from alflow.acceptance.knobs import SGLANG_LEN_ENV, SGLANG_METHOD_ENV, SGLANG_TOKEN_MODE_ENV, SglangKnobs
from alflow.frameworks.sglang.recipe import SglangRecipe
from alflow.metrics.dialects import SglangDialect
from alflow.plugins import Framework
from alflow.sim.dialects import SglangEmitter

PLUGIN = Framework(
    name="sglang",
    title="SGLang",
    recipe=SglangRecipe(),
    metrics=SglangDialect(),
    knobs=SglangKnobs(),
    sim=SglangEmitter(),
    knob_env=frozenset({SGLANG_LEN_ENV, SGLANG_METHOD_ENV, SGLANG_TOKEN_MODE_ENV}),
    reasoning_fields=("reasoning_content",),
    gpu="nvidia",
)
