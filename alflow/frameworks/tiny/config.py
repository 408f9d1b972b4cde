"""The tiny CPU engine's server configuration (``alflow tiny serve``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from alflow.config.server import ServerBase


class TinyServer(ServerBase):
    """alflow's small real CPU engine (``alflow tiny serve``, n-gram drafting only)."""

    framework: Literal["tiny"] = Field("tiny", description="Serving framework: tiny.")
