"""Runners: where a server runs (local process, Docker container, external, Slurm job), keyed by name.

:data:`RUNNERS` is the whole registry: runner name -> factory taking that runner's options (the
``kind`` of :data:`alflow.config.RunnerOptions`). :func:`make_runner` picks one from a config.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from alflow.config import RunnerOptions
from alflow_infra.errors import RunnerError
from alflow_infra.runners.base import Runner, ServerHandle, running_server, wait_for_health
from alflow_infra.runners.docker import DockerRunner
from alflow_infra.runners.external import ExternalRunner
from alflow_infra.runners.process import ProcessRunner
from alflow_infra.runners.slurm import SlurmRunner

RUNNERS: dict[str, Callable[..., Runner]] = {
    ProcessRunner.name: ProcessRunner,
    DockerRunner.name: DockerRunner,
    ExternalRunner.name: ExternalRunner,
    SlurmRunner.name: SlurmRunner,
}
"""Runner factories by name: options model first, then ``run_id`` and ``secret_source`` keywords
(and runner-specific extras such as the docker ``client``)."""


def make_runner(
    options: RunnerOptions,
    *,
    run_id: str | None = None,
    secret_source: Callable[[str], str | None] | None = None,
    **extras: Any,
) -> Runner:
    """The runner chosen by ``options.kind``, built from those options.

    ``run_id`` labels what the runner creates (containers, log directories); ``secret_source`` maps a
    secret's name to its value (default: the environment; a Prefect task can pass a Secret block's).
    """
    try:
        factory = RUNNERS[options.kind]
    except KeyError:
        raise RunnerError(f"no runner {options.kind!r}; known: {', '.join(RUNNERS)}") from None
    return factory(options, run_id=run_id, secret_source=secret_source, **extras)


__all__ = [
    "RUNNERS",
    "DockerRunner",
    "ExternalRunner",
    "ProcessRunner",
    "Runner",
    "ServerHandle",
    "SlurmRunner",
    "make_runner",
    "running_server",
    "wait_for_health",
]
