"""AMD ATOM's server configuration (``python -m atom.entrypoints.openai_server``, ROCm GPUs)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from alflow.config.server import ServerBase


class AtomServer(ServerBase):
    """AMD's ATOM (``python -m atom.entrypoints.openai_server``, ROCm GPUs); its plugin is ``alflow/frameworks/atom``."""

    framework: Literal["atom"] = Field("atom", description="Serving framework: atom (AMD ATOM, ROCm).")
