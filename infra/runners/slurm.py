"""Runner 'slurm': the server runs as a Slurm batch job on one or more nodes.

:func:`~alflow_infra.runners.slurm_script.render_script` turns a :class:`~alflow.frameworks.launch.Launch` and
:class:`~alflow.config.SlurmOptions` into an sbatch script (how values are quoted: that module). The script loads
modules, exports the Launch's environment and every node's address (its ``NodeAddr``: node names may not resolve),
then srun runs ``NODE_WRAPPER`` on every node, bare or in a container through pyxis; the wrapper fills the node
placeholders of the argument list and execs it (nodes of rank > 0: ``Launch.worker_argv`` when the recipe gives one).

- One server (``exec srun``): one task per node, or, for an MPI launch (``Launch.mpi``), ``--mpi=PLUGIN``
  and ``Launch.tasks_per_node`` tasks per node (TensorRT-LLM: one per GPU).
- A disaggregated server (``Launch.groups``): one background srun step per group on its node range
  (``--nodes``/``--relative``), the frontend (``Launch.argv``) on the first node with ``--overlap``;
  ``wait -n`` returns when any step ends, the others are killed and the job ends with that status.

The job's node count is ``Launch.nodes`` (the server config's ``nodes``); ``SlurmOptions.nodes``, when
set, must agree. GPUs per node: the options' ``gpus_per_node``, else the Launch's.

:class:`SlurmRunner` writes the script and the launch files into a job directory (which must be
visible from the compute nodes), submits it with ``sbatch --parsable`` (secret values travel in
sbatch's environment, never in the script), waits until the job runs and resolves the head node's
address (first host of ``scontrol show hostnames``; its ``NodeAddr`` when Slurm knows one) and that of
every other node (``Launch.metrics_endpoints`` -> ``ServerHandle.metrics_urls``; for a disaggregated
server the primary ``metrics_url`` is the first decode instance, since its head is the router),
then waits for health while watching the job state: a job that ends (FAILED, CANCELLED, TIMEOUT,
COMPLETED, ...) fails the wait with its log tail. ``stop`` runs ``scancel``. The job id and the
rendered script go into the handle's provenance.

Every Slurm client call goes through the :class:`SlurmCommands` protocol: :class:`SubprocessSlurm`
runs the real commands (argument lists, no shell), tests pass a scripted one.
"""

from __future__ import annotations

import logging
import os
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Protocol

from alflow.config import SlurmOptions
from alflow.frameworks.launch import Launch
from alflow_infra.errors import RunnerError, ServerStartError
from alflow_infra.runners.base import (
    LOG_TAIL_LINES,
    SecretSource,
    ServerHandle,
    file_tail,
    inherited_env,
    run_folder,
    run_tag,
    secret_values,
    wait_for_health,
    write_launch_files,
)
from alflow_infra.runners.slurm_script import job_gpus_per_node, render_script, url_host

log = logging.getLogger(__name__)

ENDED_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "REVOKED",
        "SPECIAL_EXIT",
        "TIMEOUT",
    }
)
"""Job states in which the server is gone (or going: COMPLETING is treated the same way)."""
STOPPING_STATES = frozenset({"COMPLETING", "STOPPED", "SUSPENDED"})
"""States in which the job is alive in Slurm's books but its server does not serve."""
RUNNING_STATE = "RUNNING"


@dataclass(frozen=True)
class JobInfo:
    """What Slurm says about a job: its state, the reason (pending or failure), nodes and exit code."""

    job_id: str
    state: str
    reason: str = ""
    nodelist: str = ""
    exit_code: str = ""

    @property
    def ended(self) -> bool:
        """True once the job no longer runs its server (an ended or completing state)."""
        return self.state in ENDED_STATES or self.state in STOPPING_STATES

    def describe(self) -> str:
        """``STATE (reason, exit code)`` for messages."""
        details = [self.reason] if self.reason not in ("", "None") else []
        details += [f"exit code {self.exit_code}"] if self.exit_code else []
        return f"{self.state} ({', '.join(details)})" if details else self.state


class SlurmCommands(Protocol):
    """The Slurm client calls the runner makes (real: :class:`SubprocessSlurm`; tests: a script)."""

    def submit(self, script_path: str, env: Mapping[str, str]) -> str:
        """``sbatch --parsable SCRIPT`` with ``env`` as its environment; returns the job id."""
        ...

    def job(self, job_id: str) -> JobInfo | None:
        """The job's state (``scontrol show job``); None when Slurm no longer knows it."""
        ...

    def hostnames(self, nodelist: str) -> list[str]:
        """Host names of a node list expression (``scontrol show hostnames``)."""
        ...

    def node_address(self, node: str) -> str | None:
        """The node's ``NodeAddr`` (``scontrol show node``); None when unknown."""
        ...

    def cancel(self, job_id: str) -> None:
        """``scancel JOB`` (no error for a job that already ended)."""
        ...


def parse_key_values(text: str) -> dict[str, str]:
    """``Key=Value`` pairs of ``scontrol show ... -o`` output (values have no spaces, except after the last key)."""
    out: dict[str, str] = {}
    for token in text.split():
        key, sep, value = token.partition("=")
        if sep and key:
            out.setdefault(key, value)
    return out


class SubprocessSlurm:
    """:class:`SlurmCommands` through the real client programs (argument lists, no shell)."""

    def __init__(self, timeout_s: float = 30.0) -> None:
        self.timeout_s = timeout_s

    def _run(self, argv: list[str], env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(
                argv,
                capture_output=True,
                text=True,
                check=False,
                timeout=self.timeout_s,
                env=None if env is None else dict(env),
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise RunnerError(f"{argv[0]} failed: {exc}") from exc

    def submit(self, script_path: str, env: Mapping[str, str]) -> str:
        """``sbatch --parsable SCRIPT``; the job id is the first field of its output (``ID[;CLUSTER]``)."""
        result = self._run(["sbatch", "--parsable", script_path], env)
        job_id = result.stdout.strip().split(";", 1)[0]
        if result.returncode != 0 or not job_id.isdigit():
            raise RunnerError(
                f"sbatch failed (exit {result.returncode}): {result.stderr.strip() or result.stdout}"
            )
        return job_id

    def job(self, job_id: str) -> JobInfo | None:
        """``scontrol show job -o JOB`` parsed; None for an unknown (purged) job."""
        result = self._run(["scontrol", "show", "job", "-o", job_id])
        if result.returncode != 0:
            if "Invalid job id" in result.stderr:
                return None
            raise RunnerError(f"scontrol show job {job_id} failed: {result.stderr.strip()}")
        fields = parse_key_values(result.stdout)
        return JobInfo(
            job_id=job_id,
            state=fields.get("JobState", "UNKNOWN"),
            reason=fields.get("Reason", ""),
            nodelist="" if fields.get("NodeList") in (None, "(null)") else fields["NodeList"],
            exit_code=fields.get("ExitCode", ""),
        )

    def hostnames(self, nodelist: str) -> list[str]:
        """``scontrol show hostnames NODELIST``, one host a line."""
        result = self._run(["scontrol", "show", "hostnames", nodelist])
        if result.returncode != 0:
            raise RunnerError(f"scontrol show hostnames {nodelist} failed: {result.stderr.strip()}")
        return [line.strip() for line in result.stdout.splitlines() if line.strip()]

    def node_address(self, node: str) -> str | None:
        """``NodeAddr`` from ``scontrol show node -o NODE``; None when the command fails."""
        result = self._run(["scontrol", "show", "node", "-o", node])
        return (parse_key_values(result.stdout).get("NodeAddr") or None) if result.returncode == 0 else None

    def cancel(self, job_id: str) -> None:
        """``scancel JOB``; a job that already ended is not an error."""
        result = self._run(["scancel", job_id])
        gone = ("already completing or completed", "Invalid job id")
        if result.returncode != 0 and not any(text in result.stderr for text in gone):
            raise RunnerError(f"scancel {job_id} failed: {result.stderr.strip()}")


class SlurmRunner:
    """Starts a Launch as a Slurm batch job, follows it, and cancels it on stop."""

    name = "slurm"
    _secrets: ClassVar[dict[str, Mapping[str, str]]] = {}

    def __init__(
        self,
        options: SlurmOptions | None = None,
        *,
        run_id: str | None = None,
        secret_source: SecretSource | None = None,
        commands: SlurmCommands | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.options = options or SlurmOptions()
        self.run_id = run_id or uuid.uuid4().hex
        self._secret_source: SecretSource = secret_source or os.environ.get
        self.commands: SlurmCommands = commands or SubprocessSlurm(self.options.command_timeout_s)
        self._clock = clock
        self._sleep = sleep
        self._last_state: dict[str, tuple[float, JobInfo | None]] = {}

    def start(self, launch: Launch) -> ServerHandle:
        """Render and submit the job, wait until it runs (``queue_timeout_s``), and return its handle.

        The handle's URLs point at the head node, known only once the job has its nodes; a job that
        ends or stays queued too long is cancelled and raises :class:`ServerStartError` with its log.
        """
        job_dir = run_folder(self.options.log_dir, run_tag(launch, self.run_id), "alflow-slurm-").resolve()
        launch, log_path, script_path, script = self._write_job(launch, job_dir)
        secrets = secret_values(self.options.secrets, launch, self._secret_source)
        # sbatch passes the job this environment, cleaned (no acceptance knobs: only the Launch sets those, in the
        # script; no stale SLURM_* job variables, e.g. of an allocation alflow runs in; SLURM_CONF, the client's
        # config, stays), and the secret values, which are never written to the script
        env = {**inherited_env(lambda name: not name.startswith("SLURM_") or name == "SLURM_CONF"), **secrets}
        log.info("submitting %s server as a Slurm job: %s (log %s)", launch.framework, script_path, log_path)
        job_id = self.commands.submit(str(script_path), env)
        self._secrets[job_id] = secrets
        log.info("Slurm job %s submitted", job_id)
        try:
            info = self._wait_running(job_id, str(log_path))
            hosts = self.commands.hostnames(info.nodelist)
            if not hosts:
                raise ServerStartError(f"Slurm job {job_id} runs on no host ({info.nodelist!r})")
            if len(hosts) < launch.nodes:
                raise ServerStartError(
                    f"Slurm job {job_id} got {len(hosts)} node(s) ({info.nodelist}) but the server spans "
                    f"{launch.nodes}",
                    self._log_tail(str(log_path), job_id),
                )
            # each host's NodeAddr (its name when Slurm has none), in job node order
            addresses = tuple(self.commands.node_address(host) or host for host in hosts)
        except BaseException:
            try:
                self._cancel(job_id)
            except RunnerError as exc:  # keep the start failure as the error; say the cancel failed
                log.warning("could not cancel Slurm job %s after a failed start: %s", job_id, exc)
            finally:
                self._secrets.pop(job_id, None)
            raise
        base = launch.base_url(host=url_host(addresses[0]))
        metrics_urls = tuple(
            launch.base_url(host=url_host(addresses[e.node]), port=e.port) + e.path
            for e in launch.metrics_endpoints
        )
        # A disaggregated server's head is its router, which has no spec-decode counters: the primary
        # metrics URL is then the first decode instance (all of them are in metrics_urls).
        metrics_url = metrics_urls[0] if launch.groups and metrics_urls else base + launch.metrics_path
        return ServerHandle(
            runner=self.name,
            id=job_id,
            base_url=base,
            metrics_url=metrics_url,
            health_url=base + launch.health_path,
            dialect=launch.dialect,
            model=launch.model,
            readiness_timeout_s=launch.readiness_timeout_s,
            name=job_dir.name,
            log_path=str(log_path),
            image=self.options.container_image,
            metrics_urls=metrics_urls,
            nodes=launch.nodes,
            provenance=launch.provenance().amended(
                image=self.options.container_image,  # a bare command runs no (recipe) image
                run_id=self.run_id,
                secrets_passed=sorted(secrets),
                slurm={
                    "job_id": job_id,
                    "script": script,
                    "script_path": str(script_path),
                    "nodes": launch.nodes,
                    "gpus_per_node": job_gpus_per_node(launch, self.options),
                    "tasks_per_node": launch.tasks_per_node,
                    "nodelist": info.nodelist,
                    "hosts": hosts,
                    "addresses": list(addresses),
                    "head_node": hosts[0],
                    "head_address": addresses[0],
                },
            ),
        )

    def _write_job(self, launch: Launch, job_dir: Path) -> tuple[Launch, Path, Path, str]:
        """The launch with its files written to the job's folder, the log path, and the rendered script (written)."""
        launch = write_launch_files(launch, job_dir)
        log_path = job_dir / "server.log"
        mounts = (f"{job_dir}:{job_dir}",) if self.options.container_image else ()
        script = render_script(
            launch,
            self.options,
            log_path=str(log_path),
            extra_mounts=mounts,
            comment=f"alflow-run:{self.run_id}",
        )
        script_path = job_dir / "job.sbatch"
        script_path.write_text(script, encoding="utf-8")
        return launch, log_path, script_path, script

    def _wait_running(self, job_id: str, log_path: str) -> JobInfo:
        """Poll the job until it is RUNNING with a node list; raise when it ends or the queue wait times out."""
        deadline = self._clock() + self.options.queue_timeout_s
        while True:
            info = self.commands.job(job_id)
            if info is None:
                problem = "vanished before it ran"
            elif info.ended:
                problem = f"ended before it ran: {info.describe()}"
            elif info.state == RUNNING_STATE and info.nodelist:
                return info
            elif self._clock() >= deadline:
                problem = f"was not running within {self.options.queue_timeout_s:g} s: {info.describe()}"
            else:
                self._sleep(self.options.poll_interval_s)
                continue
            raise ServerStartError(f"Slurm job {job_id} {problem}", self._log_tail(log_path, job_id))

    def _dead_reason(self, handle: ServerHandle) -> str | None:
        """Why the job no longer serves (None while it runs); queries Slurm at most every poll interval."""
        now = self._clock()
        cached = self._last_state.get(handle.id)
        if cached is not None and now - cached[0] < self.options.poll_interval_s:
            info = cached[1]
        else:
            info = self.commands.job(handle.id)
            self._last_state[handle.id] = (now, info)
        if info is None:
            return f"Slurm job {handle.id} is no longer known to Slurm"
        if info.ended:
            return f"Slurm job {handle.id} is {info.describe()}"
        return None

    def wait_ready(self, handle: ServerHandle, timeout_s: float | None = None) -> None:
        """Poll the head node's health URL while watching the job state (an ended job fails at once)."""
        try:
            wait_for_health(
                handle.health_url,
                handle.readiness_timeout_s if timeout_s is None else timeout_s,
                dead_reason=lambda: self._dead_reason(handle),
                log_tail=lambda: self.logs(handle),
                what=f"{handle.dialect} server (Slurm job {handle.id})",
            )
        finally:
            self._last_state.pop(handle.id, None)

    def _log_tail(self, log_path: str | None, job_id: str, tail: int = LOG_TAIL_LINES) -> str:
        return file_tail(log_path, tail, self._secrets.get(job_id, {}))

    def logs(self, handle: ServerHandle, tail: int = LOG_TAIL_LINES) -> str:
        """The last ``tail`` lines of the job log (secret values redacted)."""
        return self._log_tail(handle.log_path, handle.id, tail)

    def _cancel(self, job_id: str) -> None:
        """scancel, then wait up to ``stop_timeout_s`` for the job to leave the running states."""
        self.commands.cancel(job_id)
        deadline = self._clock() + self.options.stop_timeout_s
        while True:
            info = self.commands.job(job_id)
            if info is None or info.state in ENDED_STATES:
                return
            if self._clock() >= deadline:
                log.warning(
                    "Slurm job %s still %s %.0f s after scancel",
                    job_id,
                    info.state,
                    self.options.stop_timeout_s,
                )
                return
            self._sleep(min(self.options.poll_interval_s, 0.2))

    def stop(self, handle: ServerHandle) -> None:
        """Cancel the job (``scancel``) and wait until Slurm reports it ended; idempotent."""
        try:
            self._cancel(handle.id)
        finally:
            self._secrets.pop(handle.id, None)
            self._last_state.pop(handle.id, None)
        log.info("cancelled Slurm job %s", handle.id)
