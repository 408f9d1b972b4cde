"""Hardware/model timing profiles: a roofline-style step-time model for the simulated engine.

One engine step runs a batch of ``B`` decoding requests, each verifying ``K`` drafts (``K + 1``
positions), plus the prefill of newly admitted prompts. Its time is the larger of the memory time and
the compute time, plus a fixed overhead and the drafter's cost:

- memory: ``weights_read_bytes(B) / bw + sum(ctx_b) * kv_bytes_per_token / bw``; a dense model reads
  every weight once per step; a mixture-of-experts model reads its dense part and the experts that
  the step's ``B * (K + 1)`` tokens touch: ``expert_bytes * (1 - (1 - top_k / experts) ^ tokens)``;
- compute: ``B * (K + 1) * 2 * active_params / flops``;
- drafter: ``K * (draft_bytes * m / bw + overhead_per_draft_s)`` where ``m`` is the method's size
  factor (:data:`DRAFT_COST_FACTOR`: an MTP or EAGLE head 1, a separate draft model 4, n-gram lookup
  0, which also has no per-draft overhead): an autoregressive drafter runs once per draft token. A
  block drafter (:data:`BLOCK_DRAFTERS`: DSpark, DFlash) proposes all K tokens in **one** pass: its
  cost is ``draft_bytes * m / bw + overhead_per_draft_s + B * K * 2 * draft_bytes * m / flops``
  (FP8: a byte per parameter), one weight read whatever K is plus the compute of the B x K drafted
  tokens, so its cost grows far slower with K than MTP's;
- prefill: ``prompt_tokens * 2 * active_params / flops_prefill`` (compute bound).

Bandwidth and FLOPs are the peak figures times an efficiency. The predicted time per output token at
concurrency 1 is ``mean step time / AL`` (:func:`predicted_tpot_s`).

Multi-node (issue 10). A profile describes the GPUs of **one node**. A server spanning ``N`` nodes
runs in one of two ways (``alflow sim serve --nnodes N --node-parallel tp|dp``):

- ``tp``: one model split over the ``N`` nodes (tensor/expert parallel across hosts).
  :meth:`Profile.across_nodes` gives the profile of the whole group: ``N`` times the bandwidth and
  FLOPs (each node reads ``1/N`` of the weights and does ``1/N`` of the math per step), the same
  drafter (replicated, not split) and step overhead, plus ``internode_step_s`` per verify step for
  the all-reduces that cross the node boundary. So a verify step takes
  ``max(memory_s / N, compute_s / N) + draft_s + overhead + internode_step_s``: faster than on one
  node when the step is bandwidth or compute bound, never ``N`` times faster.
- ``dp``: one engine per node (data-parallel ranks), each with the one-node profile; requests go to
  the ranks in turn, so the group serves ``N`` times the requests at the same per-rank batch.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from alflow.errors import InvalidInputError


@dataclass(frozen=True)
class Profile:
    """One named GPU + model timing profile (all sizes in bytes, rates per second)."""

    name: str
    description: str
    hbm_bytes_per_s: float
    flops_per_s: float
    dense_weight_bytes: float
    active_params: float
    kv_bytes_per_token: float
    draft_weight_bytes: float
    step_overhead_s: float
    draft_overhead_s: float
    expert_weight_bytes: float = 0.0
    """Routed experts' weights of a mixture-of-experts model (0 with ``num_experts``: a dense model)."""
    num_experts: int = 0
    experts_per_token: int = 0
    bandwidth_efficiency: float = 0.8
    compute_efficiency: float = 0.6
    internode_step_s: float = 0.0008
    """Extra seconds per verify step when the model spans nodes (all-reduces over the inter-node network)."""
    nodes: int = 1
    """Nodes this profile's hardware spans (1: one node; see :meth:`across_nodes`)."""

    def across_nodes(self, nodes: int) -> Profile:
        """Spread this one-node profile over ``nodes`` nodes (tensor/expert parallel across hosts).

        Bandwidth and FLOPs are multiplied by ``nodes``; the drafter and the step overhead stay; each
        verify step pays ``internode_step_s`` once ``nodes > 1`` (see the module docstring).
        """
        if nodes < 1:
            raise InvalidInputError(f"a profile spans at least 1 node, got nodes={nodes}")
        if self.nodes != 1:
            raise InvalidInputError(f"profile {self.name!r} already spans {self.nodes} nodes")
        if nodes == 1:
            return self
        return replace(
            self,
            name=f"{self.name}x{nodes}nodes",
            description=f"{nodes} nodes of: {self.description}",
            hbm_bytes_per_s=self.hbm_bytes_per_s * nodes,
            flops_per_s=self.flops_per_s * nodes,
            nodes=nodes,
        )

    @property
    def internode_s(self) -> float:
        """Per verify step: ``internode_step_s`` when the profile spans more than one node, else 0."""
        return self.internode_step_s if self.nodes > 1 else 0.0

    @property
    def effective_bw(self) -> float:
        """Achieved memory bandwidth, bytes per second."""
        return self.hbm_bytes_per_s * self.bandwidth_efficiency

    @property
    def effective_flops(self) -> float:
        """Achieved compute rate, FLOP per second."""
        return self.flops_per_s * self.compute_efficiency

    def weights_read_bytes(self, tokens: int) -> float:
        """Weight bytes read by one forward pass over ``tokens`` tokens (MoE: experts touched)."""
        if self.num_experts <= 0 or self.expert_weight_bytes <= 0:
            return self.dense_weight_bytes
        untouched = (1.0 - self.experts_per_token / self.num_experts) ** max(tokens, 1)
        return self.dense_weight_bytes + self.expert_weight_bytes * (1.0 - untouched)

    def decode_step_s(self, batch: int, k: int, context_tokens: int, method: str = "mtp") -> float:
        """Seconds for one verify step of ``batch`` requests with ``context_tokens`` KV tokens in all."""
        if batch <= 0:
            return 0.0
        tokens = batch * (k + 1)
        bw = self.effective_bw
        memory_s = (self.weights_read_bytes(tokens) + context_tokens * self.kv_bytes_per_token) / bw
        compute_s = tokens * 2.0 * self.active_params / self.effective_flops
        factor = DRAFT_COST_FACTOR.get(method, 1.0)
        node_bw = bw / self.nodes  # the drafter is replicated on every node, not split
        one_pass = self.draft_weight_bytes * factor / node_bw + (self.draft_overhead_s if factor else 0.0)
        if method in BLOCK_DRAFTERS:
            # one forward pass over K positions per request: one weight read, and 2 FLOP per parameter per
            # token (FP8 profiles: one byte per parameter)
            node_flops = self.effective_flops / self.nodes
            draft_s = one_pass + 2.0 * batch * k * self.draft_weight_bytes * factor / node_flops
        else:
            draft_s = k * one_pass
        return max(memory_s, compute_s) + draft_s + self.step_overhead_s + self.internode_s

    def prefill_s(self, prompt_tokens: int) -> float:
        """Seconds to prefill ``prompt_tokens`` tokens (compute bound)."""
        if prompt_tokens <= 0:
            return 0.0
        return prompt_tokens * 2.0 * self.active_params / self.effective_flops

    def step_s(
        self, batch: int, k: int, context_tokens: int, prefill_tokens: int, method: str = "mtp"
    ) -> float:
        """Seconds for one engine step: verify of ``batch`` requests plus prefill of new prompts."""
        return self.decode_step_s(batch, k, context_tokens, method) + self.prefill_s(prefill_tokens)


def predicted_tpot_s(
    profile: Profile, k: int, al: float, prompt_tokens: int, output_tokens: int, method: str = "mtp"
) -> float:
    """Predicted time per output token at concurrency 1: ``mean verify-step time / AL``.

    The context grows from ``prompt_tokens`` to ``prompt_tokens + output_tokens``; step time is
    linear in it, so the mean is the step time at the midpoint. Interactivity is ``1 / TPOT``.
    """
    if al < 1.0:
        raise InvalidInputError(f"AL={al} must be at least 1")
    mid = prompt_tokens + output_tokens // 2
    return profile.decode_step_s(1, k, mid, method) / al


_GB = 1e9

DRAFT_COST_FACTOR: dict[str, float] = {
    "mtp": 1.0,
    "eagle3": 1.0,
    "draft_model": 4.0,
    "ngram": 0.0,
    "dspark": 1.0,
    "dflash": 2.0,
}
"""Drafter size relative to the profile's draft head (n-gram lookup costs nothing); per pass."""
BLOCK_DRAFTERS = frozenset({"dspark", "dflash"})
"""Methods whose drafter proposes all K tokens in one forward pass."""

PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile(
            name="h200-llama70b",
            description="one H200 (4.8 TB/s HBM3e, 1979 TFLOP/s FP8 dense), Llama-3.3-70B in FP8, "
            "GQA KV cache in BF16 (80 layers x 8 heads x 128 x 2 x 2 bytes per token)",
            hbm_bytes_per_s=4.8e12,
            flops_per_s=1979e12,
            dense_weight_bytes=70.6 * _GB,
            active_params=70.6e9,
            kv_bytes_per_token=80 * 8 * 128 * 2 * 2,
            draft_weight_bytes=1.5 * _GB,
            step_overhead_s=0.0015,
            draft_overhead_s=0.0002,
        ),
        Profile(
            name="h200-moe-large",
            description="8 x H200 (TP8), a DeepSeek-V3-class MoE (671B total, 37B active, 256 routed "
            "experts, top-8) in FP8 with an MLA KV cache (about 70 KB per token)",
            hbm_bytes_per_s=8 * 4.8e12,
            flops_per_s=8 * 1979e12,
            dense_weight_bytes=17 * _GB,
            expert_weight_bytes=654 * _GB,
            num_experts=256,
            experts_per_token=8,
            active_params=37e9,
            kv_bytes_per_token=70_272,
            draft_weight_bytes=11 * _GB,
            step_overhead_s=0.004,
            draft_overhead_s=0.0005,
        ),
        Profile(
            name="h200-llama8b",
            description="one H200, Llama-3.1-8B in BF16 (32 layers x 8 heads x 128 x 2 x 2 bytes per token)",
            hbm_bytes_per_s=4.8e12,
            flops_per_s=989e12,
            dense_weight_bytes=16.1 * _GB,
            active_params=8.03e9,
            kv_bytes_per_token=32 * 8 * 128 * 2 * 2,
            draft_weight_bytes=0.5 * _GB,
            step_overhead_s=0.001,
            draft_overhead_s=0.0001,
        ),
    )
}
"""Every named profile: the whole registry."""

DEFAULT_PROFILE = "h200-llama70b"


def get_profile(name: str) -> Profile:
    """Look a profile up by name, with an error listing the known names."""
    try:
        return PROFILES[name]
    except KeyError:
        raise InvalidInputError(f"unknown profile {name!r}; known: {', '.join(PROFILES)}") from None
