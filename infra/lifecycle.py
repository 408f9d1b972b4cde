"""One-call server lifecycle for the task layer: config -> recipe -> runner -> ready handle -> stop.

:func:`start_server` returns only when the server is healthy (and stops it when it is not);
:func:`stop_server` needs only the handle and the runner options, so a different task (or process)
can stop what another started; :func:`serving` wraps both for a ``with`` block.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from alflow.config import RunnerOptions, ServerConfig
from infra.launch import Launch
from infra.recipes import build_launch
from infra.runners import ServerHandle, make_runner

log = logging.getLogger(__name__)


def start_server(
    config: ServerConfig,
    options: RunnerOptions,
    *,
    run_id: str | None = None,
    secret_source: Callable[[str], str | None] | None = None,
    timeout_s: float | None = None,
    **extras: Any,
) -> ServerHandle:
    """Build the Launch for ``config``, start it with the runner ``options`` choose, wait until ready.

    On any failure after the start, the server is stopped before the error propagates.
    """
    launch = build_launch(config)
    return start_launch(
        launch, options, run_id=run_id, secret_source=secret_source, timeout_s=timeout_s, **extras
    )


def start_launch(
    launch: Launch,
    options: RunnerOptions,
    *,
    run_id: str | None = None,
    secret_source: Callable[[str], str | None] | None = None,
    timeout_s: float | None = None,
    **extras: Any,
) -> ServerHandle:
    """Start an already built ``launch`` and wait until it is ready (stopping it on failure)."""
    for warning in launch.warnings:
        log.warning("%s: %s", launch.framework, warning)
    runner = make_runner(options, run_id=run_id, secret_source=secret_source, **extras)
    handle = runner.start(launch)
    try:
        runner.wait_ready(handle, timeout_s)
    except BaseException:
        runner.stop(handle)
        raise
    return handle


def stop_server(handle: ServerHandle, options: RunnerOptions, **extras: Any) -> None:
    """Stop the server behind ``handle`` (a no-op for an external server); safe to call twice."""
    make_runner(options, **extras).stop(handle)


@contextmanager
def serving(
    config: ServerConfig,
    options: RunnerOptions,
    *,
    run_id: str | None = None,
    secret_source: Callable[[str], str | None] | None = None,
    timeout_s: float | None = None,
    **extras: Any,
) -> Iterator[ServerHandle]:
    """A ready server for a ``with`` block, always stopped afterwards."""
    handle = start_server(
        config, options, run_id=run_id, secret_source=secret_source, timeout_s=timeout_s, **extras
    )
    try:
        yield handle
    finally:
        stop_server(handle, options, **extras)


def _reclaim_docker(options: RunnerOptions) -> list[str]:
    del options  # the engine comes from the environment (DOCKER_HOST), as for the runner itself
    from infra.runners.docker import cleanup_containers

    return [e.name for e in cleanup_containers(older_than_s=0.0) if e.removed]


_RECLAIMERS: dict[str, Callable[[RunnerOptions], list[str]]] = {"docker": _reclaim_docker}
"""Per runner kind: how to remove what a killed run left on this host (containers holding GPUs)."""


def reclaim_host(options: RunnerOptions) -> list[str]:
    """Remove every server a killed alflow run left behind on this host; returns what was removed.

    Call it only while holding the host's GPU concurrency slot: no other alflow run owns a server
    here then, so anything labelled by alflow is a leftover. Runners with nothing to reclaim
    (process, external) return an empty list.
    """
    reclaimer = _RECLAIMERS.get(options.kind)
    removed = reclaimer(options) if reclaimer is not None else []
    for name in removed:
        log.warning("removed leftover server %s from a killed run", name)
    return removed
