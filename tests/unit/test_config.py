"""User configuration models: frozen, strict, described."""

from __future__ import annotations

import inspect

import pydantic
import pytest

from alflow import config
from alflow.acceptance.synthetic import SyntheticAcceptanceError
from alflow.config import (
    GateTolerances,
    ModelSpec,
    SamplingParams,
    SpecMethod,
    SpeculativeConfig,
    SyntheticAcceptance,
    ThinkingMode,
)
from alflow.plugins import config_model_of, config_models
from alflow.reference import table as reference
from tests.simconfig import FRAMEWORKS

pytestmark = pytest.mark.unit

MODELS = [
    *(
        obj
        for module in (config, reference)
        for _, obj in inspect.getmembers(module, inspect.isclass)
        if issubclass(obj, config.StrictModel) and obj is not config.StrictModel
    ),
    *config_models(),  # the server-config variants, in their plugins' folders
]


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_every_field_has_a_description_and_models_are_strict(model: type[config.StrictModel]) -> None:
    assert model.model_config.get("frozen") is True
    if issubclass(
        model, config.ServerBase
    ):  # extra fields are collected to be refused with a clearer message
        assert model.model_config.get("extra") == "allow"
        assert model.model_json_schema().get("additionalProperties") is False
    else:
        assert model.model_config.get("extra") == "forbid"
    for name, info in model.model_fields.items():
        assert info.description, f"{model.__name__}.{name} has no description"


def test_frozen_and_extra_forbidden() -> None:
    s = SamplingParams(temperature=0.6)
    with pytest.raises(pydantic.ValidationError):
        s.temperature = 1.0  # type: ignore[misc]
    with pytest.raises(pydantic.ValidationError, match="Extra inputs are not permitted"):
        SamplingParams(temprature=0.6)  # type: ignore[call-arg]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_every_server_variant_refuses_unknown_and_other_frameworks_fields(framework: str) -> None:
    with pytest.raises(
        pydantic.ValidationError, match="Extra inputs are not permitted: 'colour' is not a field"
    ):
        config.server_config(framework=framework, model="m", colour="red")
    fields = {name: set(config_model_of(name).model_fields) for name in FRAMEWORKS}
    for other in FRAMEWORKS:  # each other framework's own fields, named as theirs
        for field in sorted(fields[other] - fields[framework])[:3]:
            with pytest.raises(pydantic.ValidationError) as refused:
                config.server_config(framework=framework, model="m", **{field: 1})
            said = str(refused.value)
            assert field in said, said
            assert " only" in said or f"not a setting of {framework!r}" in said, said
    made = config.server_config(framework=framework, model="m")
    assert type(made).__name__.lower().startswith(framework)
    assert config.server_config(made.model_dump()) == made


def test_model_spec_thinking_toggle() -> None:
    qwen = ModelSpec(id="Qwen/Qwen3-8B", reasoning=True, sampling_thinking_on=SamplingParams(temperature=0.6))
    assert qwen.chat_template_kwargs(ThinkingMode.OFF) == {"enable_thinking": False}
    assert qwen.sampling(ThinkingMode.ON).temperature == 0.6
    ds = ModelSpec(id="deepseek", reasoning=True, thinking_toggle="thinking")
    assert ds.chat_template_kwargs(ThinkingMode.ON) == {"thinking": True}
    assert ModelSpec(id="llama").chat_template_kwargs(ThinkingMode.ON) == {}
    with pytest.raises(pydantic.ValidationError, match="needs reasoning=true"):
        ModelSpec(id="llama", thinking_toggle="thinking")


def test_speculative_config_rules() -> None:
    assert SpeculativeConfig(method="mtp", k=3).method is SpecMethod.MTP
    with pytest.raises(pydantic.ValidationError, match="less than or equal to 16"):
        SpeculativeConfig(method="mtp", k=17)
    with pytest.raises(pydantic.ValidationError, match="needs draft_model"):
        SpeculativeConfig(method="draft_model", k=3)
    with pytest.raises(pydantic.ValidationError, match="apply only to method 'ngram'"):
        SpeculativeConfig(method="mtp", k=3, prompt_lookup_max=4)
    with pytest.raises(pydantic.ValidationError, match="larger than prompt_lookup_max"):
        SpeculativeConfig(method="ngram", k=3, prompt_lookup_min=5, prompt_lookup_max=2)


def test_synthetic_acceptance_request() -> None:
    assert SyntheticAcceptance(target_al=2.5).target(3).al == 2.5
    assert SyntheticAcceptance(rates=(1.0, 0.5)).target(2).mean_al == 2.5
    with pytest.raises(pydantic.ValidationError, match="exactly one of target_al or rates"):
        SyntheticAcceptance()
    with pytest.raises(pydantic.ValidationError, match="unknown synthetic-acceptance scheme"):
        SyntheticAcceptance(target_al=2.0, scheme="magic")
    with pytest.raises(SyntheticAcceptanceError, match="outside the allowed range"):
        SyntheticAcceptance(target_al=5.0).target(3)


def test_gate_threshold() -> None:
    tol = GateTolerances(abs_tol=0.05, rel_tol=0.03)
    assert tol.al_threshold(3.0) == pytest.approx(2.91)
    assert tol.al_threshold(1.5) == pytest.approx(1.45)
    assert tol.al_threshold(1.0) == 1.0
