"""Fan-out tasks of the K sweep: run one M1 or M2 deployment run on a free node and wait for its end.

:func:`run_child` takes a node from the sweep's :class:`~alflow.methods.sweep_rules.NodePool`, creates the
deployment run on that node's work queue (``run_deployment``, linked to the sweep as a subflow), and
polls it until it ends. A node whose work queue no worker has polled for ``node_timeout_s`` is lost:
its waiting run is cancelled (so a worker that comes back later does not start a stale run), its
running run is marked Crashed, and the node takes no more work. A completed run's results are read
from the run store (:func:`alflow.results.store.find_run`), not from Prefect's result storage.

Prefect caches a completed child (key :func:`alflow.methods.sweep_rules.cache_key`: the deployment and its
parameters, whatever the node), so a re-run of the sweep reuses it; a failed child raises
:class:`ChildRunFailedError` and is never cached.
"""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, cast
from uuid import UUID

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.client.orchestration import SyncPrefectClient, get_client
from prefect.client.schemas.objects import FlowRun, State, StateType
from prefect.context import TaskRunContext
from prefect.deployments import run_deployment
from prefect.events.filters import (
    EventFilter,
    EventNameFilter,
    EventOccurredFilter,
    EventOrder,
    EventResourceFilter,
)
from prefect.exceptions import ObjectNotFound
from prefect.states import Cancelled, Crashed

from alflow.config import FanOut, SweepNode
from alflow.errors import AlflowError
from alflow.methods.outcomes import ChildRun
from alflow.methods.sweep_rules import NodePool, StopWaiting, cache_key, judge_wait, node_lost_why, on_node
from alflow.results.rows import M2Point
from alflow.results.store import find_run
from alflow.results.view import m2_points


class ChildRunFailedError(AlflowError):
    """A child run of the sweep did not complete; ``child`` says which, where and how it ended."""

    def __init__(self, child: ChildRun) -> None:
        super().__init__(child.message or f"{child.name} ended {child.state}")
        self.child = child


def _child_key(_context: TaskRunContext, parameters: dict[str, Any]) -> str:
    return cache_key(str(parameters["deployment"]), parameters["parameters"])


def _now() -> datetime:
    return datetime.now(UTC)


def _silence_s(last_polled: datetime | None, since: datetime) -> float:
    """Seconds since the node's worker last polled (since ``since`` when it never did)."""
    return (_now() - (since if last_polled is None else last_polled)).total_seconds()


def _end_lost(flow_run: FlowRun, why: str) -> str:
    """Give up on a run whose node is lost: cancel it if it never started, else mark it crashed."""
    started = _started(flow_run)
    state: State[Any] = Crashed(message=why) if started else Cancelled(message=why)
    with get_client(sync_client=True) as client:
        client.set_flow_run_state(flow_run.id, state, force=True)
    return state.name or ("Crashed" if started else "Cancelled")


def _started(flow_run: FlowRun) -> bool:
    return flow_run.state is not None and flow_run.state.type is StateType.RUNNING


def _last_heartbeat(client: SyncPrefectClient, flow_run_id: UUID, since: datetime) -> datetime | None:
    """When the run last sent a heartbeat event (``PREFECT_FLOWS_HEARTBEAT_FREQUENCY``), None if never since ``since``."""
    page = client.read_events(
        EventFilter(
            event=EventNameFilter(name=["prefect.flow-run.heartbeat"]),
            resource=EventResourceFilter(id=[f"prefect.flow-run.{flow_run_id}"]),
            occurred=EventOccurredFilter.model_validate({"since": since}),
            order=EventOrder.DESC,
        ),
        limit=1,
    )
    return page.events[0].occurred if page.events else None


def node_silence(client: SyncPrefectClient, node: SweepNode, pool: str, since: datetime) -> float:
    """Seconds since the node's worker last polled its work queue (since ``since`` when it never did)."""
    try:
        polled = client.read_work_queue_by_name(node.work_queue, work_pool_name=pool).last_polled
    except ObjectNotFound:
        polled = None
    return _silence_s(polled, since)


def _wait(flow_run_id: UUID, node: SweepNode, pool: str, fan: FanOut) -> tuple[FlowRun, StopWaiting | None]:
    """Poll the run until it ends or :func:`alflow.methods.sweep_rules.judge_wait` gives it up; the run and why it was given up."""
    since = _now()
    while True:
        with get_client(sync_client=True) as client:
            flow_run = client.read_flow_run(flow_run_id)
            if flow_run.state is not None and flow_run.state.is_final():
                return flow_run, None
            stop = judge_wait(
                node=node,
                pool=pool,
                fan=fan,
                started=_started(flow_run),
                queue_silence_s=node_silence(client, node, pool, since),
                heartbeat_silence_s=lambda: _silence_s(_last_heartbeat(client, flow_run_id, since), since),
                waited_s=(_now() - since).total_seconds(),
            )
        if stop is not None:
            return flow_run, stop
        time.sleep(fan.poll_s)


@task(name="deployment_pools", cache_policy=NO_CACHE)
def deployment_pools(fan: FanOut) -> dict[str, str]:
    """The work pool of each deployment the sweep fans out to (read once per sweep).

    Raises AlflowError naming a deployment that does not exist or has no work pool.
    """
    pools: dict[str, str] = {}
    with get_client(sync_client=True) as client:
        for deployment in (fan.gate_deployment, fan.benchmark_deployment):
            try:
                found = client.read_deployment_by_name(deployment)
            except ObjectNotFound:
                raise AlflowError(
                    f"fan_out: deployment {deployment!r} does not exist on this Prefect server "
                    "(create it with prefect deploy, or name another in fan_out)"
                ) from None
            if not found.work_pool_name:
                raise AlflowError(
                    f"deployment {deployment!r} has no work pool: the sweep cannot fan out to it"
                )
            pools[deployment] = found.work_pool_name
    return pools


def _live_node(
    nodes: NodePool, rank: tuple[int, ...], pool: str, fan: FanOut, started: datetime
) -> SweepNode:
    """A free node whose worker polled within ``node_timeout_s`` (silent ones are dropped on the way)."""
    while True:
        node = nodes.acquire(rank)
        with get_client(sync_client=True) as client:
            silent = node_silence(client, node, pool, started)
        if silent <= fan.node_timeout_s:
            return node
        nodes.lose(node, node_lost_why(node, pool, silent, fan))
        nodes.release(node)


@task(name="sweep_child", cache_key_fn=_child_key, persist_result=True)
def run_child(
    deployment: str,
    parameters: dict[str, Any],
    flow: str,
    pool: str,
    results_root: str,
    run_name: str,
    nodes: NodePool,
    rank: tuple[int, ...],
    fan: FanOut,
    started: datetime,
) -> ChildRun:
    """Run ``deployment`` with ``parameters`` on a free node; its ChildRun (raises ChildRunFailedError if it failed).

    Waiting child runs get free nodes in the order of their ``rank`` (:func:`alflow.methods.sweep_rules.dispatch_rank`).

    A run that never started because its node was lost is cancelled and sent to another live node;
    one that started and was lost is not run again (the re-run of the sweep does that).
    """
    log = get_run_logger()
    while True:
        node = _live_node(nodes, rank, pool, fan, started)
        stop: StopWaiting | None = None
        try:
            created = cast(
                FlowRun,
                run_deployment(
                    deployment,
                    parameters=on_node(parameters, node),
                    flow_run_name=run_name,
                    work_queue_name=node.work_queue,
                    timeout=0,
                    as_subflow=True,
                ),
            )
            log.info("%s: flow run %s on node %s", run_name, created.id, node.work_queue)
            flow_run, stop = _wait(created.id, node, pool, fan)
            state = flow_run.state.name if flow_run.state is not None else "unknown"
            if stop is not None:
                ran = _started(flow_run)
                state = _end_lost(flow_run, f"alflow sweep: {stop.why}")
                if stop.node_lost:
                    nodes.lose(node, stop.why)
                    if not ran:
                        log.warning(
                            "%s: never started on node %s (%s); trying another node",
                            run_name,
                            node.work_queue,
                            stop.why,
                        )
                        continue
        finally:
            nodes.release(node)
        break
    child = ChildRun(
        flow="m1" if flow == "m1" else "m2",
        passed=False,
        state=state or "unknown",
        name=flow_run.name,
        flow_run_id=str(flow_run.id),
        node=node.work_queue,
    )
    return _outcome(child, flow_run, stop, results_root, flow)


def _outcome(
    child: ChildRun, flow_run: FlowRun, stop: StopWaiting | None, results_root: str, flow: str
) -> ChildRun:
    """The finished child with its run directory, or :class:`ChildRunFailedError` (failed, lost, or not stored)."""
    stored = find_run(results_root, flow, str(flow_run.id))
    run_dir = None if stored is None else stored.dir
    if stop is not None or flow_run.state is None or not flow_run.state.is_completed():
        message = (
            (None if stop is None else stop.why)
            or (flow_run.state.message if flow_run.state is not None else None)
            or child.state
        )
        raise ChildRunFailedError(replace(child, message=message, run_dir=run_dir))
    if run_dir is None:
        raise ChildRunFailedError(
            replace(
                child,
                message=(
                    f"completed, but its run directory is not under {results_root!r}: the sweep reads its "
                    "children's results from the run store, so give them a results_root the sweep can read "
                    "(a shared path or an object store)"
                ),
            )
        )
    return replace(child, passed=True, run_dir=run_dir)


@task(name="read_m2_points", cache_policy=NO_CACHE)
def read_m2_points(run_dir: str) -> list[M2Point]:
    """The points an M2 run stored (its ``spec_stats`` table), read from the run store."""
    from alflow.results.store import open_run

    return m2_points(open_run(run_dir))


def cache_options(fan: FanOut) -> dict[str, Any]:
    """``run_child.with_options`` for the sweep's cache settings."""
    return {
        "cache_expiration": timedelta(days=fan.cache_days) if fan.cache_days > 0 else None,
        "refresh_cache": fan.refresh_cache or fan.cache_days == 0,
    }
