"""SGLang as a plugin: ``sglang.launch_server`` (recipe), ``sglang:`` counters, ``SGLANG_SIMULATE_ACC_*`` knobs."""

from __future__ import annotations

from alflow.frameworks.sglang.knobs import (
    SGLANG_LEN_ENV,
    SGLANG_METHOD_ENV,
    SGLANG_TOKEN_MODE_ENV,
    SglangKnobs,
)
from alflow.frameworks.sglang.metrics import SglangDialect
from alflow.frameworks.sglang.recipe import SglangRecipe
from alflow.frameworks.sglang.sim import SglangEmitter, read_sglang_env
from alflow.plugins import Framework, number_of

PLUGIN = Framework(
    name="sglang",
    title="SGLang",
    recipe=SglangRecipe(),
    metrics=SglangDialect(),
    knobs=SglangKnobs(),
    sim=SglangEmitter(),
    sim_env=read_sglang_env,
    knob_env=frozenset({SGLANG_LEN_ENV, SGLANG_METHOD_ENV, SGLANG_TOKEN_MODE_ENV}),
    synthetic_markers={SGLANG_LEN_ENV: lambda value: (number_of(value) or -1.0) >= 0},  # off when negative
    reasoning_fields=("reasoning_content",),
    gpu="nvidia",
    own_fields={
        "disaggregation": "disaggregation is supported for framework 'sglang' only, not {framework!r}: vLLM's "
        "disaggregated prefill is experimental and needs a KV connector plus a proxy from its examples, "
        "TensorRT-LLM's disaggregated serving (trtllm-serve disaggregated) is not wired into alflow, and the "
        "simulator has no disaggregated mode. Start such a server yourself and attach with the external runner "
        "(metrics_urls: the decode instances)",
    },
)
