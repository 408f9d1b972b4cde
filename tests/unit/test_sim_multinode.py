"""The sim's multi-node contract without processes: settings, timing across nodes, recipe, GPU layout."""

from __future__ import annotations

import collections

import pytest

from alflow.config import Parallelism, ServerConfig, server_config
from alflow.errors import InvalidInputError
from alflow.frameworks.launch import HEAD_ADDR, NNODES, NODE_RANK, MetricsEndpoint
from alflow.frameworks.recipes import build_launch
from alflow.methods.topology import gpu_layout
from alflow.metrics.client import GpuLayout
from alflow.sim.cluster import stats_from_dict, stats_to_dict
from alflow.sim.config import SimConfig
from alflow.sim.engine import SimEngine
from alflow.sim.profiles import DEFAULT_PROFILE, get_profile
from alflow.sim.stats import EngineStats
from alflow_infra.errors import RecipeError

pytestmark = pytest.mark.unit


def multi(**kw: object) -> SimConfig:
    base: dict[str, object] = {"port": 8100, "nnodes": 2, "dist_port": 8200}
    base.update(kw)
    return SimConfig(**base).validate()  # type: ignore[arg-type]


# --- settings ----------------------------------------------------------------------------------


def test_node_ports_offset_by_rank() -> None:
    assert multi().node_port == 8100
    assert multi(node_rank=1, head_addr="10.0.0.1").node_port == 8101
    assert SimConfig(port=0).validate().node_port == 0
    assert not SimConfig().validate().multi_node


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"node_rank": 2}, "--node-rank 2 must be below --nnodes 2"),
        ({"port": 0}, "needs an explicit --port"),
        ({"dist_port": None}, "needs --dist-port"),
        ({"dist_port": 8101}, "collides with the nodes' ports 8100..8101"),
        ({"node_rank": 1}, "needs --head-addr"),
        ({"node_parallel": "pp"}, "--node-parallel 'pp' is not one of tp, dp"),
        ({"peer_timeout_s": 0.4, "heartbeat_s": 0.5}, "must be longer than --heartbeat-interval"),
        ({"port": 65535}, r"--port \+ node rank=65536"),
    ],
)
def test_bad_multi_node_settings_name_the_flag(kw: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        multi(**kw)


# --- timing across nodes -----------------------------------------------------------------------


def test_profile_across_nodes_splits_weights_and_math_but_not_the_drafter() -> None:
    one = get_profile(DEFAULT_PROFILE)
    two = one.across_nodes(2)
    assert two.nodes == 2
    assert two.hbm_bytes_per_s == 2 * one.hbm_bytes_per_s
    assert two.flops_per_s == 2 * one.flops_per_s
    assert one.across_nodes(1) is one
    batch, k, ctx = 1, 3, 2000
    # the formula of the module docstring, computed here from the one-node profile's parts
    tokens = batch * (k + 1)
    memory_s = (one.weights_read_bytes(tokens) + ctx * one.kv_bytes_per_token) / one.effective_bw
    compute_s = tokens * 2.0 * one.active_params / one.effective_flops
    draft_s = k * (one.draft_weight_bytes / one.effective_bw + one.draft_overhead_s)
    assert one.decode_step_s(batch, k, ctx) == pytest.approx(
        max(memory_s, compute_s) + draft_s + one.step_overhead_s
    )
    expected_two = max(memory_s, compute_s) / 2 + draft_s + one.step_overhead_s + one.internode_step_s
    assert two.decode_step_s(batch, k, ctx) == pytest.approx(expected_two)
    # 70B at batch 1 is bandwidth bound: two nodes are faster, but not twice as fast (drafter, overhead,
    # inter-node all-reduces)
    ratio = one.decode_step_s(batch, k, ctx) / two.decode_step_s(batch, k, ctx)
    assert 1.3 < ratio < 2.0
    with pytest.raises(InvalidInputError, match="already spans 2 nodes"):
        two.across_nodes(2)
    with pytest.raises(InvalidInputError, match="at least 1 node"):
        one.across_nodes(0)


def test_engine_uses_the_group_profile_only_for_tp_across_nodes() -> None:
    assert SimEngine(multi(node_parallel="tp")).profile.nodes == 2
    assert (
        SimEngine(multi(node_parallel="dp")).profile.nodes == 1
    )  # one engine per node, each one node's GPUs
    assert SimEngine(SimConfig().validate()).profile.nodes == 1


def test_engine_stats_travel_between_head_and_worker() -> None:
    stats = EngineStats(k=3)
    stats.num_drafts, stats.accepted_tokens, stats.verify_tokens = 10, 14, 24
    stats.accept_hist = [2, 3, 3, 2]
    stats.ttft.observe(0.03)
    stats.ttft.observe(2.0)
    stats.requests_finished["length"] = 4
    stats.iterations.append({"iter": 1})
    back = stats_from_dict(stats_to_dict(stats))
    assert back.num_drafts == 10
    assert back.accept_hist == [2, 3, 3, 2]
    assert back.accepted_per_position() == stats.accepted_per_position()
    assert back.ttft.cumulative() == stats.ttft.cumulative()
    assert back.ttft.count == 2
    assert back.ttft.sum == pytest.approx(2.03)
    assert back.requests_finished["length"] == 4
    assert isinstance(back.iterations, collections.deque)
    assert list(back.iterations) == [{"iter": 1}]
    assert back.created_s == stats.created_s


# --- recipe --------------------------------------------------------------------------------------


def sim_server(**kw: object) -> ServerConfig:
    data: dict[str, object] = {"framework": "sim", "model": "llama", "port": 9100}
    data.update(kw)
    return server_config(data)


def test_recipe_puts_node_placeholders_and_per_node_metrics_endpoints_for_dp() -> None:
    launch = build_launch(sim_server(nodes=2, parallelism=Parallelism(dp=2)))
    argv = list(launch.argv)
    assert argv[argv.index("--nnodes") + 1] == NNODES
    assert argv[argv.index("--node-rank") + 1] == NODE_RANK
    assert argv[argv.index("--head-addr") + 1] == HEAD_ADDR
    assert argv[argv.index("--dist-port") + 1] == "9102"
    assert argv[argv.index("--node-parallel") + 1] == "dp"
    assert launch.nodes == 2
    assert launch.metrics_endpoints == (
        MetricsEndpoint(node=0, port=9100, path="/metrics"),
        MetricsEndpoint(node=1, port=9101, path="/metrics"),
    )
    assert launch.provenance().nodes == 2


def test_recipe_tp_across_nodes_has_only_the_heads_metrics() -> None:
    launch = build_launch(sim_server(nodes=2, parallelism=Parallelism(tp=16), sim_dialect="trtllm"))
    argv = list(launch.argv)
    assert argv[argv.index("--node-parallel") + 1] == "tp"
    assert launch.metrics_endpoints == ()
    assert launch.metrics_path == "/prometheus/metrics"


def test_recipe_single_node_is_unchanged_and_refuses_uneven_dp() -> None:
    launch = build_launch(sim_server())
    assert "--nnodes" not in launch.argv
    assert launch.nodes == 1
    assert launch.metrics_endpoints == ()
    with pytest.raises(RecipeError, match="dp=3 cannot be spread evenly over nodes=2"):
        build_launch(sim_server(nodes=2, parallelism=Parallelism(dp=3)))
    with pytest.raises(RecipeError, match="repeats '--node-rank'"):
        build_launch(sim_server(extra_args=("--node-rank", "1")))


# --- GPU layout --------------------------------------------------------------------------------


def test_gpu_layout_of_a_multi_node_server_counts_every_nodes_gpus() -> None:
    layout = gpu_layout(sim_server(nodes=2, parallelism=Parallelism(tp=8, pp=2)))
    assert (layout.gpus, layout.nodes) == (16, 2)
    dp = gpu_layout(sim_server(nodes=2, parallelism=Parallelism(dp=2)))
    assert (dp.gpus, dp.nodes) == (2, 2)
    assert gpu_layout(sim_server()).gpus == 1
    with pytest.raises(InvalidInputError, match="tp=0 must be at least 1"):
        GpuLayout(tp=0)
    with pytest.raises(InvalidInputError, match="nodes=0 must be at least 1"):
        GpuLayout(nodes=0)


def test_dp_head_runs_one_engine_per_node_and_hands_requests_out_in_turn() -> None:
    from alflow.sim.server import SimService

    dp = SimService(multi(node_parallel="dp", nnodes=3, port=8100, dist_port=8200))
    assert len(dp.engines) == 3
    assert dp.engines[0] is dp.engine
    assert [dp.rank_stats(r) for r in range(3)] == [e.stats for e in dp.engines]
    picks = [dp._pick_engine() for _ in range(6)]
    assert picks == [*dp.engines, *dp.engines]
    # each rank draws its own acceptance (its own seed); only rank 0 writes the step log
    assert [e.config.seed for e in dp.engines] == [0, 1, 2]
    tp = SimService(multi(node_parallel="tp"))
    assert len(tp.engines) == 1
    assert tp.engine.profile.nodes == 2
