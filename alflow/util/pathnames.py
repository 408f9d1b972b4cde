"""Paths a user names: can the system take them at all? One check for every path option and file argument.

A path whose one name is longer than the file system allows (``ENAMETOOLONG``: 255 bytes on ext4, xfs, btrfs and
tmpfs), whose whole is longer than ``PATH_MAX`` (4,096 bytes on Linux, the final NUL included), that holds a NUL or
that is not UTF-8 (a command line's raw bytes, which Python keeps as lone surrogates) is refused by the first system
call that touches it: before this check, ``alflow bench --out`` and a dozen other options answered such a path with an
``OSError`` traceback, and some only after the work was done (issue #49).
:func:`alflow.util.names.check_path_name` answers in one line that names the option, the path (cut) and what is allowed, before any work; it touches the disk only to ask the
nearest existing folder its limits (``pathconf``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

NAME_MAX: Final = 255
"""Bytes one file or folder name may have where the file system does not say (``NAME_MAX`` of ext4, xfs, tmpfs)."""
PATH_MAX: Final = 4096
"""Bytes a whole path may have, its final NUL included, where the system does not say (Linux's ``PATH_MAX``)."""


def _limit(folder: Path, name: str, default: int) -> int:
    """``os.pathconf(folder, name)``, or ``default`` where the system does not say (or says no limit)."""
    try:
        value = os.pathconf(folder, name)
    except (OSError, ValueError):
        return default
    return value if value > 0 else default


def _existing_folder(path: Path) -> Path:
    """The nearest folder of ``path`` (itself included) that exists: the file system whose limits apply."""
    for folder in (path, *path.parents):  # at most PATH_MAX / 2 of them: the whole was checked first
        try:
            if folder.is_dir():
                return folder
        except OSError:  # a name too long, a folder without search permission: go up
            continue
    return Path(os.sep)


def path_name_problem(value: str) -> str | None:
    """Why no system call can take ``value`` as a path (without the path: the caller names it), or None.

    A NUL, text that is not UTF-8, a whole path (made absolute) longer than ``PATH_MAX - 1`` bytes, or a name
    (a component between slashes) longer than the ``NAME_MAX`` of the file system it would be on.
    """
    if "\0" in value:
        return "holds a NUL character, which no path may hold: give the path without it"
    try:
        raw = value.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: bytes of the command line that are not UTF-8
        return "is not valid UTF-8 (a byte of another encoding): give a path in UTF-8"
    path_max = _limit(Path(os.sep), "PC_PATH_MAX", PATH_MAX)
    if len(raw) >= path_max:
        return f"is {len(raw):,} bytes long, longer than the {path_max - 1:,} bytes a path may have: give a shorter path"
    try:
        absolute = Path(value).expanduser().absolute()
    except RuntimeError:  # ~user of no such user: the caller's own check says so
        absolute = Path(value).absolute()
    whole = len(os.fsencode(absolute))
    if whole >= path_max:
        return (
            f"is {whole:,} bytes long as an absolute path, longer than the {path_max - 1:,} bytes a path may have: "
            "give a shorter path"
        )
    size = max(len(os.fsencode(part)) for part in absolute.parts)
    name_max = _limit(_existing_folder(absolute.parent), "PC_NAME_MAX", NAME_MAX)
    if size <= name_max:
        return None
    return (
        f"has a name (a part between slashes) of {size:,} bytes, longer than the {name_max:,} bytes a file or "
        "folder name may have on this file system: give shorter names"
    )
