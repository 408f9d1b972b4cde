"""SGLang's server configuration (``python -m sglang.launch_server``), one server or prefill/decode disaggregated."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Literal, Self

from pydantic import Field, model_validator

from alflow.config.server import Disaggregation, Parallelism, ServerBase, attention_dp_gpus, dp_gpus


class SglangServer(ServerBase):
    """SGLang (``python -m sglang.launch_server``), one server or prefill/decode disaggregated."""

    OWN_FIELDS: ClassVar[Mapping[str, str]] = {
        "disaggregation": "disaggregation is supported for framework 'sglang' only, not {framework!r}: vLLM's "
        "disaggregated prefill is experimental and needs a KV connector plus a proxy from its examples, "
        "TensorRT-LLM's disaggregated serving (trtllm-serve disaggregated) is not wired into alflow, and the "
        "simulator has no disaggregated mode. Start such a server yourself and attach with the external runner "
        "(metrics_urls: the decode instances)",
    }

    framework: Literal["sglang"] = Field("sglang", description="Serving framework: sglang.")
    disaggregation: Disaggregation | None = Field(
        None,
        description=(
            "Prefill and decode instances on separate nodes behind a router (SGLang only); nodes must then be "
            "the total of both roles, and parallelism is set per role. None: one server."
        ),
    )

    def instance_gpus(self, parallelism: Parallelism) -> int:
        """``tp x pp x dp``, or ``tp x pp`` with ``--enable-dp-attention`` (attention DP over the TP ranks)."""
        if "--enable-dp-attention" in self.extra_args:
            return attention_dp_gpus(parallelism)
        return dp_gpus(parallelism)

    def disaggregated(self) -> Disaggregation | None:
        """``disaggregation``."""
        return self.disaggregation

    @model_validator(mode="after")
    def _disaggregation_layout(self) -> Self:
        dis = self.disaggregation
        if dis is None:
            return self
        if self.parallelism != Parallelism():
            raise ValueError(
                "with disaggregation, parallelism is set per role (disaggregation.prefill.parallelism, "
                "disaggregation.decode.parallelism); leave the top-level parallelism unset"
            )
        if self.nodes != dis.total_nodes:
            raise ValueError(
                f"nodes={self.nodes} but the disaggregated layout uses {dis.total_nodes} node(s) (prefill "
                f"{dis.prefill.replicas} x {dis.prefill.nodes}, decode {dis.decode.replicas} x {dis.decode.nodes}): "
                f"set nodes: {dis.total_nodes}"
            )
        return self
