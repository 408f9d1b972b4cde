"""One-call server lifecycle for the task layer: config -> recipe -> runner -> ready handle -> stop.

:func:`start_server` returns only when the server is healthy (and stops it when it is not);
:func:`stop_server` needs only the handle and the runner options, so a different task (or process)
can stop what another started; :func:`serving` wraps both for a ``with`` block.
"""

from __future__ import annotations

import getpass
import logging
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from alflow.config import RunnerOptions, ServerConfig, SlurmOptions
from alflow.frameworks.launch import Launch
from alflow.frameworks.recipes import ALL_ADDRESSES, LOOPBACK, build_launch, log_facts
from alflow.frameworks.versions import FrameworkVersion, check_capabilities
from alflow.loadgen.client import auth_headers
from alflow.models import model_provenance
from alflow_infra.errors import RunnerError
from alflow_infra.runners import ServerHandle, make_runner
from alflow_infra.runners.base import Runner, fetch_json, handle_api_key

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
    launch = build_launch(config, default_host=bind_host(options))
    handle = start_launch(
        launch, options, run_id=run_id, secret_source=secret_source, timeout_s=timeout_s, **extras
    )
    weights = config.weights_path()
    model = model_provenance(weights) if weights else None
    if model:
        handle = replace(handle, provenance=handle.provenance.amended(**model))
    return handle


def bind_host(options: RunnerOptions) -> str:
    """Where a server binds when its config names no host: loopback, unless it must be reached from elsewhere.

    Slurm: the server runs on a compute node and the client on the submitting host. Docker with
    bridge networking: the port is mapped from the host into the container's namespace.
    """
    if isinstance(options, SlurmOptions) or getattr(options, "network", None) == "bridge":
        return ALL_ADDRESSES
    return LOOPBACK


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
    runner = make_runner(options, run_id=run_id, secret_source=secret_source, **extras)
    handle = runner.start(launch)
    for warning in handle.provenance.warnings:  # as the runner started it (no image: no image tag's warnings)
        log.warning("%s: %s", launch.framework, warning)
    try:
        runner.wait_ready(handle, timeout_s)
        live = live_version(
            handle.base_url, launch.version_paths, headers=auth_headers(handle_api_key(handle))
        )
        label = handle.provenance.image_version_label
        if live.version is None and label is not None:
            live = LiveVersion(label, f"image label {label!r}")
        notes = check_live_version(launch, live)
    except BaseException:
        runner.stop(handle)
        raise
    for note in notes:
        log.warning("%s: %s", launch.framework, note)
    found: dict[str, object] = dict(log_facts(launch, lambda: _log_text(runner, handle)))
    if live.version is not None:
        found["framework_version"] = live.version
    if notes:
        found["warnings"] = [*handle.provenance.warnings, *notes]
    return replace(handle, provenance=handle.provenance.amended(**found)) if found else handle


FACTS_LOG_LINES = 20_000
"""How much of a started server's log its recipe reads for facts it states only there (vLLM's model runner is said
once, early in the start-up)."""


def _log_text(runner: Runner, handle: ServerHandle) -> str:
    """The started server's log for :func:`~alflow.frameworks.recipes.log_facts` ("" when it cannot be read)."""
    try:
        return runner.logs(handle, tail=FACTS_LOG_LINES)
    except OSError as exc:
        log.warning("%s: the server's log could not be read for its facts: %s", handle.dialect, exc)
        return ""


VERSION_PATH = "/version"
"""Where vLLM and TensorRT-LLM (and alflow's sim and tiny engines) say their version: ``{"version": "..."}``."""


@dataclass(frozen=True)
class LiveVersion:
    """What a live server says of its version: the text, the path it came from, and whether it is simulated."""

    version: str | None
    path: str | None = None
    simulated: bool = False


def live_version(
    base_url: str,
    paths: tuple[str, ...] = (VERSION_PATH,),
    timeout_s: float = 5.0,
    headers: Mapping[str, str] | None = None,
) -> LiveVersion:
    """The live server's own version from the first of ``paths`` that answers ``{"version": ...}``.

    ``headers`` carry the API key (SGLang's ``--api-key`` guards ``/server_info``).
    """
    base = base_url.rstrip("/").removesuffix("/v1")
    for path in paths:
        info = fetch_json(base + path, timeout_s, headers)
        if isinstance(info, dict) and isinstance(info.get("version"), str | int | float):
            return LiveVersion(str(info["version"]), path, info.get("simulated") is True)
    return LiveVersion(None)


def check_live_version(launch: Launch, live: LiveVersion) -> tuple[str, ...]:
    """The release gates of ``launch`` against what the live server reports (a tag can lie).

    Too old: :class:`~alflow.frameworks.versions.CapabilityError` (the caller stops the server). Unknown: warnings.
    alflow's simulated engine implements every knob; it is gated only when told to report a
    framework's version (``alflow sim serve --framework-version``).
    """
    if not launch.requirements or (live.simulated and FrameworkVersion.parse(live.version) is None):
        return ()
    if live.path is None:
        where = f"live server (no version at {', '.join(launch.version_paths)})"
    elif live.path.startswith("image label"):
        where = f"live server's {live.path} (it reports none itself)"
    else:
        where = f"live server (GET {live.path})"
    return check_capabilities(launch.requirements, live.version, where)


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


LiveRun = Callable[[str], bool]
"""Tells whether the alflow run with this id is still going (its leftovers must then stay)."""

SLURM_RUN_COMMENT = "alflow-run:"
"""Prefix of the ``--comment`` the Slurm runner gives every job: ``alflow-run:<run id>``."""


def _reclaim_docker(options: RunnerOptions, is_live: LiveRun | None) -> list[str]:
    del options, is_live  # the engine comes from the environment (DOCKER_HOST), as for the runner itself
    from alflow_infra.runners.docker import cleanup_containers

    return [e.name for e in cleanup_containers(older_than_s=0.0) if e.removed]


def _reclaim_process(options: RunnerOptions, is_live: LiveRun | None) -> list[str]:
    """Stop registered process-runner servers whose owner process is gone (a killed run)."""
    del is_live  # the owner's liveness decides: a live owner stops its own servers
    from alflow_infra.runners.registry import reclaim_processes

    grace = getattr(options, "stop_timeout_s", 10.0)
    return [item.name for item in reclaim_processes(grace_s=grace) if item.removed]


@dataclass(frozen=True)
class SlurmJob:
    """One of this user's Slurm jobs that alflow submitted."""

    job_id: str
    run_id: str
    submitted_s: float | None  # epoch seconds (squeue's submit time), None when unknown

    def age_s(self, now: float | None = None) -> float:
        """Seconds since submission (infinite when unknown: an unknown age counts as old)."""
        if self.submitted_s is None:
            return float("inf")
        return max(0.0, (time.time() if now is None else now) - self.submitted_s)


def alflow_slurm_job_list(timeout_s: float = 30.0) -> list[SlurmJob]:
    """The Slurm jobs of this user that alflow submitted (comment ``alflow-run:<id>``), with their submit time.

    Raises :class:`RunnerError` when ``squeue`` cannot be run or fails.
    """
    argv = ["squeue", "-h", "-u", getpass.getuser(), "-o", "%i|%V|%k"]
    try:
        result = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout_s, check=False, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RunnerError(f"cannot list Slurm jobs ({' '.join(argv)}): {exc}") from exc
    if result.returncode != 0:
        raise RunnerError(f"{' '.join(argv)} failed (exit {result.returncode}): {result.stderr.strip()}")
    jobs: list[SlurmJob] = []
    for line in result.stdout.splitlines():
        job_id, _, rest = line.strip().partition("|")
        submitted, _, comment = rest.partition("|")
        if job_id and comment.startswith(SLURM_RUN_COMMENT):
            try:  # squeue's %V (2026-12-01T18:30:47, local time) in epoch seconds; None when not a time
                submitted_s: float | None = datetime.fromisoformat(submitted.strip()).timestamp()
            except ValueError:
                submitted_s = None
            jobs.append(SlurmJob(job_id, comment.removeprefix(SLURM_RUN_COMMENT), submitted_s))
    return jobs


def alflow_slurm_jobs(timeout_s: float = 30.0) -> list[tuple[str, str]]:
    """``(job id, run id)`` of this user's Slurm jobs that alflow submitted (comment ``alflow-run:<id>``)."""
    return [(job.job_id, job.run_id) for job in alflow_slurm_job_list(timeout_s)]


def _reclaim_slurm(options: RunnerOptions, is_live: LiveRun | None) -> list[str]:
    """Cancel this user's alflow Slurm jobs whose run is over (every one when ``is_live`` is None)."""
    if not isinstance(options, SlurmOptions):
        raise TypeError(f"the Slurm reclaimer needs SlurmOptions, got {type(options).__name__}")
    from alflow_infra.runners.slurm import SubprocessSlurm

    commands = SubprocessSlurm(options.command_timeout_s)
    removed: list[str] = []
    for job_id, run_id in alflow_slurm_jobs(options.command_timeout_s):
        if is_live is not None and is_live(run_id):
            continue
        commands.cancel(job_id)
        removed.append(f"Slurm job {job_id} ({SLURM_RUN_COMMENT}{run_id})")
    return removed


_RECLAIMERS: dict[str, Callable[[RunnerOptions, LiveRun | None], list[str]]] = {
    "docker": _reclaim_docker,
    "process": _reclaim_process,
    "slurm": _reclaim_slurm,
}
"""Per runner kind: how to remove what a killed run left behind (containers, Slurm jobs holding GPUs)."""


def reclaim_host(options: RunnerOptions, *, is_live: LiveRun | None = None) -> list[str]:
    """Remove every server a killed alflow run left behind; returns what was removed.

    Call it only while holding the host's GPU concurrency slot: no other alflow run owns a server
    there then, so anything labelled by alflow is a leftover. Slurm jobs carry their run's id, so
    ``is_live(run_id)`` (e.g. "is that Prefect flow run still running?") can spare the jobs of runs
    that are still going, for clusters shared by several alflow runs. Process-runner servers are
    reclaimed when the alflow process that started them is gone; the external runner has nothing
    to reclaim.
    """
    reclaimer = _RECLAIMERS.get(options.kind)
    removed = reclaimer(options, is_live) if reclaimer is not None else []
    for name in removed:
        log.warning("removed leftover server %s from a killed run", name)
    return removed
