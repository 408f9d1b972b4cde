"""The simulated engine's settings as the tests run it, in one place."""

from __future__ import annotations

from typing import Any

from alflow.sim.config import SimConfig


def fast_sim(**fields: Any) -> SimConfig:
    """:class:`SimConfig` on any free port with no simulated time (``time_scale=0``), plus ``fields``."""
    return SimConfig(**{"port": 0, "time_scale": 0, **fields})
