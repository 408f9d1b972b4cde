"""The K sweep's rules without Prefect: which node runs what, each child run's parameters, the sweep's tables.

A fanned-out sweep (``SweepParams.fan_out``) runs each K's M1 and M2 as deployment runs on one node
(a work queue that only that node's worker polls). :class:`NodePool` hands each K a free node, keeps
a node busy with one K at a time and drops a node that is lost (its worker stopped polling), so the
remaining K go to the others. :func:`child_parameters` builds a child run's parameters from the
sweep's template, and :func:`cache_key` names a child for Prefect's cache so that a re-run of the
sweep reuses what already completed, on whichever node it ran.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from alflow.config import BenchmarkParams, FanOut, GateParams, SweepNode, SweepParams
from alflow.methods.outcomes import ChildRun, KOutcome


class NoNodeLeftError(Exception):
    """Every node of the sweep is lost: nothing can run the remaining K."""


class NodePool:
    """The sweep's nodes: each runs one child run at a time; a lost node takes no more work.

    :meth:`acquire` blocks while every live node is busy (a freed node goes to the waiting request of
    the lowest rank, see :func:`dispatch_rank`) and raises :class:`NoNodeLeftError` once none is
    live; :meth:`release` gives a node back; :meth:`lose` drops it (with the reason, for the report).
    Thread-safe: one thread per K asks for a node.
    """

    def __init__(self, nodes: Sequence[SweepNode]) -> None:
        if not nodes:
            raise ValueError("a node pool needs at least one node")
        self._free = list(nodes)
        self._busy: list[SweepNode] = []
        self._lost: dict[str, str] = {}
        self._waiting: list[tuple[tuple[int, ...], int]] = []
        self._tickets = itertools.count()
        self._cond = threading.Condition()

    def acquire(self, rank: tuple[int, ...] = ()) -> SweepNode:
        """A free live node, blocking while all live nodes are busy or a request of lower rank waits.

        Requests of equal rank are served in the order they came.
        """
        with self._cond:
            ticket = (rank, next(self._tickets))
            self._waiting.append(ticket)
            self._cond.notify_all()  # a new waiter (wait_for_waiting)
            try:
                while not (self._free and min(self._waiting) == ticket):
                    if not self._free and not self._busy:
                        lost = "; ".join(f"{q}: {why}" for q, why in self._lost.items())
                        raise NoNodeLeftError(f"no node of the sweep is left ({lost})")
                    self._cond.wait()
                node = self._free.pop(0)
                self._busy.append(node)
                return node
            finally:
                self._waiting.remove(ticket)
                self._cond.notify_all()

    def release(self, node: SweepNode) -> None:
        """Give a node back after its K."""
        with self._cond:
            self._busy.remove(node)
            if node.work_queue not in self._lost:
                self._free.append(node)
            self._cond.notify_all()

    def lose(self, node: SweepNode, why: str) -> None:
        """Drop a node: it takes no more K (a busy node is dropped when it is released)."""
        with self._cond:
            self._lost.setdefault(node.work_queue, why)
            if node in self._free:
                self._free.remove(node)
            self._cond.notify_all()

    def wait_for_waiting(self, n: int, timeout_s: float) -> bool:
        """Whether ``n`` or more requests are in :meth:`acquire` within ``timeout_s`` (blocks until they are)."""
        with self._cond:
            return self._cond.wait_for(lambda: len(self._waiting) >= n, timeout_s)

    @property
    def lost(self) -> dict[str, str]:
        """The lost nodes' work queues and why each was lost."""
        with self._cond:
            return dict(self._lost)


def node_lost_why(node: SweepNode, pool: str, silent_s: float, fan: FanOut) -> str:
    """Why ``node`` is lost: no worker has polled its work queue for ``silent_s`` seconds."""
    return (
        f"no worker has polled work queue {node.work_queue!r} of pool {pool!r} for {silent_s:.0f} s "
        f"(node_timeout_s={fan.node_timeout_s:g}): the node's worker is gone"
    )


@dataclass(frozen=True)
class StopWaiting:
    """Why the sweep stops waiting for a child run that has not ended.

    ``node_lost``: the node's worker is gone (the node takes no more work; a run that never started
    goes to another node); otherwise the run overran ``run_timeout_s`` (the node stays).
    """

    node_lost: bool
    why: str


def judge_wait(
    *,
    node: SweepNode,
    pool: str,
    fan: FanOut,
    started: bool,
    queue_silence_s: float,
    heartbeat_silence_s: Callable[[], float],
    waited_s: float,
) -> StopWaiting | None:
    """Whether to stop waiting for a child run that has not ended (None: keep waiting).

    A run waiting to start is given up when its node's worker has not polled for ``node_timeout_s``;
    a running one only when, in addition, the run itself has sent no heartbeat for that long (a flow
    process can outlive its worker and finish). ``heartbeat_silence_s`` is asked only then (it costs an
    API call). Past ``run_timeout_s`` since creation, any run is given up.
    """
    silent = queue_silence_s
    if silent > fan.node_timeout_s and started:
        silent = min(silent, heartbeat_silence_s())
    if silent > fan.node_timeout_s:
        return StopWaiting(node_lost=True, why=node_lost_why(node, pool, silent, fan))
    if fan.run_timeout_s is not None and waited_s > fan.run_timeout_s:
        return StopWaiting(node_lost=False, why=f"not finished within run_timeout_s={fan.run_timeout_s:g}")
    return None


def dispatch_rank(step: str, k: int) -> tuple[int, int]:
    """The order in which waiting child runs get a free node: every K's M1 first, then the M2s, by K.

    Gates first keeps the most work ready for the nodes and leaves the long M2s to the end, where
    they balance the nodes; K by K in each step keeps the order the same on every run. For example,
    7 K on 2 nodes with M1 taking 68 s and M2 110 s: gates first ends at 644 s, each node alternating
    M1 and M2 of its K at 712 s; no order can end before 623 s (half the work).
    """
    if step not in ("m1", "m2"):
        raise ValueError(f"step {step!r} is not 'm1' or 'm2'")
    return (0 if step == "m1" else 1, k)


def gate_for(params: SweepParams, k: int) -> GateParams:
    """The M1 parameters of K."""
    return GateParams.model_validate({**params.gate.model_dump(), "k": k})


def benchmark_for(params: SweepParams, k: int) -> BenchmarkParams:
    """The M2 parameters of K."""
    return BenchmarkParams.model_validate({**params.benchmark.model_dump(), "k": k})


DRY_RUN = "dry_run"
"""The flows' plan-only switch (a top-level parameter of M0, M1, M2 and the sweep)."""


def child_parameters(params: GateParams | BenchmarkParams, top_level: Iterable[str]) -> dict[str, Any]:
    """A deployment run's parameters: the full configuration as ``params``, every short-form field None.

    Prefect merges a run's parameters over the deployment's defaults, and a flow's short-form fields
    (preset, model, k, ...) win over ``params``; naming each of them as None keeps the deployment's
    defaults from overriding what the sweep asks for. ``dry_run`` is a switch, not a field: a child is measured,
    so it is False (None is not a valid value for it).
    """
    return {**short_form_cleared(top_level), "params": params.model_dump(mode="json")}


def short_form_cleared(top_level: Iterable[str]) -> dict[str, Any]:
    """Every top-level parameter but ``params`` cleared, for a run given its full configuration.

    The short-form fields None (the deployment's defaults would win over ``params``), the ``dry_run`` switch False
    (a measured run; None is not a valid value for it).
    """
    names = list(top_level)
    out: dict[str, Any] = {name: None for name in names if name not in ("params", DRY_RUN)}
    if DRY_RUN in names:
        out[DRY_RUN] = False
    return out


def on_node(parameters: Mapping[str, Any], node: SweepNode) -> dict[str, Any]:
    """A child run's parameters on ``node``: its concurrency limit as the placement's GPU host."""
    out: dict[str, Any] = json.loads(json.dumps(parameters))
    if node.gpu_host is not None:
        out["params"]["placement"]["gpu_host"] = node.gpu_host
    return out


CHILD_VERSION = 2
"""Version of a cached child run's content (2: :class:`~alflow.methods.outcomes.ChildRun` moved to
``alflow.methods.outcomes``): a child cached by another version is run again, not unpickled into a wrong shape."""


def cache_key(deployment: str, parameters: Mapping[str, Any]) -> str:
    """A child run's identity for Prefect's cache: the deployment and its parameters, whatever the node.

    The placement's GPU host (the node's concurrency limit) is left out: a K measured on node-1 is
    the same measurement on node-2.
    """
    data = json.loads(json.dumps(parameters, sort_keys=True, default=str))
    placement = (data.get("params") or {}).get("placement")
    if isinstance(placement, dict):
        placement.pop("gpu_host", None)
    text = json.dumps({"deployment": deployment, "parameters": data}, sort_keys=True)
    return f"alflow-sweep-child-v{CHILD_VERSION}-" + hashlib.sha256(text.encode()).hexdigest()[:32]


def _step_cells(
    step: str, result: str | None, child: ChildRun | None, message: str | None
) -> dict[str, object]:
    """One step's columns of the ``per_k`` table: its result, its child run's state, name, directory and cache use."""
    cells = (
        (None,) * 4
        if child is None
        else (child.state, child.name or child.flow_run_id, child.run_dir, child.cached)
    )
    named = {
        f"{step}_{name}": cell for name, cell in zip(("state", "run", "dir", "cached"), cells, strict=True)
    }
    return {step: result, **named, f"{step}_message": message}


def per_k_rows(per_k: Mapping[int, KOutcome]) -> list[dict[str, object]]:
    """One row per K (the sweep's ``per_k`` table): node, each step's result, child run, state and directory."""
    return [
        {
            "k": k,
            "node": next(
                (c.node for c in (out.gate_run, out.benchmark_run) if c is not None and c.node), None
            ),
            **_step_cells("gate", out.gate, out.gate_run, out.gate_message),
            **_step_cells("benchmark", out.benchmark, out.benchmark_run, out.benchmark_message),
        }
        for k, out in sorted(per_k.items())
    ]


def lost_nodes(lost: Mapping[str, str]) -> list[str]:
    """One line per node the sweep lost (a warning: its K ran elsewhere or are named as failed)."""
    return [f"node {queue} lost: {why}" for queue, why in lost.items()]


def sweep_failures(per_k: Mapping[int, KOutcome]) -> list[str]:
    """One line per failed step, naming K, the child run, its state and node."""
    lines: list[str] = []
    for k, out in sorted(per_k.items()):
        for step, child, message in (
            ("M1", out.gate_run, out.gate_message if out.gate == "failed" else None),
            ("M2", out.benchmark_run, out.benchmark_message if out.benchmark == "failed" else None),
        ):
            if message is None and (child is None or child.passed):
                continue
            where = ""
            if child is not None:
                run = child.name or child.flow_run_id
                where = f" ({'run ' + repr(run) + ', ' if run else ''}state {child.state}"
                where += f", node {child.node})" if child.node else ")"
            lines.append(f"K={k} {step}{where}: {message or (child.message if child else None) or 'failed'}")
    return lines
