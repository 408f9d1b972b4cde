"""The tiny CPU engine's server configuration (``alflow tiny serve``)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from alflow.config.server import ServerBase


class TinyServer(ServerBase):
    """alflow's small real CPU engine (``alflow tiny serve``, n-gram drafting only)."""

    ENGINE_NOTE: ClassVar[str | None] = (
        "TINY CPU ENGINE: real measurements of a small model (alflow tiny serve: n-gram drafting on CPU), "
        "not of a GPU serving framework; compare them only with other tiny-engine runs."
    )

    framework: Literal["tiny"] = Field("tiny", description="Serving framework: tiny.")
