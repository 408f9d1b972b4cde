"""Local file safety: atomic writes and an exclusive lock file.

Atomic writes: readers see the old content or the new one, never half a file. The lock file
serialises read-merge-write updates of one file shared by several processes.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

from alflow.errors import AlflowError, InvalidInputError

DEFAULT_FILE_MODE = 0o666
"""Mode asked for new files; the process umask takes its bits away (umask 022 -> 0644)."""


class LockTimeoutError(AlflowError):
    """Another process held a lock file for longer than the caller would wait (names the lock)."""


def _create_temp(target: Path, mode: int) -> tuple[int, Path]:
    """A new, empty temporary file beside ``target`` created with ``mode`` (minus the umask).

    ``tempfile.mkstemp`` always creates 0600 files, which a team's shared store cannot read; an
    ``os.open`` with O_EXCL and a random name is as safe and lets the umask decide.
    """
    for _ in range(100):
        tmp = target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary file name", str(target.parent))


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, *, mode: int = DEFAULT_FILE_MODE) -> Path:
    """Write ``data`` to a temporary file in the same folder, fsync it, then rename it over ``path``.

    The file gets ``mode`` minus the process umask (0644 under umask 022). Pass ``mode=0o600`` only
    for a file that may hold secrets. After the rename the folder is fsynced too, so the new name
    survives a crash.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _create_temp(target, mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        tmp.replace(target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(target.parent)
    return target


def _fsync_dir(folder: Path) -> None:
    try:
        dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass  # some file systems refuse fsync on a folder; the rename itself is still atomic
    finally:
        os.close(dir_fd)


def require_local_path(path: str | os.PathLike[str], *, what: str, why: str) -> Path:
    """``path`` as a local path (``file://`` allowed); a URL such as ``s3://...`` is refused with ``why``.

    ``what`` names the input in the message (empty where the caller's error already names it).
    """
    text = os.fspath(path)
    if "://" in text and not text.startswith("file://"):
        scheme = text.split("://", 1)[0]
        raise InvalidInputError(f"{what + ' ' if what else ''}{text!r} is a {scheme}:// URL: {why}")
    return Path(text.removeprefix("file://"))


def lock_path_for(path: str | os.PathLike[str]) -> Path:
    """The lock file of ``path``: ``<path>.lock`` beside it."""
    p = Path(path)
    return p.with_name(p.name + ".lock")


@contextlib.contextmanager
def file_lock(
    path: str | os.PathLike[str], *, timeout_s: float, what: str = "the file", poll_s: float = 0.05
) -> Iterator[Path]:
    """Hold an exclusive ``flock`` on ``<path>.lock`` (created when missing) for the ``with`` body.

    Waits at most ``timeout_s`` for another holder, then raises :class:`LockTimeoutError` naming the
    lock. The kernel releases a flock when its process dies, so a crashed writer never leaves a
    stale lock; the (empty) lock file itself stays, which is harmless. flock is reliable on local
    file systems; on NFS it depends on the server (NFSv4 supports it).
    """
    lock = lock_path_for(path)
    lock.parent.mkdir(parents=True, exist_ok=True)
    # read-only is enough for flock, and opens a teammate's 0644 lock file too
    fd = os.open(lock, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, DEFAULT_FILE_MODE)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LockTimeoutError(
                        f"{lock}: timed out after {timeout_s:g} s waiting for the lock on {what} "
                        f"{Path(path)} (another process holds it; it is released when that process "
                        "finishes or dies)"
                    ) from None
                time.sleep(poll_s)
        try:
            yield lock
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
