"""Where a server's GPUs are: the :class:`~alflow.metrics.client.GpuLayout` and node counts of a config.

Per-GPU throughput (DOMAIN.md section 5) divides by the GPUs behind the endpoint: ``tp x pp x dp`` of
one server (attention data parallelism adding none, see :meth:`alflow.config.ServerBase.instance_gpus`), or, for
a disaggregated server, output per decode GPU and input per prefill GPU over every instance of each
role. Flows build the layout here, never from the parallelism by hand, so multi-node and
disaggregated configurations count every node's GPUs.
"""

from __future__ import annotations

from alflow.config import ServerConfig
from alflow.metrics.client import GpuLayout


def gpu_layout(config: ServerConfig) -> GpuLayout:
    """The GPUs serving ``config``: prefill/decode GPUs when disaggregated, else its parallelism."""
    dis = config.disaggregated()
    if dis is not None:
        return GpuLayout(
            prefill_gpus=config.role_gpus(dis.prefill) * dis.prefill.replicas,
            decode_gpus=config.role_gpus(dis.decode) * dis.decode.replicas,
            nodes=config.nodes,
        )
    par = config.parallelism
    # Data parallelism that adds GPUs counts as dp; attention DP over the TP ranks counts as none.
    dp = config.total_gpus // (par.tp * par.pp)
    return GpuLayout(tp=par.tp, pp=par.pp, dp=dp, nodes=config.nodes)


def topology(config: ServerConfig) -> dict[str, int | None]:
    """Node and GPU counts for results: nodes, GPUs in all, and prefill/decode GPUs when disaggregated."""
    layout = gpu_layout(config)
    return {
        "nodes": config.nodes,
        "gpus": layout.gpus,
        "prefill_gpus": layout.prefill_gpus,
        "decode_gpus": layout.decode_gpus,
    }
