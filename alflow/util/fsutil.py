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
import stat
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO, Final

from alflow.errors import AlflowError, InvalidInputError
from alflow.util.names import shown
from alflow.util.pathnames import path_name_problem

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


def _is_special(path: Path) -> bool:
    """Whether ``path`` (its links followed) is a character device (``/dev/null``, a terminal): written through.

    Raises ``OSError`` for a block device, a FIFO or a socket: no file to replace, nor one to write into (a disk's
    device written as root is the disk; a FIFO blocks until a reader comes).
    """
    try:
        mode = path.stat().st_mode
    except (OSError, ValueError):
        return False
    if stat.S_ISBLK(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
        raise OSError(errno.EINVAL, "not a regular file (a block device, FIFO or socket)", str(path))
    return stat.S_ISCHR(mode)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, *, mode: int = DEFAULT_FILE_MODE) -> Path:
    """Write ``data`` to a temporary file in the same folder, fsync it, then rename it over ``path``.

    The file gets ``mode`` minus the process umask (0644 under umask 022). Pass ``mode=0o600`` only
    for a file that may hold secrets. After the rename the folder is fsynced too, so the new name
    survives a crash.

    A ``path`` that is a character device (``/dev/null``, a terminal) is written through, never renamed over: as root,
    the rename replaced ``/dev/null`` itself with a regular file, for every program on the machine. A block device,
    a FIFO or a socket is an ``OSError`` (:func:`_is_special`).
    """
    target = Path(path)
    if _is_special(target):
        with target.open("wb") as fh:
            fh.write(data)
        return target
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
    try:
        dir_fd = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return target
    try:
        os.fsync(dir_fd)
    except OSError:
        pass  # some file systems refuse fsync on a folder; the rename itself is still atomic
    finally:
        os.close(dir_fd)
    return target


LOCAL_SCHEMES: Final = ("file://", "local://")
"""URL prefixes that name local files (fsspec's ``LocalFileSystem`` protocols): read as local paths, with every local
check (regular files only, confined under the root), never through fsspec."""


def local_path_of(path: str | os.PathLike[str]) -> str | None:
    """The local path ``path`` names (a plain path, ``file://...`` or ``local://...``); None for another URL."""
    text = os.fspath(path)
    if text.startswith("file://localhost/"):  # RFC 8089: the host "localhost" is this machine
        return text.removeprefix("file://localhost")
    for prefix in LOCAL_SCHEMES:
        if text.startswith(prefix):
            return text.removeprefix(prefix)
    return None if "://" in text else text


def require_local_path(path: str | os.PathLike[str], *, what: str, why: str) -> Path:
    """``path`` as a local path (``file://`` allowed); a URL such as ``s3://...`` is refused with ``why``.

    ``what`` names the input in the message (empty where the caller's error already names it).
    """
    text = os.fspath(path)
    local = local_path_of(text)
    if local is None:
        scheme = text.split("://", 1)[0]
        raise InvalidInputError(f"{what + ' ' if what else ''}{text!r} is a {scheme}:// URL: {why}")
    return Path(local)


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
    lock = Path(path).with_name(Path(path).name + ".lock")
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


def real_path(path: str | os.PathLike[str]) -> Path:
    """``path`` with every symlink resolved (``os.path.realpath``): where a write must land.

    A table kept behind a symlink (``reference.yaml -> /shared/tables/ref.yaml``) is locked and replaced at
    its real path, so the link stays a link and its target gets the new content.
    """
    return Path(os.path.realpath(os.fspath(path)))


def _kind(path: Path) -> str:
    """What ``path`` is, in words (for a message about a path that is not a folder or not a file)."""
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        return f"unreadable ({exc.strerror or exc})"
    for test, name in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a named pipe"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file or folder"


def check_writable_dir(path: str | os.PathLike[str], *, what: str) -> Path:
    """``path`` (symlinks resolved) when it is a folder alflow can write in, or one it can create.

    An existing path must be a folder in which a probe file can be created and deleted (``/proc`` and a
    read-only mount fail that); a missing one needs its nearest existing ancestor to be such a folder (a path
    under a regular file or ``/dev/null`` is refused). Raises :class:`InvalidInputError` naming ``what``, the
    path and what is allowed. Nothing is left behind: the folder itself is not created here.
    """
    given = os.fspath(path)
    allowed = "allowed: a folder alflow can create files in, or a path where one can be created"
    if not given or "\0" in given:
        raise InvalidInputError(f"{what} {given!r} is not a path; {allowed}")
    problem = path_name_problem(given)
    if problem is not None:
        raise InvalidInputError(f"{what} {shown(given)} {problem}")
    target = real_path(given)
    existing = target
    while not existing.exists() and existing != existing.parent:
        if existing.is_symlink():  # a dangling link: its target's folder is the one to write in
            break
        existing = existing.parent
    if not existing.is_dir():
        where = "is" if existing == target else f"is under {existing}, which is"
        raise InvalidInputError(f"{what} {given!r} {where} {_kind(existing)}, not a folder; {allowed}")
    try:  # a probe file created and deleted
        fd, tmp = _create_temp(existing / "alflow-probe", 0o600)
    except OSError as exc:
        problem = f"cannot create a file in {existing} ({exc.strerror or exc})"
        raise InvalidInputError(f"{what} {given!r} is not writable: {problem}; {allowed}") from None
    os.close(fd)
    try:
        tmp.unlink()
    except OSError as exc:
        problem = f"cannot delete a file in {existing} ({exc.strerror or exc})"
        raise InvalidInputError(f"{what} {given!r} is not writable: {problem}; {allowed}") from None
    return target


def check_writable_file(path: str | os.PathLike[str], *, what: str) -> Path:
    """``path``'s real location (symlinks resolved) when a file can be written there atomically.

    The real path must be a regular file or not exist yet, and its folder must pass
    :func:`check_writable_dir` (the lock file and the temporary file are created beside it). Raises
    :class:`InvalidInputError` naming ``what``, the path and what is allowed.
    """
    given = os.fspath(path)
    if not given or "\0" in given:
        raise InvalidInputError(f"{what} {given!r} is not a path; allowed: a file path")
    problem = path_name_problem(given)
    if problem is not None:
        raise InvalidInputError(f"{what} {shown(given)} {problem}")
    target = real_path(given)
    if target.exists() and not target.is_file():
        raise InvalidInputError(
            f"{what} {given!r} is {_kind(target)}; allowed: a regular file, or a path where one can be created"
        )
    check_writable_dir(target.parent, what=f"{what} {given!r}: its folder")
    return target


def confined(root: Path, candidate: Path) -> Path | None:
    """``candidate`` with symlinks resolved when it is a regular file inside ``root`` (resolved), else None."""
    try:
        real = candidate.resolve(strict=True)
        base = root.resolve(strict=True)
    except (OSError, RuntimeError):
        return None
    if not real.is_relative_to(base) or not real.is_file():
        return None
    return real


def file_problem(path: str | os.PathLike[str]) -> str | None:
    """Why ``path`` cannot be read as a file (``does not exist``, ``is a folder``, ``is not a regular file ...``).

    None for a regular file (a symlink to one counts). For the one error line that names the input. A path no system
    call can take (a name too long, a NUL: :func:`~alflow.util.pathnames.path_name_problem`) or cannot stat (a
    folder without search permission) says why, never raises.
    """
    problem = path_name_problem(os.fspath(path))
    if problem is not None:
        return problem
    p = Path(path)
    try:
        if p.is_file():
            return None
        if not p.exists():
            return "does not exist"
        return (
            "is a folder" if p.is_dir() else "is not a regular file (a FIFO, socket or device): give a file"
        )
    except OSError as exc:
        return f"cannot be read ({exc.strerror or type(exc).__name__})"


STORE_SCHEMES: Final = ("s3", "gs", "gcs")
"""URL schemes a results root may have besides a local path: the object stores the run store writes through fsspec.
Any other (``http://``, ``ftp://``, ``zip://``) is no results root: a server that never answers held a command for
minutes (round 14)."""
STORE_URLS: Final = " / ".join(f"{scheme}://" for scheme in STORE_SCHEMES)
"""The schemes of :data:`STORE_SCHEMES` as a refusal names them (``s3:// / gs:// / gcs://``)."""


def foreign_url(path: str) -> bool:
    """Whether ``path`` is a URL of no object store (:data:`STORE_SCHEMES`): no results root nor run directory."""
    return local_path_of(path) is None and path.split("://", 1)[0].lower() not in STORE_SCHEMES


def open_regular(path: str | os.PathLike[str], *, follow: bool = True) -> BinaryIO:
    """``path`` opened for reading when it is a regular file, else an ``OSError`` naming it and what it is.

    Opened without blocking (a FIFO would wait for a writer for good), then checked on the open file itself: a FIFO,
    socket or device (``/dev/zero`` streams without end), or a symlink to one, is never read. A symlink to a regular
    file is followed (results deduplicated by links, git-annex) unless ``follow`` is false; where a root must confine
    it, the caller checks (:func:`open_confined`). The caller closes it.
    """
    nofollow = 0 if follow else os.O_NOFOLLOW
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | nofollow | getattr(os, "O_CLOEXEC", 0))
    f = os.fdopen(fd, "rb")
    mode = os.fstat(f.fileno()).st_mode
    if not stat.S_ISREG(mode):
        f.close()
        raise OSError(errno.EINVAL, "not a regular file", os.fspath(path))
    return f


def read_at_most(f: BinaryIO, limit: int) -> bytes:
    """Up to ``limit + 1`` bytes of ``f``, read in parts: more than ``limit`` tells the caller the file is too big.

    Not ``f.read(limit + 1)``: that allocates the whole bound up front (a gigabyte for each kilobyte manifest).
    """
    parts: list[bytes] = []
    left = limit + 1
    while left > 0 and (part := f.read(min(left, _READ_PART))):
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


_READ_PART: Final = 256 << 10


def open_confined(root: Path, candidate: Path) -> BinaryIO | None:
    """``candidate`` opened for reading when it is a regular file inside ``root`` (:func:`confined`), else None.

    The resolved file is opened without following a symlink and without blocking, and handed back only when the
    opened file is still a regular one: a file swapped for a symlink or a FIFO after the check is not read either.
    The caller closes it.
    """
    real = confined(root, candidate)
    if real is None:
        return None
    try:
        return open_regular(real, follow=False)  # resolved already: a link now is a swap after the check
    except OSError:
        return None


def read_confined(root: Path, candidate: Path) -> bytes | None:
    """The bytes of ``candidate`` when it is a regular file inside ``root`` (:func:`open_confined`), else None."""
    f = open_confined(root, candidate)
    if f is None:
        return None
    with f:
        try:
            return f.read()
        except OSError:
            return None


def unsafe_file(root: str, run_dir: str, names: Iterable[str]) -> str | None:
    """The first of ``names`` in ``run_dir`` that exists but is not a regular file inside ``root``, else None.

    A symlink out of the root, a FIFO, a device: reading one would leave the root or block a thread for good, so
    a run holding one is not read at all. None where the root is an fsspec URL (no symlinks there).
    """
    if "://" in root:
        return None
    base = Path(root)
    try:
        plain_dir = stat.S_ISDIR(os.lstat(run_dir).st_mode)  # not a symlink to a folder elsewhere
    except OSError:
        plain_dir = False
    for name in names:
        path = Path(run_dir) / name
        try:
            mode = os.lstat(path).st_mode
        except OSError:  # not there: nothing to read
            continue
        if plain_dir and stat.S_ISREG(mode) and os.sep not in name and name not in (".", ".."):
            continue  # a plain file right in a plain run directory: inside the root without resolving a path
        if confined(base, path) is None:
            return name
    return None
