"""TensorRT-LLM's server configuration (``trtllm-serve``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from alflow.config.server import Parallelism, TwoModelSwitch, attention_dp_gpus


class TrtllmServer(TwoModelSwitch):
    """TensorRT-LLM (``trtllm-serve``)."""

    framework: Literal["trtllm"] = Field("trtllm", description="Serving framework: trtllm.")

    def instance_gpus(self, parallelism: Parallelism) -> int:
        """``tp x pp``: TensorRT-LLM's dp is attention DP (``enable_attention_dp``, dp = tp)."""
        return attention_dp_gpus(parallelism)
