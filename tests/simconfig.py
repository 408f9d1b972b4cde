"""The simulated engine's settings as the tests run it, in one place; the registry's frameworks as tests iterate them."""

from __future__ import annotations

from typing import Any

from alflow.plugins import BUILTIN
from alflow.sim.config import SimConfig


def fast_sim(**fields: Any) -> SimConfig:
    """:class:`SimConfig` on any free port with no simulated time (``time_scale=0``), plus ``fields``."""
    return SimConfig(**{"port": 0, "time_scale": 0, **fields})


FRAMEWORKS: tuple[str, ...] = tuple(spec.name for spec in BUILTIN)
"""alflow's own frameworks, from the registry: a test of every framework iterates this, never a list of names."""
DIALECTS: tuple[str, ...] = tuple(spec.name for spec in BUILTIN if spec.dialect)
"""The real frameworks among them (metrics read, API spoken by the simulator)."""
