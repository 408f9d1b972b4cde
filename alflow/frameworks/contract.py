"""What a framework's recipe is to alflow: the protocols its plugin's ``recipe`` satisfies.

:class:`Recipe` builds the :class:`~alflow.frameworks.launch.Launch` of a server configuration; a real framework's
recipe is also a :class:`DialectSource` (the simulator speaking its dialect reads its endpoints and knob sources);
a recipe may add an :class:`InstallCheck` (``check_install``) and a :class:`HintSource` (``knob_hints``). The
lookups by framework name are in :mod:`alflow.frameworks.recipes`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from alflow.config import ServerConfig
from alflow.frameworks.launch import Launch
from alflow.frameworks.sim_source import SimSource


class Recipe(Protocol):
    """Builds the Launch of one framework."""

    @property
    def framework(self) -> str:
        """The framework name this recipe serves (the registry key)."""
        ...

    @property
    def default_image(self) -> str | None:
        """The image used when the config names none (None: the recipe needs no image)."""
        ...

    def build(self, config: ServerConfig) -> Launch:
        """The Launch for ``config``; raises :class:`RecipeError` for unsupported or no-op settings."""
        ...


class DialectSource(Protocol):
    """A real framework's recipe seen from the simulator that speaks its dialect: endpoints and knob path."""

    @property
    def health_path(self) -> str:
        """Health endpoint path."""
        ...

    @property
    def metrics_path(self) -> str:
        """Prometheus metrics path."""
        ...

    def sim_source(self, config: ServerConfig) -> SimSource:
        """Arguments and environment that carry the speculative config and knobs."""
        ...


class InstallCheck(Protocol):
    """A recipe's check of a host install (``check_install(launch, prefix)``) before launching from it.

    Returns the launch to run: the same, or adapted to what the install has (flags its release supports,
    a plugin's switch and label).
    """

    def __call__(self, launch: Launch, prefix: Path) -> Launch: ...


class LogFacts(Protocol):
    """A recipe's reading of its started server's log (``log_facts(launch, log)``).

    Facts the server states only there, for the run's provenance (vLLM's model runner); empty when the log says
    nothing the recipe knows.
    """

    def __call__(self, launch: Launch, log: str) -> dict[str, str]: ...


class SeedWarning(Protocol):
    """A recipe's warning about a constant per-request sampling seed under synthetic acceptance (``seed_warning``).

    Given what the server's log said (:class:`LogFacts`); None when the seed does no harm there.
    """

    def __call__(self, facts: dict[str, str], seed: int | None) -> str | None: ...


class HintSource(Protocol):
    """A recipe's likely causes of a synthetic knob that did not take effect (``knob_hints(config)``)."""

    def __call__(self, config: ServerConfig) -> tuple[str, ...]: ...
