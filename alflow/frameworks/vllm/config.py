"""vLLM's server configuration (``vllm serve``): the variant of :data:`alflow.config.ServerConfig` for framework 'vllm'."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Literal

from pydantic import Field

from alflow.config.server import ServerBase


class VllmServer(ServerBase):
    """vLLM (``vllm serve``)."""

    OWN_FIELDS: ClassVar[Mapping[str, str]] = {
        "model_path": "model_path (weights apart from the served name) is rendered for vLLM only, not {framework!r}: "
        "set model to the weights' path or id",
        "per_request_spec_decode_metrics": "per_request_spec_decode_metrics is vLLM's "
        "--per-request-spec-decode-metrics, not a setting of {framework!r}",
    }

    framework: Literal["vllm"] = Field("vllm", description="Serving framework: vllm.")
    model_path: str | None = Field(
        None,
        min_length=1,
        description=(
            "Where the weights are (a local folder or hub id); model is then only the name the server answers "
            "to (vLLM --served-model-name). None: load model."
        ),
    )
    per_request_spec_decode_metrics: Literal["none", "summary", "detailed"] | None = Field(
        None,
        description=(
            "vLLM --per-request-spec-decode-metrics: each response carries its request's acceptance histogram and "
            "step counts (vLLM 0.32.0+, PR #48915; detailed adds per-step arrays). None: summary where the release "
            "is known to have it (image tag, or the installed vLLM), else off. With speculation only."
        ),
    )

    def weights_path(self) -> str | None:
        """``model_path``: the weights, served under ``model``."""
        return self.model_path
