"""Runner 'process': the server is a local child process (used for the simulator).

The child gets its own session (process group), so stopping it stops everything it started: SIGTERM
to the group, then SIGKILL after ``stop_timeout_s``. Output goes to ``server.log`` in the run
directory; launch files are written there too and the argument list is rewritten to point at them.
Secrets are passed by name from the secret source (the environment by default) and never logged.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import ClassVar

from alflow.config import ProcessOptions
from alflow.frameworks.launch import (
    Launch,
    connect_host,
    single_host,
    single_host_metrics_urls,
)
from alflow.frameworks.recipes import check_install
from alflow.util.procguard import Guard, pid_alive, same_process_alive, start_ticks
from alflow_infra.errors import FrameworkInstallError, RunnerError
from alflow_infra.runners import registry
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

log = logging.getLogger(__name__)


class ProcessRunner:
    """Starts a Launch as a local process group and stops it with SIGTERM, then SIGKILL."""

    name = "process"
    # Shared by every instance in this Python process, so a runner built later (another task, a
    # stop_server call) finds the child, stops it and reaps it (no zombie, no ResourceWarning).
    _procs: ClassVar[dict[str, subprocess.Popen[bytes]]] = {}
    _secrets: ClassVar[dict[str, Mapping[str, str]]] = {}
    _guards: ClassVar[dict[str, Guard]] = {}
    _temporary: ClassVar[dict[str, Path]] = {}
    """A server's temporary folder (no ``log_dir``), removed with its log when the server is stopped."""

    def __init__(
        self,
        options: ProcessOptions | None = None,
        *,
        run_id: str | None = None,
        secret_source: SecretSource | None = None,
    ) -> None:
        self.options = options or ProcessOptions()
        self.run_id = run_id or uuid.uuid4().hex
        self._secret_source: SecretSource = secret_source or os.environ.get

    def start(self, launch: Launch) -> ServerHandle:
        """Start ``launch`` in a new process group, output to ``<run dir>/server.log``.

        Node placeholders are filled for one node (rank 0, head = this host); a multi-node launch is
        refused (only the slurm runner starts those).
        """
        launch = single_host(launch, runner=self.name, head_addr=connect_host(launch.host))
        program, path_env, launch = self._program(launch)
        tag = run_tag(launch, self.run_id)
        run_dir = run_folder(self.options.log_dir, tag, "alflow-")
        launch = write_launch_files(launch, run_dir)
        secrets = secret_values(self.options.secrets, launch, self._secret_source)
        # the runner's own environment, less the knob variables (only the Launch may force acceptance)
        env = {**inherited_env(), **path_env, **launch.env, **secrets}
        log_path = run_dir / "server.log"
        log.info("starting %s server: %s (log %s)", launch.framework, launch.command_line(), log_path)
        with log_path.open("ab") as log_file:
            try:
                proc = subprocess.Popen(
                    [program[0], *launch.argv[1:]],  # launch relocated: its files point into the run dir
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                )
            except OSError as exc:
                raise RunnerError(f"cannot start {launch.argv[0]!r}: {exc}") from exc
        pid = process_id(proc.pid)
        self._procs[pid] = proc
        if not self.options.log_dir:
            self._temporary[pid] = run_dir
        self._secrets[pid] = secrets
        base = launch.base_url()
        # Nothing runs after its run: the guard stops the group when this process dies (even by
        # SIGKILL), the registry records it for `alflow infra cleanup`.
        try:
            self._guards[pid] = Guard.start(proc.pid, group=True, grace_s=self.options.stop_timeout_s)
            registry.register(
                proc.pid,
                run_id=self.run_id,
                framework=launch.framework,
                base_url=base,
                log_path=str(log_path),
            )
        except BaseException:
            _stop_group(proc.pid, lambda: proc.poll() is not None, self.options.stop_timeout_s)
            self._release(pid)
            raise
        return ServerHandle(
            runner=self.name,
            id=pid,
            base_url=base,
            metrics_url=base + launch.metrics_path,
            health_url=base + launch.health_path,
            dialect=launch.dialect,
            model=launch.model,
            readiness_timeout_s=launch.readiness_timeout_s,
            name=tag,
            log_path=str(log_path),
            metrics_urls=single_host_metrics_urls(launch, connect_host(launch.host)),
            nodes=launch.nodes,
            provenance=launch.provenance().amended(run_id=self.run_id, secrets_passed=sorted(secrets)),
        )

    def _program(self, launch: Launch) -> tuple[list[str], dict[str, str], Launch]:
        """The argv to run (``executable`` replaces argv[0]), PATH/VIRTUAL_ENV for ``framework_env``, the launch.

        Checks, before anything starts, that the program is there and that the install can run the launch
        (the recipe's ``check_install``, e.g. synthetic acceptance on vLLM's CPU build only with alflow's
        port installed), which may adapt the launch to the install (returned).
        """
        argv = list(launch.argv)
        extra: dict[str, str] = {}
        prefix: Path | None = None
        if self.options.framework_env:
            prefix = Path(self.options.framework_env).expanduser().absolute()
            bin_dir = prefix / "bin"
            extra = {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "VIRTUAL_ENV": str(prefix)}
            if not self.options.executable and "/" not in argv[0] and not _is_executable(bin_dir / argv[0]):
                raise FrameworkInstallError(
                    f"runner.framework_env={self.options.framework_env!r}: no executable {argv[0]!r} in {bin_dir}; "
                    f"expected an environment with {launch.framework} installed"
                )
        if self.options.executable:
            exe = Path(self.options.executable).expanduser()
            if not _is_executable(exe):
                raise FrameworkInstallError(
                    f"runner.executable={self.options.executable!r}: not an executable file; expected the path of "
                    f"the program that replaces {argv[0]!r}"
                )
            argv[0] = str(exe)
            if prefix is None and exe.parent.name == "bin":
                prefix = exe.parent.parent
        # the install's rules, and no image: its tag's release-gate warnings do not apply (the live version does)
        return argv, extra, check_install(launch, prefix)

    def _exit_reason(self, handle: ServerHandle) -> str | None:
        proc = self._procs.get(handle.id)
        if proc is None:
            return None if _same_process_alive(handle.id) else "process is gone"
        code = proc.poll()
        if code is None:
            return None
        return f"exited with code {code}" if code >= 0 else f"killed by signal {-code}"

    def wait_ready(self, handle: ServerHandle, timeout_s: float | None = None) -> None:
        """Poll the health URL while watching for an early exit (fails fast with the log tail)."""
        wait_for_health(
            handle.health_url,
            handle.readiness_timeout_s if timeout_s is None else timeout_s,
            dead_reason=lambda: self._exit_reason(handle),
            log_tail=lambda: self.logs(handle),
            what=f"{handle.dialect} server (pid {pid_of(handle.id)})",
        )

    def logs(self, handle: ServerHandle, tail: int = LOG_TAIL_LINES) -> str:
        """The last ``tail`` lines of ``server.log`` (secret values redacted)."""
        return file_tail(handle.log_path, tail, self._secrets.get(handle.id, {}))

    def stop(self, handle: ServerHandle) -> None:
        """SIGTERM to the process group, SIGKILL after ``stop_timeout_s``; idempotent."""
        pid = pid_of(handle.id)
        proc = self._procs.pop(handle.id, None)
        self._secrets.pop(handle.id, None)
        if proc is None:
            # A handle from another runner instance: stop the group only if it is still the same
            # process (start time unchanged: the pid was not reused) and it still leads its group.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if _same_process_alive(handle.id) and os.getpgid(pid) == pid:
                    _stop_group(pid, lambda: not pid_alive(pid), self.options.stop_timeout_s)
            self._release(handle.id)
            return
        if proc.poll() is None:
            _stop_group(pid, lambda: proc.poll() is not None, self.options.stop_timeout_s)
        else:
            # The leader exited; children it left in the group still get the signal.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5.0)
        self._release(handle.id)
        log.info("stopped server pid %s (exit code %s)", pid, proc.returncode)

    def _release(self, handle_id: str) -> None:
        """After a stop: end the server's guard, drop its registry entry and its temporary folder.

        ``log_dir`` keeps a log; without it the log lives as long as the server, as a container's does.
        """
        guard = self._guards.pop(handle_id, None)
        if guard is not None:
            guard.release()
        temporary = self._temporary.pop(handle_id, None)
        if temporary is not None:
            shutil.rmtree(temporary, ignore_errors=True)
        pid, _, ticks = handle_id.partition("@")
        registry.unregister(int(pid), ticks or None)


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def process_id(pid: int) -> str:
    """A handle id for ``pid``: ``PID@START`` where the start time is known, so a reused pid is told apart."""
    ticks = start_ticks(pid)
    return f"{pid}@{ticks}" if ticks else str(pid)


def pid_of(handle_id: str) -> int:
    """The pid in a process handle id (``PID`` or ``PID@START``)."""
    return int(handle_id.split("@", 1)[0])


def _same_process_alive(handle_id: str) -> bool:
    pid, _, ticks = handle_id.partition("@")
    return same_process_alive(int(pid), ticks or None)


def _stop_group(pgid: int, exited: Callable[[], bool], timeout_s: float) -> None:
    """SIGTERM the group, wait up to ``timeout_s`` for ``exited()``, then SIGKILL the group."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout_s
    pause = 0.005  # a server that exits at once is seen within milliseconds; then up to 50 ms apart
    while time.monotonic() < deadline:
        if exited():
            break
        time.sleep(pause)
        pause = min(pause * 2, 0.05)
    else:
        log.warning("process group %s ignored SIGTERM for %.1f s: SIGKILL", pgid, timeout_s)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
