"""The framework plugins: one :class:`Framework` per serving engine, and the one registry of them.

A framework (vLLM, SGLang, TensorRT-LLM, ATOM, the simulator, the tiny CPU engine) is one plugin: a folder
``alflow/frameworks/<name>/`` whose ``plugin.py`` gives a :class:`Framework` (its recipe, metrics reader, synthetic
knob renderer, how the simulator speaks it, the environment variables that carry its knobs, its GPUs); its
server-configuration model is a ``ServerBase`` variant (``config.py`` in the built-in plugins' folders). Generic code asks this
registry and never names a framework (``tests/unit/test_architecture.py`` checks the string literals).

Each plugin is named by a :class:`FrameworkSpec`: two ``module:attribute`` references, loaded by
:mod:`importlib` when first asked for, so this module imports no plugin and no plugin's import order matters.
The built-in specs are :data:`BUILTIN`; a third-party package adds a framework through the entry point group
``alflow.frameworks`` (as vLLM loads its own plugins from ``vllm.general_plugins``)::

    [project.entry-points."alflow.frameworks"]
    myengine = "myengine_alflow.spec:SPEC"      # a FrameworkSpec

The spec's module must be light (it is loaded while :mod:`alflow.config` builds its server union), and its
config model must import only :mod:`alflow.config.server`'s ``ServerBase``. An entry point that does not load (an
import error, not a spec, a name taken) is left out with a warning, as vLLM treats its plugins;
``alflow frameworks`` lists why.
"""

from __future__ import annotations

import functools
import importlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Literal

from alflow.errors import AlflowError, InvalidInputError

if TYPE_CHECKING:
    from alflow.acceptance.knobs import KnobRenderer
    from alflow.frameworks.recipes import Recipe
    from alflow.metrics.dialects import Dialect
    from alflow.sim.config import ArgsReader, EnvReader
    from alflow.sim.dialects import MetricsEmitter

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "alflow.frameworks"
"""The entry point group third-party framework plugins register under (each entry a :class:`FrameworkSpec`)."""

GpuVendor = Literal["nvidia", "amd"]


@dataclass(frozen=True)
class FrameworkSpec:
    """Where a framework's parts are: its server-config model and its :class:`Framework` (``module:attribute``)."""

    name: str
    config: str
    """The pydantic model of its server configuration (a ``ServerBase`` with ``framework: Literal[name]``)."""
    plugin: str
    """The :class:`Framework` object."""


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
    synthetic_markers: Mapping[str, Callable[[object], bool]] = field(default_factory=dict)
    """Keys of a server's self-description (``/server_info``, its arguments, its environment) and the test of a
    value that means synthetic acceptance is on (the M1 gate refuses such a server)."""
    token_id_prompts: bool = True
    """Its ``/v1/completions`` takes a prompt of token ids (random prompts are sent as such); False: text only
    (random prompts go as words)."""
    reasoning_fields: tuple[str, ...] = ("reasoning",)
    """Where its streamed chat deltas put reasoning text (one or two fields, in order; the simulator follows)."""
    gpu: GpuVendor | None = None
    """Whose GPUs a container of this framework is given (None: it needs none)."""
    engine_note: str | None = None
    """The label its numbers carry in reports (simulated or CPU engines); None for a real GPU framework."""
    own_fields: Mapping[str, str] = field(default_factory=dict)
    """Fields its server-config variant has that the common base lacks, and what to tell a configuration of another
    framework that sets one (``{framework}`` is that framework): such a configuration is refused with it."""


class PluginError(AlflowError):
    """A framework plugin could not be loaded (the message names the plugin and the reference)."""


BUILTIN: tuple[FrameworkSpec, ...] = (
    FrameworkSpec("vllm", "alflow.frameworks.vllm.config:VllmServer", "alflow.frameworks.vllm.plugin:PLUGIN"),
    FrameworkSpec(
        "sglang", "alflow.frameworks.sglang.config:SglangServer", "alflow.frameworks.sglang.plugin:PLUGIN"
    ),
    FrameworkSpec(
        "trtllm", "alflow.frameworks.trtllm.config:TrtllmServer", "alflow.frameworks.trtllm.plugin:PLUGIN"
    ),
    FrameworkSpec("atom", "alflow.frameworks.atom.config:AtomServer", "alflow.frameworks.atom.plugin:PLUGIN"),
    FrameworkSpec("sim", "alflow.frameworks.sim.config:SimServer", "alflow.frameworks.sim.plugin:PLUGIN"),
    FrameworkSpec("tiny", "alflow.frameworks.tiny.config:TinyServer", "alflow.frameworks.tiny.plugin:PLUGIN"),
)
"""The frameworks alflow ships, in the order lists show them."""


def _resolve(reference: str, what: str) -> object:
    module, _, attribute = reference.partition(":")
    try:
        return getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError) as exc:
        raise PluginError(f"{what}: cannot load {reference!r}: {type(exc).__name__}: {exc}") from exc


@functools.cache
def _loaded() -> tuple[tuple[FrameworkSpec, ...], tuple[str, ...]]:
    found = list(BUILTIN)
    broken: list[str] = []
    for point in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda p: p.name):
        where = f"entry point {point.name!r} of {ENTRY_POINT_GROUP} ({point.value})"
        try:
            spec = _resolve(point.value, where)
            if not isinstance(spec, FrameworkSpec) or spec.name != point.name:
                raise PluginError(f"{where} must be a FrameworkSpec named {point.name!r}")
            if spec.name in {s.name for s in found}:
                raise PluginError(f"{where} names framework {spec.name!r}, which is already registered")
            _config_model(spec)
        except PluginError as exc:
            # as vLLM does with its plugins: a broken one is left out and said, the others still work
            log.warning("framework plugin left out: %s", exc)
            broken.append(str(exc))
            continue
        found.append(spec)
    return tuple(found), tuple(broken)


def specs() -> tuple[FrameworkSpec, ...]:
    """Every framework's spec: the built-in ones, then the entry points' that load (see :func:`broken_plugins`)."""
    return _loaded()[0]


def broken_plugins() -> tuple[str, ...]:
    """Why each entry point that could not be loaded was left out (logged once as a warning too)."""
    return _loaded()[1]


def framework_names() -> tuple[str, ...]:
    """The registered frameworks' names."""
    return tuple(s.name for s in specs())


def _spec(name: str) -> FrameworkSpec:
    for spec in specs():
        if spec.name == name:
            return spec
    raise InvalidInputError(f"unknown framework {name!r}; known: {', '.join(framework_names())}")


@functools.cache
def get_framework(name: str) -> Framework:
    """The plugin of framework ``name``; an unknown name is an error listing the known ones."""
    spec = _spec(name)
    plugin = _resolve(spec.plugin, f"framework {name!r}")
    if not isinstance(plugin, Framework) or plugin.name != name:
        raise PluginError(f"framework {name!r}: {spec.plugin} is not a Framework named {name!r}")
    return plugin


def frameworks() -> tuple[Framework, ...]:
    """Every registered framework's plugin, in registry order."""
    return tuple(get_framework(name) for name in framework_names())


def config_models() -> tuple[type, ...]:
    """Every framework's server-configuration model, in registry order (for :mod:`alflow.config.server`)."""
    return tuple(_config_model(spec) for spec in specs())


def config_model_of(name: str) -> type:
    """The server-configuration model of framework ``name``."""
    return _config_model(_spec(name))


def _config_model(spec: FrameworkSpec) -> type:
    model = _resolve(spec.config, f"framework {spec.name!r}")
    if not isinstance(model, type):
        raise PluginError(f"framework {spec.name!r}: {spec.config} is not a class")
    return model


def own_fields() -> dict[str, tuple[tuple[str, ...], str]]:
    """Every framework's own server-config fields: the frameworks that have each, and the first one's message."""
    fields: dict[str, tuple[tuple[str, ...], str]] = {}
    for f in frameworks():
        for name, why in f.own_fields.items():
            owners, first = fields.get(name, ((), why))
            fields[name] = ((*owners, f.name), first)
    return fields


def dialect_names() -> tuple[str, ...]:
    """The frameworks whose metrics alflow reads and whose API the simulator speaks (the real frameworks)."""
    return tuple(f.name for f in frameworks() if f.metrics is not None and f.sim is not None)


def check_dialect(name: str, what: str = "dialect") -> str:
    """``name`` if it is a dialect (:func:`dialect_names`), else an error naming it and the allowed ones."""
    allowed = dialect_names()
    if name not in allowed:
        raise InvalidInputError(f"{what} {name!r} is not one of {', '.join(allowed)}")
    return name


def knob_env_names() -> frozenset[str]:
    """Every framework's knob environment variables (never inherited by a launched server)."""
    return frozenset().union(*(f.knob_env for f in frameworks()))


def is_set(value: object) -> bool:
    """A marker's test: anything but null, false, zero or empty."""
    return value not in (None, False, "", 0, [], {})


def is_given(value: object) -> bool:
    """A marker's test: any value but null."""
    return value is not None


def number_of(value: object) -> float | None:
    """``value`` as a number (a number or its text), or None."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        return float(value)
    except ValueError:
        return None


def synthetic_markers() -> dict[str, Callable[[object], bool]]:
    """Every plugin's synthetic markers: key -> the test of its value."""
    return {key: test for f in frameworks() for key, test in f.synthetic_markers.items()}


def engine_note(name: str) -> str | None:
    """The label the numbers of framework ``name`` carry in reports (None for a real framework)."""
    return get_framework(name).engine_note
