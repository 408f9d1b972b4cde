"""Sim settings from explicit flags and from the real frameworks' own switches."""

from __future__ import annotations

import json

import pytest

from alflow.errors import InvalidInputError
from alflow.sim.config import SimConfig, parse_rates, resolve

pytestmark = pytest.mark.unit


def test_vllm_speculative_config_sets_k_method_and_al() -> None:
    spec = json.dumps(
        {
            "method": "deepseek_mtp",
            "num_speculative_tokens": 4,
            "rejection_sample_method": "synthetic",
            "synthetic_acceptance_length": 2.5,
        }
    )
    cfg = resolve(SimConfig(), framework_args=["--speculative-config", spec])
    assert (cfg.k, cfg.method, cfg.synthetic_al, cfg.scheme) == (4, "mtp", 2.5, "vllm")


def test_vllm_rates_and_explicit_flag_wins() -> None:
    spec = json.dumps(
        {
            "num_speculative_tokens": 3,
            "rejection_sample_method": "synthetic",
            "synthetic_acceptance_rates": [0.9, 0.6, 0.3],
        }
    )
    cfg = resolve(SimConfig(), framework_args=["--speculative-config", spec])
    assert cfg.synthetic_rates == (0.9, 0.6, 0.3)
    cfg = resolve(
        SimConfig(k=5, synthetic_al=3.0),
        explicit=["k", "synthetic_al"],
        framework_args=["--speculative-config", spec],
    )
    assert (cfg.k, cfg.synthetic_al, cfg.synthetic_rates) == (5, 3.0, None)
    assert any("overrides" in n for n in cfg.notes)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("not json", "not valid JSON"),
        ("[1]", "JSON object"),
        ('{"synthetic_acceptance_length": 2}', "rejection_sample_method"),
        ('{"rejection_sample_method": "synthetic"}', "exactly one"),
        (
            '{"rejection_sample_method": "synthetic", "synthetic_acceptance_length": 2, '
            '"synthetic_acceptance_rates": [1, 1, 0]}',
            "exactly one",
        ),
        ('{"method": "medusa"}', "not simulated"),
        (
            '{"num_speculative_tokens": 3, "rejection_sample_method": "synthetic", '
            '"synthetic_acceptance_rates": [0.5, 0.9, 0.1]}',
            "non-increasing",
        ),
        (
            '{"num_speculative_tokens": 3, "rejection_sample_method": "synthetic", '
            '"synthetic_acceptance_length": 5}',
            "outside the allowed range",
        ),
    ],
)
def test_vllm_speculative_config_errors(spec: str, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        resolve(SimConfig(), framework_args=["--speculative-config", spec])


def test_sglang_env() -> None:
    cfg = resolve(SimConfig(dialect="sglang"), env={"SGLANG_SIMULATE_ACC_LEN": "2.2"})
    assert (cfg.synthetic_al, cfg.scheme) == (2.2, "sglang-match-expected")
    cfg = resolve(
        SimConfig(dialect="sglang"),
        env={"SGLANG_SIMULATE_ACC_LEN": "3.39", "SGLANG_SIMULATE_ACC_METHOD": "multinomial"},
    )
    assert cfg.scheme == "sglang-multinomial"
    off = resolve(SimConfig(dialect="sglang"), env={"SGLANG_SIMULATE_ACC_LEN": "-1"})
    assert not off.synthetic


def test_trtllm_env_counts_drafts() -> None:
    cfg = resolve(SimConfig(dialect="trtllm"), env={"TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS": "1.5"})
    assert (cfg.synthetic_al, cfg.scheme) == (2.5, "trtllm")
    with pytest.raises(InvalidInputError, match="AL - 1"):
        resolve(SimConfig(dialect="trtllm"), env={"TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS": "-2"})


def test_other_dialects_sources_are_errors_or_ignored() -> None:
    with pytest.raises(InvalidInputError, match="--speculative-config is vllm's switch"):
        resolve(SimConfig(dialect="sglang"), framework_args=["--speculative-config", "{}"])
    cfg = resolve(SimConfig(dialect="vllm"), env={"SGLANG_SIMULATE_ACC_LEN": "3"})
    assert not cfg.synthetic


@pytest.mark.parametrize(
    "cfg",
    [
        SimConfig(dialect="tgi"),  # type: ignore[arg-type]
        SimConfig(method="medusa"),
        SimConfig(k=0),
        SimConfig(k=3, synthetic_al=0.5),
        SimConfig(k=3, synthetic_rates=(1.0, 0.5, 0.2), synthetic_scheme="trtllm"),
        SimConfig(synthetic_scheme="nope", synthetic_al=2.0),
        SimConfig(time_scale=-1),
        SimConfig(error_rate=1.5),
        SimConfig(profile="tpu-v9"),
        SimConfig(max_num_seqs=0),
    ],
)
def test_validate_rejects(cfg: SimConfig) -> None:
    with pytest.raises(InvalidInputError):
        cfg.validate()


def test_served_name_and_rates_parsing() -> None:
    assert SimConfig(model_name="x").served_model_name == "sim/x"
    assert SimConfig(model_name="sim/x").served_model_name == "sim/x"
    assert parse_rates("[1, 0.5,0.25]") == (1.0, 0.5, 0.25)
    with pytest.raises(InvalidInputError):
        parse_rates("a,b")


def test_sglang_token_mode() -> None:
    cfg = resolve(SimConfig(dialect="sglang"), env={"SGLANG_SIMULATE_ACC_LEN": "2"})
    assert cfg.fixed_token_output  # SGLang's default token mode emits token id 100
    cfg = resolve(
        SimConfig(dialect="sglang"),
        env={"SGLANG_SIMULATE_ACC_LEN": "2", "SGLANG_SIMULATE_ACC_TOKEN_MODE": "real-draft-token"},
    )
    assert not cfg.fixed_token_output
    assert not resolve(SimConfig(dialect="sglang")).fixed_token_output  # not synthetic
    with pytest.raises(InvalidInputError, match="TOKEN_MODE"):
        resolve(SimConfig(dialect="sglang"), env={"SGLANG_SIMULATE_ACC_TOKEN_MODE": "random"})
