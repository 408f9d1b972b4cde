"""Runtime-varying K (issue #31 item 3): refused with synthetic acceptance, recorded with real acceptance.

Every knob of every framework, in every place it can be found, is refused in one line before any work when the
server config asks for synthetic acceptance; with real acceptance the launch records it (provenance) and the
report shows it. SGLang's active-K gauges moving inside a window put a warning on the point. vLLM's lossy
``rejection_sample_method: "fly"`` is refused for M0 and M1 and labelled lossy elsewhere.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from prometheus_client import generate_latest
from pydantic import ValidationError

from alflow.acceptance.runtime_k import (
    RUNTIME_K_REASON,
    KnobSpec,
    RuntimeKKnob,
    active_k_changes,
    note_warnings,
    report_line,
    scan_flags,
    scan_json_args,
    stored_knobs,
)
from alflow.config import BenchmarkParams, CalibrateParams, GateParams, server_config
from alflow.frameworks.recipes import build_launch
from alflow.frameworks.sglang import names as sglang_names
from alflow.frameworks.sglang.metrics import SglangDialect
from alflow.frameworks.sglang.recipe import SGLANG_RUNTIME_K
from alflow.frameworks.sglang.sim import SglangEmitter
from alflow.frameworks.trtllm.recipe import TRTLLM_RUNTIME_K, TrtllmRecipe
from alflow.frameworks.vllm.recipe import VLLM_RUNTIME_K
from alflow.metrics.prometheus import SnapshotWindow, parse_exposition
from alflow.reports.markdown import escape_md
from alflow.sim.config import SimConfig
from alflow.sim.dialects import make_registry
from alflow.sim.stats import EngineStats
from alflow_infra.errors import RecipeError

pytestmark = pytest.mark.unit

SYNTHETIC = {"target_al": 2.5}
_VLLM = {"framework": "vllm", "model": "m", "speculative": {"method": "mtp", "k": 3}}
_SGLANG = {"framework": "sglang", "model": "m", "speculative": {"method": "mtp", "k": 3}}
_DSPARK = {"framework": "sglang", "model": "m", "speculative": {"method": "dspark", "k": 3}}

# (id, server fields, the knob's name, where it is said to be found)
CASES: list[tuple[str, dict[str, Any], str, str]] = [
    ("sglang adaptive flag", {**_SGLANG, "extra_args": ["--speculative-adaptive"]}, "--speculative-adaptive",
     "extra_args"),
    ("sglang adaptive flag with a value", {**_SGLANG, "extra_args": ["--speculative-adaptive=true"]},
     "--speculative-adaptive", "extra_args"),
    ("sglang adaptive among other flags",
     {**_SGLANG, "extra_args": ["--mem-fraction-static", "0.7", "--speculative-adaptive", "--log-level", "info"]},
     "--speculative-adaptive", "extra_args"),
    ("sglang DSpark compact ragged verify", {**_DSPARK, "extra_env": {"SGLANG_RAGGED_VERIFY_MODE": "compact"}},
     "SGLANG_RAGGED_VERIFY_MODE", "extra_env"),
    ("sglang DSpark cap-accept ragged verify", {**_DSPARK, "extra_env": {"SGLANG_RAGGED_VERIFY_MODE": "cap-accept"}},
     "SGLANG_RAGGED_VERIFY_MODE", "extra_env"),
    ("vllm batch-size schedule, dotted form",
     {**_VLLM, "extra_args": ["--speculative-config.num_speculative_tokens_per_batch_size", '{"1-16": 3}']},
     "num_speculative_tokens_per_batch_size", "extra_args --speculative-config.num_speculative_tokens_per_batch_size"),
    ("vllm adaptive verification, dotted = form",
     {**_VLLM, "extra_args": ["--speculative-config.enable_adaptive_verification=true"]},
     "enable_adaptive_verification", "extra_args --speculative-config.enable_adaptive_verification"),
    ("vllm adaptive verification in a JSON argument",
     {**_VLLM, "extra_args": ["--additional-config", json.dumps({"enable_adaptive_verification": True})]},
     "enable_adaptive_verification", "extra_args --additional-config JSON"),
    ("vllm batch-size schedule in a JSON = argument",
     {**_VLLM, "extra_args": ["--additional-config=" + json.dumps({"num_speculative_tokens_per_batch_size": {"1-8": 2}})]},
     "num_speculative_tokens_per_batch_size", "extra_args --additional-config JSON"),
    ("vllm sequence-length schedule, dotted form",
     {**_VLLM, "extra_args": ["--speculative-config.num_speculative_tokens_per_seq_len", "[[0, 4096, 3]]"]},
     "num_speculative_tokens_per_seq_len", "extra_args --speculative-config.num_speculative_tokens_per_seq_len"),
    ("sim in the sglang dialect, adaptive flag",
     {"framework": "sim", "sim_dialect": "sglang", "model": "m", "speculative": {"method": "mtp", "k": 3},
      "extra_args": ["--speculative-adaptive"]},
     "--speculative-adaptive", "extra_args"),
]  # fmt: skip


def _ids(cases: list[tuple[str, dict[str, Any], str, str]]) -> list[str]:
    return [c[0] for c in cases]


@pytest.mark.parametrize(("name", "fields", "knob", "where"), CASES, ids=_ids(CASES))
def test_synthetic_refuses_each_knob_in_one_line(
    name: str, fields: dict[str, Any], knob: str, where: str
) -> None:
    # DSpark above AL 1: the recipe's own verify-all rule refuses a ragged mode first (and says more), so AL 1 here
    config = server_config({**fields, "synthetic": {"target_al": 1.0} if "DSpark" in name else SYNTHETIC})
    with pytest.raises(RecipeError) as info:
        build_launch(config)
    message = str(info.value)
    assert "\n" not in message, message
    assert message.startswith("runtime-varying K: "), message
    assert knob in message, message
    assert f"in {where} " in message, message
    assert RUNTIME_K_REASON in message, message


@pytest.mark.parametrize(("name", "fields", "knob", "where"), CASES, ids=_ids(CASES))
def test_real_acceptance_records_each_knob(name: str, fields: dict[str, Any], knob: str, where: str) -> None:
    launch = build_launch(server_config(fields))
    assert [(k.name, k.where) for k in launch.runtime_k] == [(knob, where)]
    stored = stored_knobs(launch.provenance().runtime_k)
    assert stored == launch.runtime_k
    line = report_line(stored)
    assert line is not None
    assert knob in line
    assert where in line


@pytest.mark.parametrize(
    "fields",
    [
        _SGLANG,
        {
            **_SGLANG,
            "extra_args": ["--speculative-adaptive-config", "/x.json"],
        },  # config of a switch left off
        {**_DSPARK, "extra_env": {"SGLANG_RAGGED_VERIFY_MODE": "static"}},  # verify-all: not a knob
        {**_VLLM, "extra_args": ["--speculative-config.enable_adaptive_verification", "false"]},
        {**_VLLM, "extra_args": ["--additional-config", '{"enable_adaptive_verification": false}']},
        {**_VLLM, "extra_args": ["--additional-config", '{"num_speculative_tokens_per_batch_size": {}}']},
        {"framework": "trtllm", "model": "m", "speculative": {"method": "mtp", "k": 3}},
    ],
    ids=[
        "sglang plain",
        "adaptive config alone",
        "ragged static",
        "dotted false",
        "json false",
        "json empty",
        "trtllm",
    ],
)
def test_no_knob_no_refusal(fields: dict[str, Any]) -> None:
    launch = build_launch(server_config({**fields, "synthetic": SYNTHETIC}))
    assert launch.runtime_k == ()
    assert launch.provenance().runtime_k == []


def test_trtllm_rendered_schedule_is_found_and_refused() -> None:
    """TensorRT-LLM's options file is the recipe's: a schedule there (rendered by alflow) is the one way in."""

    class Scheduled(TrtllmRecipe):
        def options(self, config: Any) -> dict[str, object]:
            opts = super().options(config)
            spec = dict(opts["speculative_config"])  # type: ignore[call-overload]
            opts["speculative_config"] = {
                **spec,
                "draft_len_schedule": {4: 3, 8: 1},
                "max_concurrency": 32,
                # PR #12905's gate: speculation off for good when the rolling acceptance rate drops
                "acceptance_rate_window_size": 8,
                "acceptance_rate_threshold": 0.5,
            }
            return opts

    real = server_config(
        framework="trtllm", model="m", host="127.0.0.1", speculative={"method": "mtp", "k": 3}
    )
    found = Scheduled().runtime_k(real)
    assert [(k.name, k.where) for k in found] == [
        ("draft_len_schedule", "the rendered speculative_config"),
        ("max_concurrency", "the rendered speculative_config"),
        ("acceptance_rate_window_size", "the rendered speculative_config"),
        ("acceptance_rate_threshold", "the rendered speculative_config"),
    ]
    with pytest.raises(RecipeError, match=r"draft_len_schedule=.* in the rendered speculative_config"):
        Scheduled().build(
            real.model_copy(
                update={"synthetic": server_config(**{**_VLLM, "synthetic": SYNTHETIC}).synthetic}
            )
        )


def test_every_framework_cites_its_knobs() -> None:
    for spec in (*VLLM_RUNTIME_K, *SGLANG_RUNTIME_K, *TRTLLM_RUNTIME_K):
        assert "PR #" in spec.source or ".py" in spec.source, spec


def test_flag_scanner_forms() -> None:
    spec = KnobSpec("--x", "flag", "e", "s", takes_value=True)
    assert [k.value for k in scan_flags(["--x", "4"], [spec], "a")] == ["4"]
    assert [k.value for k in scan_flags(["--x=4"], [spec], "a")] == ["4"]
    assert scan_flags(["--x=0"], [spec], "a") == []
    assert scan_flags(["--xy", "4"], [spec], "a") == []
    key = KnobSpec("k", "key", "e", "s")
    nested = scan_json_args(["--o", '{"a": {"k": [1, 2]}}'], [key], "extra_args")
    assert [(k.where, k.value) for k in nested] == [("extra_args --o JSON", "[1,2]")]
    assert scan_json_args(["not json {"], [key], "x") == []


def test_report_line_is_escaped_in_markdown() -> None:
    knob = RuntimeKKnob("--speculative-adaptive", "extra_args", "<b>*x*</b>", "effect", "source")
    line = report_line([knob])
    assert line is not None
    shown = str(escape_md(line))
    assert "<b>" not in shown
    assert "\\*x\\*" in shown


# --- the active K moving inside a window (SGLang gauges) -----------------------------------------


def _sglang_text(steps: float, draft_tokens: float, verify_calls: float, gen: float, requests: float) -> str:
    lab = 'model_name="m"'
    return (
        f"# TYPE sglang:spec_num_steps gauge\nsglang:spec_num_steps{{{lab}}} {steps}\n"
        f"# TYPE sglang:spec_num_draft_tokens gauge\nsglang:spec_num_draft_tokens{{{lab}}} {draft_tokens}\n"
        f"# TYPE sglang:spec_verify_calls counter\nsglang:spec_verify_calls_total{{{lab}}} {verify_calls}\n"
        f"# TYPE sglang:generation_tokens counter\nsglang:generation_tokens_total{{{lab}}} {gen}\n"
        f"# TYPE sglang:num_requests counter\nsglang:num_requests_total{{{lab}}} {requests}\n"
    )


def _snap(text: str, t: int) -> Any:
    return parse_exposition(text, url="http://x/metrics", wall_time_s=float(t), mono_ns=t)


def test_active_k_change_inside_a_window_warns_on_real_prometheus_text() -> None:
    before = _snap(_sglang_text(3, 4, 0, 0, 0), 1)
    middle = _snap(_sglang_text(1, 2, 50, 200, 5), 2)
    after = _snap(_sglang_text(3, 4, 100, 400, 10), 3)
    stats = SglangDialect().spec_stats(SnapshotWindow(before, after, series=[middle]), k=3)
    warnings = note_warnings(stats.note)
    assert len(warnings) == 2, stats.note
    assert f"{sglang_names.SGLANG_SPEC_NUM_STEPS}: 3 -> 1 -> 3" in warnings[0]
    assert f"{sglang_names.SGLANG_SPEC_NUM_DRAFT_TOKENS}: 4 -> 2 -> 4" in warnings[1]


def test_steady_active_k_does_not_warn() -> None:
    before = _snap(_sglang_text(3, 4, 0, 0, 0), 1)
    after = _snap(_sglang_text(3, 4, 100, 400, 10), 3)
    stats = SglangDialect().spec_stats(SnapshotWindow(before, after), k=3)
    assert note_warnings(stats.note) == []
    assert active_k_changes({"g": [(0.0, 3.0), (1.0, 3.0)]}) == []


def test_sim_sglang_dialect_exposes_the_active_k_gauges() -> None:
    config = SimConfig(dialect="sglang", k=4)
    text = generate_latest(make_registry(SglangEmitter(), EngineStats(k=4), config)).decode()
    snap = parse_exposition(text)
    assert snap.gauge(sglang_names.SGLANG_SPEC_NUM_STEPS) == 4
    assert snap.gauge(sglang_names.SGLANG_SPEC_NUM_DRAFT_TOKENS) == 5


# --- vLLM's lossy "fly" ----------------------------------------------------------------------------

_FLY = {"framework": "vllm", "model": "m", "speculative": {"method": "draft_model", "k": 3, "draft_model": "d",
                                                            "rejection_sample_method": "fly"}}  # fmt: skip


def _flow_params(flow: str) -> dict[str, Any]:
    from tests.bad_inputs import BASES

    base = BASES[flow]
    served = base["model"]["id"] if "model" in base else "m"
    return {**base, "server": {**_FLY, "model": served}}


@pytest.mark.parametrize(("flow", "model"), [("m0", CalibrateParams), ("m1", GateParams)])
def test_fly_is_refused_for_m0_and_m1_in_one_line(flow: str, model: type[Any]) -> None:
    with pytest.raises(ValidationError) as info:
        model.model_validate(_flow_params(flow))
    message = str(info.value).splitlines()
    text = " ".join(message)
    assert "rejection_sample_method='fly' is lossy verification" in text, text
    assert f"{flow.upper()} refuses it" in text, text


def test_fly_with_real_acceptance_is_labelled_lossy() -> None:
    launch = build_launch(server_config(_FLY))
    assert any(w.startswith("LOSSY verification: rejection_sample_method='fly'") for w in launch.warnings)
    assert (
        json.loads(launch.argv[launch.argv.index("--speculative-config") + 1])["rejection_sample_method"]
        == "fly"
    )


def test_fly_in_m2_cannot_be_forced_and_says_so() -> None:
    """M2 forces acceptance through vLLM's own rejection method ('synthetic'): 'fly' cannot also run."""
    params = BenchmarkParams.model_validate({**_flow_params("m2"), "target_al": 2.5})
    assert params.server.speculative is not None
    assert params.server.speculative.lossy_verification
    with pytest.raises(
        RecipeError, match="rejection_sample_method='fly' cannot apply with synthetic acceptance"
    ):
        build_launch(server_config({**_FLY, "synthetic": SYNTHETIC}))


def test_dspark_ragged_mode_above_al_1_keeps_the_verify_all_refusal() -> None:
    fields = {**_DSPARK, "extra_env": {"SGLANG_RAGGED_VERIFY_MODE": "compact"}, "synthetic": SYNTHETIC}
    with pytest.raises(RecipeError, match="SGLANG_RAGGED_VERIFY_MODE='compact'"):
        build_launch(server_config(fields))
