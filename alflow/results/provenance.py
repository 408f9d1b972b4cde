"""Provenance facts collected for every run: code version, host, GPUs."""

from __future__ import annotations

import platform
import shutil
import subprocess
from pathlib import Path
from typing import Any

from alflow import __version__

_REPO = Path(__file__).resolve().parents[2]


def git_revision(repo: Path = _REPO) -> str | None:
    """The git commit of the alflow checkout (with ``+dirty`` for local changes), or None."""
    git = shutil.which("git")
    if git is None or not (repo / ".git").exists():
        return None
    try:
        rev = subprocess.run(
            [git, "-C", str(repo), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            [git, "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return rev + ("+dirty" if dirty else "")


def code_version() -> str:
    """``alflow <version> (<git revision>)``, the revision left out when unknown."""
    rev = git_revision()
    return f"alflow {__version__}" + (f" ({rev})" if rev else "")


def gpu_info() -> list[dict[str, str]] | None:
    """GPUs reported by ``nvidia-smi`` (name, memory, driver), or None where there is none."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run(
            [smi, "--query-gpu=index,name,memory.total,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    rows = []
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 4:
            rows.append(dict(zip(("index", "name", "memory", "driver"), parts, strict=True)))
    return rows


def host_info() -> dict[str, Any]:
    """Host name, OS, Python, CPU count and GPUs where available."""
    import os

    return {
        "host": platform.node(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "gpus": gpu_info(),
    }
