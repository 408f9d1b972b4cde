"""What is measured: the model, its sampling and thinking mode, the speculative method and K, synthetic acceptance, the M1 tolerances."""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Annotated, Final, Literal, Self

from pydantic import BeforeValidator, Field, field_validator, model_validator

from alflow.acceptance.synthetic import K_MAX, K_MIN, SCHEMES, SyntheticTarget, get_scheme
from alflow.config.base import MAX_SEQUENCE_TOKENS, StrictModel
from alflow.util.names import check_identifier


class SpecMethod(StrEnum):
    """Speculative decoding method."""

    MTP = "mtp"
    EAGLE3 = "eagle3"
    DRAFT_MODEL = "draft_model"
    NGRAM = "ngram"
    DSPARK = "dspark"
    DFLASH = "dflash"
    DFLASH2 = "dflash2"
    """DFlash 2 (a top-k path selector and dynamic convolutions over DFlash's block drafter); SGLang only,
    ``--speculative-algorithm dflash2`` (sgl-project/sglang PR #35371, v0.5.19)."""


UNMAPPED_METHODS: dict[str, str] = {
    "sa": "TensorRT-LLM's SA drafter",
    "pard": "PARD (parallel draft model; TensorRT-LLM and vLLM)",
    "pearl": "TensorRT-LLM's PEARL (parallel drafting with an adaptive draft length)",
}
"""Drafters the frameworks added in 2026 (DOMAIN.md section 10) that alflow does not drive: their launch keys,
synthetic-acceptance path and counters are not verified against the frameworks' sources here. PEARL's draft length
varies at run time, which synthetic acceptance forbids. Refused by name (:func:`known_method`)."""


def known_method(value: object) -> object:
    """A 2026 drafter alflow does not drive (:data:`UNMAPPED_METHODS`) is refused by name, with why."""
    name = value.strip().lower() if isinstance(value, str) else None
    if name in UNMAPPED_METHODS:
        offered = ", ".join(m.value for m in SpecMethod)
        raise ValueError(
            f"method {value!r} ({UNMAPPED_METHODS[name]}) is not driven by alflow: its launch keys, synthetic "
            f"acceptance and counters are not verified here, so a run could not be audited; use one of {offered}"
        )
    return value


Method = Annotated[SpecMethod, BeforeValidator(known_method)]
"""A speculative method field: a :class:`SpecMethod`, an unmapped 2026 drafter refused by name."""

BLOCK_DRAFTERS = frozenset({SpecMethod.DSPARK, SpecMethod.DFLASH, SpecMethod.DFLASH2})
"""Drafters that propose a whole block of K tokens in one forward pass (not one head call per token)."""


class ThinkingMode(StrEnum):
    """Whether the model reasons before answering (toggled per request via the chat template)."""

    ON = "on"
    OFF = "off"


NumSpecTokens = Annotated[
    int, Field(ge=K_MIN, le=K_MAX, description="Number of speculative tokens K (1..16).")
]


class SamplingParams(StrictModel):
    """Sampling parameters sent with each request (None: the server's default)."""

    temperature: float = Field(0.0, ge=0.0, le=10.0, description="Sampling temperature; 0 is greedy.")
    top_p: float | None = Field(None, gt=0.0, le=1.0, description="Nucleus sampling mass.")
    top_k: int | None = Field(
        None, ge=-1, le=2**31 - 1, description="Top-k sampling; -1 or None disables it (at most 2**31 - 1)."
    )
    min_p: float | None = Field(
        None, ge=0.0, le=1.0, description="Minimum probability relative to the top token."
    )
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0, description="OpenAI presence penalty.")
    repetition_penalty: float | None = Field(None, gt=0.0, description="Multiplicative repetition penalty.")
    max_tokens: int = Field(
        4096, ge=1, le=MAX_SEQUENCE_TOKENS, description="Output token cap per request (always sent)."
    )
    seed: int | None = Field(None, description="Per-request seed for reproducible sampling, where supported.")

    def request_fields(self) -> dict[str, float | int]:
        """The fields to put in an OpenAI-compatible request body (unset ones omitted)."""
        return {k: v for k, v in self.model_dump().items() if v is not None}


class ThinkingToggle(StrEnum):
    """How a model's chat template switches reasoning on and off."""

    ENABLE_THINKING = "enable_thinking"
    THINKING = "thinking"
    NONE = "none"


class ModelSpec(StrictModel):
    """A model under test and its provider-recommended sampling per thinking mode."""

    id: str = Field(min_length=1, description="Model id as served (e.g. a Hugging Face repo id).")
    revision: str = Field(
        "main", min_length=1, description="Model revision (commit hash for auditable runs)."
    )
    reasoning: bool = Field(False, description="Whether the model reasons (supports thinking on and off).")
    thinking_toggle: ThinkingToggle | None = Field(
        None,
        description=(
            "Chat-template switch for thinking: 'enable_thinking' (Qwen3 style, on by default), "
            "'thinking' (DeepSeek-V3.1 style, off by default) or 'none'; default: 'enable_thinking' for a "
            "reasoning model, 'none' otherwise."
        ),
    )
    sampling_thinking_on: SamplingParams = Field(
        default=SamplingParams(), description="Provider-recommended sampling with thinking on."
    )
    sampling_thinking_off: SamplingParams = Field(
        default=SamplingParams(), description="Provider-recommended sampling with thinking off."
    )

    @field_validator("id")
    @classmethod
    def _identifier(cls, value: str) -> str:
        """No control character in the model id (:func:`alflow.util.names.check_identifier`)."""
        return check_identifier(value, what="model id")

    def sampling(self, thinking: ThinkingMode) -> SamplingParams:
        """The recommended sampling for a thinking mode."""
        return self.sampling_thinking_on if thinking is ThinkingMode.ON else self.sampling_thinking_off

    @property
    def toggle(self) -> ThinkingToggle:
        """The thinking switch in effect (the default depends on ``reasoning``)."""
        if self.thinking_toggle is not None:
            return self.thinking_toggle
        return ThinkingToggle.ENABLE_THINKING if self.reasoning else ThinkingToggle.NONE

    def chat_template_kwargs(self, thinking: ThinkingMode) -> dict[str, bool]:
        """The ``chat_template_kwargs`` that select ``thinking`` for this model."""
        if self.toggle is ThinkingToggle.NONE:
            return {}
        return {self.toggle.value: thinking is ThinkingMode.ON}

    @model_validator(mode="after")
    def _toggle_needs_reasoning(self) -> Self:
        if not self.reasoning and self.toggle is not ThinkingToggle.NONE:
            raise ValueError(
                f"thinking_toggle={self.toggle.value!r} needs reasoning=true (a non-reasoning model has no thinking mode)"
            )
        return self


LOSSY_REJECTION_METHODS: dict[str, str] = {
    "fly": (
        "FLy (arXiv:2511.22972) keeps a rejected draft at a high-entropy position when the next drafts would be "
        "accepted: lossy by design, the output does not follow the target model's distribution (vLLM "
        "rejection_sample_method 'fly': vllm-project/vllm PR #50808, closed unmerged, and PR #53987, open at the "
        "time of writing; check the pinned image)"
    ),
}
"""vLLM rejection sample methods that do not preserve the target distribution, and why (DOMAIN.md section 9):
never a reference (M0) or a gate (M1); labelled lossy wherever else they run."""


class SpeculativeConfig(StrictModel):
    """The speculative decoding method and its number of draft tokens."""

    method: Method = Field(
        description=(
            "Speculative method: mtp, eagle3, draft_model, ngram, or the block drafters dspark, dflash and "
            "dflash2 (K tokens drafted in one pass; dflash2 on SGLang only)."
        )
    )
    k: NumSpecTokens
    draft_model: str | None = Field(
        None,
        description=(
            "Drafter model id (required for draft_model, eagle3, dflash and dflash2; optional for dspark, whose "
            "drafter ships inside some checkpoints such as DeepSeek-V4; unused for mtp and ngram)."
        ),
    )
    prompt_lookup_min: int | None = Field(None, ge=1, description="n-gram: minimum lookup window.")
    prompt_lookup_max: int | None = Field(None, ge=1, description="n-gram: maximum lookup window.")
    rejection_sample_method: Literal["standard", "block", "fly"] | None = Field(
        None,
        description=(
            "vLLM only: how the target verifies drafts: 'standard' (token by token, vLLM's default), "
            "'block' (block verification, vLLM v0.25.0 and newer) or 'fly' (FLy, entropy-gated deferred "
            "verification: LOSSY, the output no longer follows the target's distribution; refused for M0 and M1, "
            "labelled lossy elsewhere). Synthetic acceptance sets 'synthetic' itself; None: the framework's default."
        ),
    )
    draft_sample_method: Literal["greedy", "probabilistic"] | None = Field(
        None,
        description=(
            "vLLM only: how the drafter picks its tokens: 'greedy' (vLLM's default) or 'probabilistic' "
            "(sampled, with the draft probabilities passed to the rejection sampler); None: the default."
        ),
    )

    @field_validator("draft_model")
    @classmethod
    def _identifier(cls, value: str | None) -> str | None:
        """No control character in the drafter's id (:func:`alflow.util.names.check_identifier`)."""
        return None if value is None else check_identifier(value, what="draft_model")

    @property
    def lossy_verification(self) -> str | None:
        """Why this verification is lossy (:data:`LOSSY_REJECTION_METHODS`), or None for a lossless one."""
        method = self.rejection_sample_method
        return None if method is None else LOSSY_REJECTION_METHODS.get(method)

    def refuse_lossy(self, flow: str) -> None:
        """Raise ``ValueError`` (one line) when ``flow`` (M0, M1) would run a lossy verification."""
        why = self.lossy_verification
        if why is not None:
            raise ValueError(
                f"server.speculative.rejection_sample_method={self.rejection_sample_method!r} is lossy verification "
                f"({why}): never a reference or a gate, so {flow} refuses it; use 'standard' or 'block' (or leave it "
                "unset), and measure 'fly' only as a labelled benchmark"
            )

    @model_validator(mode="after")
    def _check_method_fields(self) -> Self:
        if (
            self.method in (SpecMethod.DRAFT_MODEL, SpecMethod.EAGLE3, SpecMethod.DFLASH, SpecMethod.DFLASH2)
            and not self.draft_model
        ):
            raise ValueError(f"method {self.method.value!r} needs draft_model (the drafter's model id)")
        if self.method is not SpecMethod.NGRAM and (self.prompt_lookup_min or self.prompt_lookup_max):
            raise ValueError("prompt_lookup_min/prompt_lookup_max apply only to method 'ngram'")
        lo, hi = self.prompt_lookup_min, self.prompt_lookup_max
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"prompt_lookup_min={lo} is larger than prompt_lookup_max={hi}")
        return self


class SyntheticAcceptance(StrictModel):
    """A synthetic-acceptance request: a target AL or explicit rates, and the scheme."""

    target_al: float | None = Field(
        None, description="Target acceptance length L, bonus token included (1 <= L <= K+1)."
    )
    rates: tuple[float, ...] | None = Field(
        None, description="Explicit unconditional per-position rates p_1..p_K (non-increasing, in [0, 1])."
    )
    scheme: str | None = Field(
        None,
        description=f"Scheme ({', '.join(SCHEMES)}); None: the framework's own default.",
    )

    @field_validator("scheme")
    @classmethod
    def _known_scheme(cls, value: str | None) -> str | None:
        if value is not None:
            get_scheme(value)
        return value

    @model_validator(mode="after")
    def _one_target(self) -> Self:
        if (self.target_al is None) == (self.rates is None):
            raise ValueError("give exactly one of target_al or rates")
        if self.target_al is not None and (not math.isfinite(self.target_al) or self.target_al < 1.0):
            raise ValueError(f"target_al={self.target_al!r} must be a finite number >= 1")
        return self

    def target(self, k: int) -> SyntheticTarget:
        """Validate against K and return the target (raises a clear error when out of range)."""
        return SyntheticTarget.of(k, al=self.target_al, rates=self.rates)


MAX_GATE_ABS_TOL: Final = 0.5
"""The largest M1 ``abs_tol``: half an accepted token per step below the reference (the default is 0.05)."""
MAX_GATE_REL_TOL: Final = 0.25
"""The largest M1 ``rel_tol``: a quarter of the reference (the default is 0.03)."""


class GateTolerances(StrictModel):
    """How far below the reference AL a framework under test may fall (M1).

    Threshold ``= reference - max(abs_tol, rel_tol * reference)``.
    """

    abs_tol: float = Field(
        0.05,
        ge=0.0,
        le=MAX_GATE_ABS_TOL,
        description="Absolute AL tolerance below the reference, 0 to 0.5 AL (more lets any AL pass).",
    )
    rel_tol: float = Field(
        0.03,
        ge=0.0,
        le=MAX_GATE_REL_TOL,
        description=(
            "Relative AL tolerance (fraction of the reference), 0 to 0.25 (more puts the threshold of a "
            "reference near 2 at 1, where every AL passes)."
        ),
    )
    use_ci: Literal["point", "upper"] = Field(
        "upper",
        description=(
            "Compare the threshold with the AL point estimate ('point') or with the upper bound of its "
            "confidence interval ('upper': fail only when the AL is confidently below the threshold)."
        ),
    )
    confidence: float = Field(
        0.95, gt=0.5, lt=1.0, description="Confidence level of the AL interval the gate compares (use_ci)."
    )

    def al_threshold(self, reference_al: float) -> float:
        """``reference - max(abs_tol, rel_tol * reference)``, never below 1."""
        return max(1.0, reference_al - max(self.abs_tol, self.rel_tol * reference_al))
