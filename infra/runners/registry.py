"""The registry of servers the process runner started: one small JSON file per live server.

Each entry names the server (pid and start time, so a reused pid is told apart), its process
group, the run id, the owner (the alflow process that started it, also with its start time), when
it started, the framework, its URL and its log. The runner writes the entry when it starts a server
and removes it when it stops it; an entry whose owner is gone belongs to a killed run, and
``alflow infra cleanup`` stops that server (the guard of :mod:`alflow.util.procguard` normally has done
so already; the registry is the record and the second line). Entries hold no environment and no
secret.

The folder is ``$ALFLOW_STATE_DIR/servers`` (default ``$XDG_STATE_HOME/alflow`` or
``~/.local/state/alflow``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from alflow.util.procguard import same_process_alive, start_ticks, terminate

log = logging.getLogger(__name__)


def registry_dir() -> Path:
    """Where the entries live: ``servers`` in alflow's per-user state folder (see the module docstring)."""
    explicit = os.environ.get("ALFLOW_STATE_DIR")
    if explicit:
        return Path(explicit).expanduser() / "servers"
    return (
        Path(os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")) / "alflow" / "servers"
    )


@dataclass(frozen=True)
class ServerEntry:
    """One server started by the process runner."""

    pid: int
    ticks: str | None
    run_id: str
    owner_pid: int
    owner_ticks: str | None
    started_at: float
    framework: str
    base_url: str
    log_path: str | None

    @property
    def file_name(self) -> str:
        return f"process-{self.pid}-{self.ticks or 'x'}.json"

    def server_alive(self) -> bool:
        return same_process_alive(self.pid, self.ticks)

    def age_s(self, now: float | None = None) -> float:
        return max(0.0, (time.time() if now is None else now) - self.started_at)


def register(pid: int, *, run_id: str, framework: str, base_url: str, log_path: str | None) -> ServerEntry:
    """Record a server this process just started (written atomically; the folder is made if missing)."""
    me = os.getpid()
    entry = ServerEntry(
        pid=pid,
        ticks=start_ticks(pid),
        run_id=run_id,
        owner_pid=me,
        owner_ticks=start_ticks(me),
        started_at=time.time(),
        framework=framework,
        base_url=base_url,
        log_path=log_path,
    )
    folder = registry_dir()
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{entry.file_name}.{me}.tmp"
    tmp.write_text(json.dumps(asdict(entry)), encoding="utf-8")
    tmp.replace(folder / entry.file_name)
    return entry


def unregister(pid: int, ticks: str | None) -> None:
    """Forget a server (after it was stopped); a missing entry is fine."""
    name = f"process-{pid}-{ticks or 'x'}.json"
    with contextlib.suppress(FileNotFoundError):
        (registry_dir() / name).unlink()


def entries() -> Iterator[tuple[Path, ServerEntry | None]]:
    """Every entry file with its entry (None for a file that cannot be read as one)."""
    folder = registry_dir()
    if not folder.is_dir():
        return
    for path in sorted(folder.glob("process-*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            yield path, ServerEntry(**data)
        except (OSError, ValueError, TypeError):
            yield path, None


@dataclass(frozen=True)
class Leftover:
    """What cleanup found for one registry entry, and what it did."""

    entry: ServerEntry
    state: str  # "running, owner alive" | "running, owner gone" | "gone"
    selected: bool
    removed: bool

    @property
    def name(self) -> str:
        return f"process {self.entry.pid} ({self.entry.framework}, run {self.entry.run_id})"


def reclaim_processes(
    *,
    older_than_s: float = 0.0,
    run_id: str | None = None,
    dry_run: bool = False,
    grace_s: float = 10.0,
) -> list[Leftover]:
    """Stop registered servers whose owner (the alflow process that started them) is gone.

    A server whose owner still runs is kept: the owner stops it (and a run id alone cannot tell a
    finished run from one outside Prefect). Entries of servers that are gone are removed from the
    registry (never selected). Only entries at least ``older_than_s`` old and, with ``run_id``, of
    that run are selected.
    """
    now = time.time()
    found: list[Leftover] = []
    for path, entry in entries():
        if entry is None or not entry.server_alive():  # unreadable, or its server is gone: the entry goes
            if entry is None:
                log.warning("unreadable server registry entry %s: removed", path)
            else:
                found.append(Leftover(entry, "gone", selected=False, removed=False))
            if not dry_run:
                path.unlink(missing_ok=True)
            continue
        owner = same_process_alive(entry.owner_pid, entry.owner_ticks)
        state = "running, owner alive" if owner else "running, owner gone"
        selected = (
            not owner and entry.age_s(now) >= older_than_s and (run_id is None or entry.run_id == run_id)
        )
        removed = False
        if selected and not dry_run:
            terminate(entry.pid, entry.ticks, group=True, grace_s=grace_s)
            removed = not entry.server_alive()
            if removed:
                path.unlink(missing_ok=True)
        found.append(Leftover(entry, state, selected=selected, removed=removed))
    return found
