"""vLLM's synthetic-acceptance knobs.

A fragment of ``--speculative-config``: ``"rejection_sample_method": "synthetic"`` and
exactly one of ``synthetic_acceptance_length`` or ``synthetic_acceptance_rates``.
"""

from __future__ import annotations

from dataclasses import dataclass

from alflow.acceptance.knobs import KnobRequest, SyntheticKnobs, json_number, only_scheme
from alflow.acceptance.synthetic import (
    get_scheme,
)


@dataclass(frozen=True)
class VllmKnobs:
    """vLLM: the synthetic keys of ``--speculative-config``."""

    framework: str = "vllm"
    default_scheme: str = "vllm"

    def render(self, request: KnobRequest) -> SyntheticKnobs:
        """``synthetic_acceptance_length`` for a target AL, ``synthetic_acceptance_rates`` for rates."""
        only_scheme(self, request, ("vllm",))
        target = request.target()
        fragment: dict[str, object] = {"rejection_sample_method": "synthetic"}
        if target.al is not None:
            fragment["synthetic_acceptance_length"] = json_number(target.al)
        else:
            assert target.rates is not None
            fragment["synthetic_acceptance_rates"] = [json_number(r) for r in target.rates]
        return SyntheticKnobs(
            "vllm",
            target.k,
            "vllm",
            speculative_config=fragment,
            distribution=get_scheme("vllm").distribution(target),
        )
