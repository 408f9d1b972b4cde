"""Shared by the real-vLLM tests: the vLLM environment, the model, and the no-leftover check."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from alflow.models import default_vllm_env


def require_vllm() -> Path:
    """The vLLM environment (``scripts/setup.sh --vllm``); skip without it, fail under CI."""
    env = default_vllm_env()
    if not (env / "bin" / "vllm").is_file():
        message = f"no vLLM environment at {env} (bin/vllm missing): bash scripts/setup.sh --vllm"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message + " (CI is set: scripts/setup.sh --dev must install it)", pytrace=False)
        pytest.skip(message, allow_module_level=True)
    return env


def vllm_processes(env: Path) -> list[str]:
    """``pid: command`` of every live process of the vLLM environment or a vLLM engine/worker."""
    found: list[str] = []
    marker = str(env)
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            raw = (proc / "cmdline").read_bytes()
            state = (proc / "stat").read_text().rsplit(")", 1)[-1].split()[0]
        except OSError:
            continue
        if state == "Z" or not raw:
            continue
        cmd = raw.replace(b"\0", b" ").decode(errors="replace")
        if marker in cmd or cmd.startswith(("VLLM::", "VLLM:")):
            found.append(f"{proc.name}: {cmd[:200]}")
    return found
