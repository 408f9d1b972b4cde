"""TensorRT-LLM's synthetic-acceptance knob.

``TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS = L - 1`` (it counts draft tokens).
The two-model path (NGram, or a drafter with ``two_model: true``) parses the value as an integer and turns the
feature off for a fractional one: refused here. DraftTarget is built as a one-engine external drafter by default
(``SpeculativeDecodingMode.DRAFT_TARGET_ONE_MODEL``, ``is_external_drafter()`` -> ``use_one_engine()`` in
tensorrt_llm/_torch/speculative/interface.py; NVIDIA/TensorRT-LLM PR #11758), so a fraction works there.
"""

from __future__ import annotations

from dataclasses import dataclass

from alflow.acceptance.knobs import KnobRequest, SyntheticKnobs, as_length, env_number, only_scheme
from alflow.acceptance.synthetic import (
    SyntheticAcceptanceError,
    SyntheticTarget,
    get_scheme,
)

TRTLLM_ENV = "TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS"
TWO_MODEL_METHODS = frozenset({"ngram"})
"""Methods on the two-model path by default: only NGram since DraftTarget became a one-engine drafter (PR #11758)."""


@dataclass(frozen=True)
class TrtllmKnobs:
    """TensorRT-LLM: ``TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS`` = AL - 1."""

    framework: str = "trtllm"
    default_scheme: str = "trtllm"

    def render(self, request: KnobRequest) -> SyntheticKnobs:
        """The draft-token count ``L - 1``; a fractional value on the two-model path is an error."""
        only_scheme(self, request, ("trtllm",))
        target = SyntheticTarget.of(*as_length(request.target(), f"TensorRT-LLM ({TRTLLM_ENV}, as AL - 1)"))
        assert target.al is not None
        value = round(target.al - 1.0, 12) + 0.0
        if value == 0.0:
            raise SyntheticAcceptanceError(
                f"TensorRT-LLM cannot force AL 1: {TRTLLM_ENV} counts accepted draft tokens (AL - 1 = 0 here), "
                "and TensorRT-LLM reads 0 as 'off' (`if force_num_accepted_tokens != 0`), so the run would measure "
                "real acceptance and call it synthetic. Use a target AL above 1 (e.g. 1.01 on the one-model "
                "path), or benchmark the server with speculative decoding off for the no-acceptance baseline"
            )
        two_model = (
            request.two_model if request.two_model is not None else request.method in TWO_MODEL_METHODS
        )
        if two_model and not value.is_integer():
            path = ", ".join(
                part
                for part in (
                    f"method {request.method}" if request.method else "",
                    "two-model mode requested" if request.two_model else "",
                )
                if part
            )
            raise SyntheticAcceptanceError(
                f"TensorRT-LLM's two-model path ({path}) parses {TRTLLM_ENV} as an integer: the value "
                f"{env_number(value)} (AL {env_number(target.al)} - 1) would log a warning and switch synthetic "
                f"acceptance off. Use a whole AL (1..{target.k + 1}) or a one-model method (mtp, eagle3 or draft_model "
                "without two_model)"
            )
        return SyntheticKnobs(
            "trtllm",
            target.k,
            "trtllm",
            env={TRTLLM_ENV: env_number(value)},
            distribution=get_scheme("trtllm").distribution(target),
        )
