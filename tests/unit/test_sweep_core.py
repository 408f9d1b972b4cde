"""The sweep's rules without Prefect: the node pool, child parameters, the cache key, the per-K tables."""

from __future__ import annotations

import threading

import pytest

from alflow.config import FanOut, SweepNode
from alflow.methods.outcomes import ChildRun, KOutcome
from alflow.methods.sweep_rules import (
    NodePool,
    NoNodeLeftError,
    StopWaiting,
    cache_key,
    child_parameters,
    dispatch_rank,
    judge_wait,
    lost_nodes,
    on_node,
    per_k_rows,
    sweep_failures,
)

pytestmark = pytest.mark.unit

N1 = SweepNode(work_queue="node-1", gpu_host="gcl-node-1")
N2 = SweepNode(work_queue="node-2", gpu_host="gcl-node-2")


def test_node_pool_hands_out_each_node_once_and_blocks_until_one_is_released() -> None:
    pool = NodePool([N1, N2])
    a, b = pool.acquire(), pool.acquire()
    assert {a.work_queue, b.work_queue} == {"node-1", "node-2"}
    got: list[SweepNode] = []
    waiter = threading.Thread(target=lambda: got.append(pool.acquire()))
    waiter.start()
    assert pool.wait_for_waiting(1, 5)
    assert not got  # both nodes busy: the third K waits
    pool.release(a)
    waiter.join(5)
    assert got == [a]


def test_a_lost_node_takes_no_more_work_and_waiters_fail_once_none_is_left() -> None:
    pool = NodePool([N1, N2])
    a = pool.acquire()
    b = pool.acquire()
    pool.lose(a, "worker gone")
    pool.release(a)
    errors: list[BaseException] = []

    def wait() -> None:
        try:
            pool.acquire()
        except NoNodeLeftError as exc:
            errors.append(exc)

    waiter = threading.Thread(target=wait)
    waiter.start()
    assert pool.wait_for_waiting(1, 5)
    pool.lose(b, "worker gone too")
    pool.release(b)
    waiter.join(5)
    assert len(errors) == 1
    assert "node-1: worker gone" in str(errors[0])
    assert "node-2" in str(errors[0])
    assert pool.lost == {"node-1": "worker gone", "node-2": "worker gone too"}


def test_child_parameters_null_every_short_form_field_and_the_node_sets_its_limit() -> None:
    from alflow.config import BenchmarkParams

    params = BenchmarkParams.model_validate(
        {"model": {"id": "m"}, "server": {"framework": "sim", "model": "m"}, "target_al": 2.0, "k": 2}
    )
    child = child_parameters(params, ["preset", "model", "k", "params"])
    assert child["preset"] is None
    assert child["model"] is None
    assert child["k"] is None
    assert child["params"]["k"] == 2
    assert child["params"]["placement"]["gpu_host"] is None
    placed = on_node(child, N2)
    assert placed["params"]["placement"]["gpu_host"] == "gcl-node-2"
    assert child["params"]["placement"]["gpu_host"] is None  # the template is not changed
    assert on_node(child, SweepNode(work_queue="q"))["params"]["placement"]["gpu_host"] is None
    # the same child on another node is the same cache entry; another K or deployment is not
    assert cache_key("m2/x", placed) == cache_key("m2/x", on_node(child, N1)) == cache_key("m2/x", child)
    other = child_parameters(params.model_copy(update={"k": 3}), ["params"])
    assert cache_key("m2/x", other) != cache_key("m2/x", child)
    assert cache_key("m2/y", child) != cache_key("m2/x", child)


def test_a_childs_parameters_validate_against_the_deployed_flows_own_signature() -> None:
    """Every top-level parameter of M1 and M2 (``dry_run`` included): the names nulled must still validate."""
    import inspect

    from alflow.config import BenchmarkParams, GateParams
    from alflow_flows.benchmark import benchmark
    from alflow_flows.gate import gate

    params = BenchmarkParams.model_validate(
        {"model": {"id": "m"}, "server": {"framework": "sim", "model": "m"}, "target_al": 2.0, "k": 2}
    )
    gate_params = GateParams.model_validate(
        {
            "model": {"id": "m"},
            "server": {"framework": "sim", "model": "m"},
            "k": 2,
            "reference_path": "r.yaml",
        }
    )
    for flow, child_params in ((benchmark, params), (gate, gate_params)):
        names = inspect.signature(flow.fn).parameters
        child = child_parameters(child_params, names)
        assert child["dry_run"] is False
        flow.validate_parameters(
            child
        )  # a child with dry_run None was refused: every fanned-out child failed


def test_fan_out_settings_refuse_shared_queues_limits_and_bad_deployment_names() -> None:
    with pytest.raises(ValueError, match="work queue twice"):
        FanOut(nodes=(N1, SweepNode(work_queue="node-1")))
    with pytest.raises(ValueError, match="share a gpu_host"):
        FanOut(nodes=(N1, SweepNode(work_queue="node-3", gpu_host="gcl-node-1")))
    with pytest.raises(ValueError, match="not 'flow name/deployment name'"):
        FanOut(nodes=(N1,), gate_deployment="m1-gate")


def test_per_k_rows_and_failures_name_the_child_run_its_state_and_node() -> None:
    m1 = ChildRun("m1", passed=True, state="Completed", name="s-k1-m1", node="node-1", run_dir="/r/m1/a")
    m2 = ChildRun("m2", passed=False, state="Crashed", name="s-k1-m2", node="node-2", message="worker gone")
    failed_gate = ChildRun(
        "m1", passed=False, state="Failed", name="s-k2-m1", node="node-1", message="AL low"
    )
    cached = ChildRun("m1", passed=True, state="Completed", name="s-k3-m1", cached=True)
    per_k = {
        1: KOutcome.of(m1, m2),
        2: KOutcome.of(failed_gate, None),
        3: KOutcome.of(
            cached, ChildRun("m2", passed=True, state="Completed", cached=True, run_dir="/r/m2/b")
        ),
    }
    rows = per_k_rows(per_k)
    assert [r["k"] for r in rows] == [1, 2, 3]
    assert rows[0]["node"] == "node-1"
    assert rows[0]["benchmark_state"] == "Crashed"
    assert rows[1]["benchmark"] is None
    assert rows[1]["benchmark_run"] is None
    assert rows[2]["gate_cached"] is True
    assert rows[2]["benchmark_dir"] == "/r/m2/b"
    lines = sweep_failures(per_k)
    assert lines == [
        "K=1 M2 (run 's-k1-m2', state Crashed, node node-2): worker gone",
        "K=2 M1 (run 's-k2-m1', state Failed, node node-1): AL low",
    ]
    assert lost_nodes({"node-2": "no worker polled"}) == ["node node-2 lost: no worker polled"]


def test_the_sweep_short_form_builds_both_templates_from_the_preset_and_its_values_win() -> None:
    from pathlib import Path

    from alflow.config.presets import load_preset, sweep_params
    from alflow.errors import InvalidInputError

    root = Path(__file__).resolve().parents[2]
    sim = load_preset("sim", root)
    params = sweep_params(preset=sim, ks=[1, 2, 3, 4, 5, 6, 7], concurrencies=[8])
    assert params.ks == (1, 2, 3, 4, 5, 6, 7)
    assert params.gate.server.framework == params.benchmark.server.framework == "sim"
    assert params.benchmark.concurrencies == (8,)
    assert params.benchmark.reference_path == sim.reference_path  # each K's target is its reference AL
    assert params.fan_out is None
    other = sweep_params(preset=sim, model="other-model", target_al=1.5)
    assert other.gate.model.id == other.benchmark.model.id == other.benchmark.server.model == "other-model"
    assert other.benchmark.target_al == 1.5
    assert other.benchmark.reference_path is None
    # the full configuration as the base: the short values still win, its fan-out stays
    fanned = params.model_copy(update={"fan_out": FanOut(nodes=(N1, N2))})
    again = sweep_params(ks=[2], params=fanned)
    assert again.ks == (2,)
    assert again.fan_out == fanned.fan_out
    with pytest.raises(InvalidInputError, match="give preset"):
        sweep_params()
    with pytest.raises(InvalidInputError, match="outside"):
        sweep_params(preset=sim, ks=[0])


FAN = FanOut(nodes=(N1, N2), node_timeout_s=60.0, run_timeout_s=600.0)


def _judge(
    *, started: bool, queue: float, beat: float | None = None, waited: float = 10.0, fan: FanOut = FAN
) -> tuple[object, list[str]]:
    asked: list[str] = []

    def heartbeat() -> float:
        asked.append("heartbeat")
        assert beat is not None, "the heartbeat was asked for when it should not be"
        return beat

    stop = judge_wait(
        node=N2,
        pool="local",
        fan=fan,
        started=started,
        queue_silence_s=queue,
        heartbeat_silence_s=heartbeat,
        waited_s=waited,
    )
    return stop, asked


def test_a_run_on_a_polled_node_is_waited_for_without_asking_its_heartbeat() -> None:
    assert _judge(started=True, queue=5.0) == (None, [])
    assert _judge(started=False, queue=59.0) == (None, [])


def test_a_waiting_run_on_a_silent_node_is_given_up_and_the_node_is_lost() -> None:
    stop, asked = _judge(started=False, queue=61.0)
    assert asked == []  # a run that never started has no heartbeat to ask for
    assert isinstance(stop, StopWaiting)
    assert stop.node_lost
    assert stop.why == (
        "no worker has polled work queue 'node-2' of pool 'local' for 61 s (node_timeout_s=60): "
        "the node's worker is gone"
    )


def test_a_running_run_that_still_beats_outlives_its_silent_worker() -> None:
    assert _judge(started=True, queue=300.0, beat=20.0) == (None, ["heartbeat"])


def test_a_running_run_without_heartbeats_on_a_silent_node_is_given_up_by_its_longest_silence() -> None:
    stop, asked = _judge(started=True, queue=300.0, beat=90.0)
    assert asked == ["heartbeat"]
    assert isinstance(stop, StopWaiting)
    assert stop.node_lost
    assert "for 90 s" in stop.why


def test_run_timeout_gives_a_run_up_without_losing_its_node() -> None:
    stop, _ = _judge(started=True, queue=1.0, waited=601.0)
    assert stop == StopWaiting(node_lost=False, why="not finished within run_timeout_s=600")
    no_limit = FanOut(nodes=(N1,), node_timeout_s=60.0)
    assert _judge(started=True, queue=1.0, waited=1e6, fan=no_limit) == (None, [])


def test_a_freed_node_goes_to_the_waiting_request_of_lowest_rank_gates_first() -> None:
    pool = NodePool([N1])
    held = pool.acquire()
    order: list[tuple[int, int]] = []
    threads = []
    for n, (step, k) in enumerate((("m2", 1), ("m1", 3), ("m1", 2), ("m2", 0)), start=1):
        rank = dispatch_rank(step, k)

        def take(rank: tuple[int, int] = rank) -> None:
            node = pool.acquire(rank)
            order.append(rank)
            pool.release(node)

        thread = threading.Thread(target=take)
        thread.start()
        threads.append(thread)
        assert pool.wait_for_waiting(n, 5)  # all four wait, in this order, while the node is held
    pool.release(held)
    for thread in threads:
        thread.join(5)
    assert order == [(0, 2), (0, 3), (1, 0), (1, 1)]


def test_dispatch_rank_names_a_step_it_does_not_know() -> None:
    assert dispatch_rank("m1", 7) < dispatch_rank("m2", 1)
    with pytest.raises(ValueError, match="step 'm0' is not 'm1' or 'm2'"):
        dispatch_rank("m0", 1)
