"""The methods' side effects as Prefect tasks: :data:`PREFECT_STEPS`, the flows' :class:`~alflow.methods.steps.Steps`.

Each step is the orchestration layer's function of that job (``tasks/``) made a task of its name by one helper
(:func:`as_task`): the Prefect UI shows the task runs ``preflight``, ``run_load``, ``spec_stats``,
``audit_synthetic``, ... with their inputs drawn as the tasks that made them; the procedures have no Prefect in them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar, cast

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.utilities.annotations import opaque

from alflow.config import GateParams
from alflow.methods.steps import Steps
from alflow_flows.common import emit_passed, gate_failure, pass_event
from alflow_infra.runners import ServerHandle
from alflow_tasks import gates, measure, regression, results, servers
from alflow_tasks.preflight import preflight

P = ParamSpec("P")
R = TypeVar("R")


def as_task(fn: Callable[P, R], *, never_fails: bool = False) -> Callable[P, R]:
    """``fn`` as a Prefect task of its name (never cached, never retried), called with every argument opaque.

    Prefect visits every element of a task's arguments twice (to resolve futures and to record upstream task
    runs); a point's sessions and records are tens of thousands of objects: about a quarter of an M2 flow's
    CPU went there. ``opaque`` looks at the argument itself only, so a task's result handed to the next task
    (a measurement, its statistics) is still drawn as that task's input in the Prefect UI. ``never_fails``: a
    failed task run (the function warns about its own failures) is a warning and None, never the run's failure.
    """
    made: Any = task(name=fn.__name__, cache_policy=NO_CACHE, retries=0)(fn)

    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return cast(R, made(*(opaque(a) for a in args), **{n: opaque(v) for n, v in kwargs.items()}))
        except Exception as exc:
            if not never_fails:
                raise
            _warn(f"{fn.__name__} not run: {exc!r}")
            return cast(R, None)

    return call


def _log(message: str) -> None:
    get_run_logger().info("%s", message)


def _warn(message: str) -> None:
    get_run_logger().warning("%s", message)


def _gate_passed(params: GateParams, run_dir: str, reference_al: float) -> None:
    # the pass event: prefect.yaml's m2-after-m1 trigger starts M2 from it
    emit_passed("m1-gate", *pass_event(params, run_dir=run_dir, reference_al=reference_al))


PREFECT_STEPS: Steps[ServerHandle] = Steps(
    server_lifetime=servers.server_lifetime,  # not a task: it holds the host's slot around start/stop tasks
    wait_ready=as_task(servers.wait_ready),
    preflight=as_task(preflight),
    run_load=as_task(measure.run_load),
    spec_stats=as_task(measure.spec_stats),
    audit=as_task(gates.audit_synthetic),
    check_al_gate=as_task(gates.check_al_gate),
    check_accuracy_gate=as_task(gates.check_accuracy_gate),
    store=as_task(results.store_results),
    render=as_task(results.render_report),
    check_regression=as_task(regression.check_regression, never_fails=True),
    check_reference=as_task(regression.check_reference, never_fails=True),
    fail=gate_failure,
    gate_passed=_gate_passed,
    log=_log,
    warn=_warn,
)
"""Every step of :class:`alflow.methods.steps.Steps` as the flows' Prefect task of that job."""
