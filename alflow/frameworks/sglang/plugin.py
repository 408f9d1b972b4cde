"""SGLang as a plugin: ``sglang.launch_server`` (recipe), ``sglang:`` counters, ``SGLANG_SIMULATE_ACC_*`` knobs."""

from __future__ import annotations

from alflow.frameworks.registry import Framework
from alflow.frameworks.sglang.knobs import (
    SGLANG_LEN_ENV,
    SGLANG_METHOD_ENV,
    SGLANG_TOKEN_MODE_ENV,
    SglangKnobs,
)
from alflow.frameworks.sglang.metrics import SglangDialect
from alflow.frameworks.sglang.recipe import SGLANG_BALANCED_ROUTING_ENV, SglangRecipe
from alflow.frameworks.sglang.sim import SglangEmitter, read_sglang_env
from alflow.plugins import number_of

PLUGIN = Framework(
    name="sglang",
    title="SGLang",
    recipe=SglangRecipe(),
    metrics=SglangDialect(),
    knobs=SglangKnobs(),
    sim=SglangEmitter(),
    sim_env=read_sglang_env,
    knob_env=frozenset({SGLANG_LEN_ENV, SGLANG_METHOD_ENV, SGLANG_TOKEN_MODE_ENV}),
    shortcut_env=frozenset(SGLANG_BALANCED_ROUTING_ENV),
    synthetic_markers={SGLANG_LEN_ENV: lambda value: (number_of(value) or -1.0) >= 0},  # off when negative
    reasoning_fields=("reasoning_content",),
    gpu="nvidia",
)
