"""What the simulator reads from a framework's own sources: the readers' protocols and the settings they find.

A dialect's plugin reads its framework's own flags (``Framework.sim_args``) and environment variables
(``Framework.sim_env``) into :class:`FrameworkSettings`; :func:`alflow.sim.config.resolve` merges them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol


class ArgsReader(Protocol):
    """A dialect's reader of its framework's own flags (those the simulator's command line does not define)."""

    def __call__(self, args: Sequence[str]) -> FrameworkSettings: ...


class EnvReader(Protocol):
    """A dialect's reader of its framework's own environment variables."""

    def __call__(self, env: Mapping[str, str]) -> FrameworkSettings: ...


@dataclass(frozen=True)
class FrameworkSettings:
    """Speculative settings found in one framework source (all optional)."""

    source: str
    k: int | None = None
    method: str | None = None
    al: float | None = None
    rates: tuple[float, ...] | None = None
    scheme: str | None = None
    token_mode: str | None = None
