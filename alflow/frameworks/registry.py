"""The typed framework registry: each framework's :class:`Framework` (its parts), loaded from :mod:`alflow.plugins`' specs.

The parts' protocols live where they are used: the recipe's in :mod:`alflow.frameworks.contract`, the metrics
reader's in :mod:`alflow.metrics.dialects`, the knob renderer's in :mod:`alflow.acceptance.knobs`, the simulator's in
:mod:`alflow.sim.dialects` and :mod:`alflow.sim.sources`. None of those packages imports this module: the lower
layers that read one part of a plugin (the simulator, the metrics readers, the GSM8K probe, the workloads) find it
through its spec (:func:`alflow.plugins.plugin_of`) and read it through a protocol of their own, so the registry
sits above all of them (``tests/unit/test_architecture.py`` checks packages and modules, type hints included).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from alflow.plugins import (
    GpuVendor,
    PluginError,
    broken_plugins,
    framework_names,
    load_each,
    plugin_of,
    spec_of,
    unusable_plugins,
    usable_names,
)

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from alflow.acceptance.knobs import KnobRenderer
    from alflow.frameworks.contract import Recipe
    from alflow.metrics.dialects import Dialect
    from alflow.sim.dialects import MetricsEmitter
    from alflow.sim.sources import ArgsReader, EnvReader, SimPlugin


@dataclass(frozen=True)
class Framework:
    """One serving engine as alflow drives and reads it: everything framework-specific, behind one name.

    ``metrics`` is None for an engine that speaks another framework's metrics (the simulator picks a dialect,
    the tiny engine speaks vLLM's); ``knobs`` is None for one without synthetic acceptance of its own; ``sim`` is
    how alflow's simulated engine speaks this framework (None: the simulator cannot stand in for it).
    """

    name: str
    title: str
    """The name people write (``vLLM``, ``SGLang``)."""
    recipe: Recipe
    metrics: Dialect | None = None
    knobs: KnobRenderer | None = None
    sim: MetricsEmitter | None = None
    sim_args: ArgsReader | None = None
    """How the simulator reads this framework's own flags in its dialect (vLLM's ``--speculative-config``, ATOM's
    ``--spec-decode-*``); None: it takes none."""
    sim_flags: frozenset[str] = frozenset()
    """The flags ``sim_args`` reads (an error for another dialect then says whose they are)."""
    sim_env: EnvReader | None = None
    """How the simulator reads this framework's own environment variables in its dialect (SGLang's, TensorRT-LLM's)."""
    knob_env: frozenset[str] = frozenset()
    """Environment variables that carry its synthetic knobs: never inherited by a launched server, read by the
    simulator only for this dialect."""
    shortcut_env: frozenset[str] = frozenset()
    """Environment variables that switch on a shortcut a benchmark must not take (work a synthetic run skips and a
    real one cannot, or simulated expert routing): never inherited by a launched server; its recipe refuses them."""
    synthetic_markers: Mapping[str, Callable[[object], bool]] = field(default_factory=dict)
    """Keys of a server's self-description (``/server_info``, its arguments, its environment) and the test of a
    value that means synthetic acceptance is on (the M1 gate refuses such a server)."""
    token_id_prompts: bool = True
    """Its ``/v1/completions`` takes a prompt of token ids (random prompts are sent as such); False: text only
    (random prompts go as words)."""
    reasoning_fields: tuple[str, ...] = ("reasoning",)
    """Where its streamed chat deltas put reasoning text (one or two fields, in order; the simulator follows)."""
    repeated_draws: str | None = None
    """Why repeated points of one configuration repeat one synthetic draw (a fixed per-step seed); None: each
    repeat is an independent draw. A sweep counts such repeats as one draw where it states uncertainty."""
    gpu: GpuVendor | None = None
    """Whose GPUs a container of this framework is given (None: it needs none)."""


@functools.cache
def get_framework(name: str) -> Framework:
    """The plugin of framework ``name``; an unknown name is an error listing the known ones."""
    spec = spec_of(name)
    plugin = plugin_of(name)
    if not isinstance(plugin, Framework):
        raise PluginError(f"framework {name!r}: {spec.plugin} is not a Framework named {name!r}")
    speaks = plugin.metrics is not None and plugin.sim is not None
    if spec.dialect != speaks:
        raise PluginError(
            f"framework {name!r}: its spec says dialect={spec.dialect} but its plugin has "
            f"{'both' if speaks else 'not both'} a metrics reader and a simulator emitter"
        )
    return plugin


def frameworks() -> tuple[Framework, ...]:
    """Every registered framework's plugin that loads, in registry order (see :func:`left_out`)."""
    return _usable()[0]


def left_out() -> tuple[str, ...]:
    """Why each third-party plugin was left out: its entry point did not load, or its plugin is not a Framework."""
    return broken_plugins() + unusable_plugins() + _usable()[1]


@functools.cache
def _usable() -> tuple[tuple[Framework, ...], tuple[str, ...]]:
    return load_each(usable_names(), get_framework)


def repeated_draws(framework: str) -> str | None:
    """``framework``'s :attr:`Framework.repeated_draws` (None for a name no plugin has)."""
    return get_framework(framework).repeated_draws if framework in framework_names() else None


def knob_env_names() -> frozenset[str]:
    """Every framework's knob environment variables (never inherited by a launched server)."""
    return frozenset().union(*(f.knob_env for f in frameworks()))


def never_inherited_env() -> frozenset[str]:
    """Variables a launched server never inherits from alflow's own environment: knobs and shortcuts."""
    return knob_env_names().union(*(f.shortcut_env for f in frameworks()))


if TYPE_CHECKING:

    def _read_by_the_simulator(plugin: Framework) -> SimPlugin:
        """Mypy's check that a :class:`Framework` is what the simulator reads of a plugin (never called)."""
        return plugin
