"""Provenance facts collected for every run: code version, host, GPUs."""

from __future__ import annotations

import platform
import shutil
import subprocess
from pathlib import Path
from typing import Any

from alflow import __version__

_REPO = Path(__file__).resolve().parents[2]


def _output(argv: list[str], timeout_s: float) -> str | None:
    """The stripped standard output of ``argv``, None when it cannot run or fails."""
    try:
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout_s, check=True
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def git_revision(repo: Path = _REPO) -> str | None:
    """The git commit of the alflow checkout (with ``+dirty`` for local changes), or None."""
    git = shutil.which("git")
    if git is None or not (repo / ".git").exists():
        return None
    rev = _output([git, "-C", str(repo), "rev-parse", "HEAD"], 10)
    dirty = _output([git, "-C", str(repo), "status", "--porcelain", "--untracked-files=no"], 10)
    if rev is None or dirty is None:
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
    out = _output([smi, "--query-gpu=index,name,memory.total,driver_version", "--format=csv,noheader"], 20)
    if out is None:
        return None
    rows = []
    for line in out.splitlines():
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
