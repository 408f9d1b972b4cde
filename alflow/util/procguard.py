"""A guard process that stops a process group when the process that started it dies, however it dies.

A server started by a run must not outlive the run, also when the run is killed with SIGKILL (no
``finally``, no ``atexit``). A parent-death signal (``PR_SET_PDEATHSIG``) is not enough: it fires
when the *thread* that forked the child ends, and flows run tasks in worker threads. The guard is a
pipe instead: the owner keeps the write end (close-on-exec, so the server and its children never
hold it), the guard blocks on the read end. The pipe reaches end-of-file exactly when every holder of
the write end is gone: when the owner exits for any reason, or when it calls :meth:`Guard.release`
after stopping the server itself. Then the guard stops the group if it is still the same process
(start time unchanged: the pid was not reused): SIGTERM, then SIGKILL after ``grace_s``.

The guard runs in its own session, so a Ctrl-C in the owner's terminal does not kill it before
it has done its job; it holds no other resource and exits as soon as the group is stopped or gone.

    guard = Guard.start(pid=server.pid, group=True, grace_s=10)
    ...  # run
    stop_the_server(); guard.release()   # or: the owner dies, and the guard stops the server
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path


def start_ticks(pid: int) -> str | None:
    """The process start time in clock ticks since boot (``/proc/PID/stat`` field 22), if known."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else None


def pid_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (an exited child nobody reaped yet)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return True  # no procfs: trust kill(0)
    return stat.rsplit(")", 1)[-1].split()[:1] != ["Z"]


def same_process_alive(pid: int, ticks: str | None) -> bool:
    """True while ``pid`` is alive and is still the process that started at ``ticks`` (None: any)."""
    if not pid_alive(pid):
        return False
    return ticks is None or start_ticks(pid) in (None, ticks)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def terminate(pid: int, ticks: str | None, *, group: bool, grace_s: float) -> bool:
    """SIGTERM ``pid`` (its group when ``group``), SIGKILL after ``grace_s``; False when it was already gone.

    Nothing is signalled unless ``pid`` is still the process that started at ``ticks``; for a group,
    members left behind by a leader that already exited still get the SIGKILL.
    """
    alive = same_process_alive(pid, ticks)
    if group:
        if not alive and not _group_alive(pid):
            return False
        if alive and os.getpgid(pid) != pid:
            group = False  # not a group leader (any more): never signal someone else's group
    elif not alive:
        return False
    kill = os.killpg if group else os.kill
    with contextlib.suppress(ProcessLookupError, PermissionError):
        kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not (_group_alive(pid) if group else pid_alive(pid)):
            return True
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 2.0  # the kernel tears it down; init reaps an orphan
    while time.monotonic() < deadline and (_group_alive(pid) if group else pid_alive(pid)):
        time.sleep(0.02)
    return True


@dataclass
class Guard:
    """The owner's end of a guard: the pipe's write end and the guard process."""

    pid: int
    write_fd: int | None
    process: subprocess.Popen[bytes]

    @classmethod
    def start(cls, pid: int, *, group: bool = True, grace_s: float = 10.0) -> Guard:
        """Start a guard over ``pid`` (and its process group when ``group``)."""
        read_fd, write_fd = os.pipe()  # both close-on-exec: only the guard gets the read end (as stdin)
        try:
            argv = [sys.executable, "-m", "alflow.util.procguard", "--pid", str(pid), "--grace", str(grace_s)]
            ticks = start_ticks(pid)
            if ticks:
                argv += ["--ticks", ticks]
            if group:
                argv.append("--group")
            process = subprocess.Popen(
                argv,
                stdin=read_fd,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                close_fds=True,
            )
        except BaseException:
            os.close(write_fd)
            raise
        finally:
            os.close(read_fd)
        return cls(pid=pid, write_fd=write_fd, process=process)

    def release(self, timeout_s: float = 5.0) -> None:
        """Close the pipe (the guard stops the target if it still runs, then exits) and reap the guard."""
        if self.write_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.write_fd)
            self.write_fd = None
        # a stubborn target may still be stopping: the guard exits on its own after the SIGKILL
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=timeout_s)


def main(argv: list[str] | None = None) -> int:
    """The guard process: wait for end-of-file on stdin, then stop the target."""
    parser = argparse.ArgumentParser(
        prog="python -m alflow.util.procguard", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--pid", type=int, required=True)
    parser.add_argument("--ticks", default=None)
    parser.add_argument("--group", action="store_true")
    parser.add_argument("--grace", type=float, default=10.0)
    args = parser.parse_args(argv)
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)
    with contextlib.suppress(OSError):
        while os.read(0, 4096):
            pass
    terminate(args.pid, args.ticks, group=args.group, grace_s=args.grace)
    return 0


if __name__ == "__main__":
    sys.exit(main())
