"""Server lifecycle tasks: start (with retries), wait_ready, stop; and the lifetime that wraps them.

Thin wrappers over :mod:`alflow_infra.lifecycle`. ``start_server`` may retry (a failed attempt is torn
down by the lifecycle before the next); the flows stop the server in ``finally`` (through
:func:`server_lifetime`), which also covers a failed flow. There is no transaction rollback hook: no
flow opens a transaction around a server, so such a hook could never fire, and a killed process runs
none either (``alflow infra cleanup`` reclaims what a killed run leaves). Only the
:class:`ServerHandle` (plain data) leaves a task. Containers and logs are labelled with the flow
run id, so ``alflow infra cleanup --run-id`` can target one run. The runner's secrets (names only
in the config) take their values from the environment of this process, else from a Prefect Secret
block of the same name in lowercase with dashes (:func:`secret_value`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import uuid
from collections.abc import Iterator
from typing import Any, cast

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.client.orchestration import get_client
from prefect.concurrency.sync import concurrency
from prefect.exceptions import ObjectNotFound
from prefect.runtime import flow_run

from alflow.config import RunnerOptions, ServerConfig, ServerPlacement
from alflow.util.redact import redact_url
from alflow_infra import lifecycle
from alflow_infra.runners import ServerHandle, make_runner
from alflow_tasks.retry import retry_transient

log = logging.getLogger(__name__)


def _run_id() -> str | None:
    rid = flow_run.get_id()
    return str(rid) if rid else None


def flow_run_is_live(run_id: str) -> bool:
    """True when ``run_id`` is a Prefect flow run that has not reached a final state (or is this one).

    A run id that is not a flow run's, or one the API does not know, is over. When the API cannot
    be asked, the run counts as live: nothing is cancelled on a guess.
    """
    if run_id == _run_id():
        return True
    try:
        flow_run_id = uuid.UUID(run_id)
    except ValueError:
        return False
    try:
        with get_client(sync_client=True) as client:
            state = client.read_flow_run(flow_run_id).state
    except ObjectNotFound:
        return False
    except Exception as exc:  # an unreachable API must not cancel someone's job
        log.warning("cannot tell whether flow run %s is still going: %s", run_id, exc)
        return True
    return state is None or not state.is_final()


def secret_block_name(name: str) -> str:
    """The Prefect Secret block a secret variable is read from: ``HF_TOKEN`` -> ``hf-token``."""
    return "-".join(
        part for part in "".join(c if c.isalnum() else "-" for c in name.lower()).split("-") if part
    )


def secret_value(name: str) -> str | None:
    """The value of secret ``name`` for a server: the environment variable, else the Prefect Secret block.

    The block is :func:`secret_block_name` of ``name``; None when neither has it (the runner then
    passes nothing). The value never enters a log line or a result.
    """
    value = os.environ.get(name)
    if value:
        return value
    from prefect.blocks.system import Secret

    block_name = secret_block_name(name)
    try:
        block = cast("Secret[Any]", Secret.load(block_name))  # sync here: the load is done
    except ValueError:  # no such block
        return None
    except Exception as exc:  # an API that cannot be asked must not stop a server that may not need it
        log.warning("cannot read Prefect Secret block %r for %s: %s", block_name, name, type(exc).__name__)
        return None
    raw: object = block.value.get_secret_value()
    return raw if isinstance(raw, str) else json.dumps(raw)


@task(
    name="start_server",
    retries=2,
    retry_delay_seconds=[5, 20],
    retry_condition_fn=retry_transient,
    cache_policy=NO_CACHE,
)
def start_server(server: ServerConfig, runner: RunnerOptions) -> ServerHandle:
    """Build the Launch from the framework's recipe, start it and wait for health."""
    handle = lifecycle.start_server(server, runner, run_id=_run_id(), secret_source=secret_value)
    get_run_logger().info(
        "server %s ready at %s (%s, dialect %s)",
        redact_url(handle.id),
        redact_url(handle.base_url),
        server.framework,
        handle.dialect,
    )
    return handle


def wait_ready(handle: ServerHandle, runner: RunnerOptions) -> ServerHandle:
    """Check (and wait up to a minute for) the server's health before a measurement."""
    make_runner(runner).wait_ready(handle, 60.0)
    return handle


@task(name="stop_server", cache_policy=NO_CACHE)
def stop_server(handle: ServerHandle, runner: RunnerOptions) -> None:
    """Stop the server (always runs, also after failures; safe to call twice)."""
    lifecycle.stop_server(handle, runner)
    get_run_logger().info("server %s stopped", redact_url(handle.id))


@contextlib.contextmanager
def server_lifetime(server: ServerConfig, placement: ServerPlacement) -> Iterator[ServerHandle]:
    """Hold the GPU host's concurrency slot, start the server, yield it, and always stop it."""
    with contextlib.ExitStack() as stack:
        if placement.gpu_host:
            stack.enter_context(concurrency(placement.gpu_host, occupy=1, strict=placement.strict_limit))
            # holding the host's slot, anything alflow left here belongs to a killed run
            lifecycle.reclaim_host(placement.runner, is_live=flow_run_is_live)
        handle = start_server(server, placement.runner)
        try:
            yield handle
        finally:
            stop_server(handle, placement.runner)
