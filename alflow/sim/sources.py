"""What the simulator reads of a framework: its plugin's parts (:class:`SimPlugin`), the readers of its own sources.

A dialect's plugin reads its framework's own flags (``Framework.sim_args``) and environment variables
(``Framework.sim_env``) into :class:`FrameworkSettings`; :func:`alflow.sim.config.resolve` merges them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, cast

from alflow.plugins import plugin_of, usable_names

if TYPE_CHECKING:
    from alflow.sim.dialects import MetricsEmitter


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


ArgsReader = Callable[[Sequence[str]], FrameworkSettings]
"""A dialect's reader of its framework's own flags (those the simulator's command line does not define)."""
EnvReader = Callable[[Mapping[str, str]], FrameworkSettings]
"""A dialect's reader of its framework's own environment variables."""


class _Knobs(Protocol):
    @property
    def default_scheme(self) -> str: ...


class _AskedFields(Protocol):
    @property
    def request_fields(self) -> Mapping[str, object]: ...


class SimPlugin(Protocol):
    """What the simulator reads of a framework's plugin to speak it (``alflow.frameworks.registry.Framework`` is one).

    The simulator finds a plugin through its spec (:func:`alflow.plugins.plugin_of`, plain data) and reads only
    these parts, so it imports neither the registry nor a plugin module; the registry checks statically that its
    ``Framework`` is a :class:`SimPlugin`.
    """

    @property
    def name(self) -> str: ...
    @property
    def sim(self) -> MetricsEmitter | None: ...
    @property
    def sim_args(self) -> ArgsReader | None: ...
    @property
    def sim_flags(self) -> frozenset[str]: ...
    @property
    def sim_env(self) -> EnvReader | None: ...
    @property
    def knob_env(self) -> frozenset[str]: ...
    @property
    def knobs(self) -> _Knobs | None: ...
    @property
    def metrics(self) -> _AskedFields | None: ...
    @property
    def token_id_prompts(self) -> bool: ...
    @property
    def reasoning_fields(self) -> tuple[str, ...]: ...


def sim_plugin(dialect: str) -> SimPlugin:
    """The plugin of the framework whose dialect the simulator speaks."""
    return cast(SimPlugin, plugin_of(dialect))


def sim_plugins() -> tuple[SimPlugin, ...]:
    """Every registered framework's plugin, as the simulator reads it."""
    return tuple(sim_plugin(name) for name in usable_names())
