"""The framework plugins' registry, as plain data: which frameworks there are, where their parts are, their config models.

A framework (vLLM, SGLang, TensorRT-LLM, ATOM, the simulator, the tiny CPU engine) is one plugin: a folder
``alflow/frameworks/<name>/`` whose ``plugin.py`` gives a :class:`~alflow.frameworks.registry.Framework` (its recipe,
metrics reader, synthetic knob renderer, how the simulator speaks it, the environment variables that carry its knobs,
its GPUs) and whose ``config.py`` gives its server-configuration model (a ``ServerBase`` variant, which also says its
own fields and the label its numbers carry). Generic code asks the registry and never names a framework
(``tests/unit/test_architecture.py`` checks the string literals).

Two modules, one above the other, so that no import closes a cycle (type hints included):

- this one names each plugin by a :class:`FrameworkSpec` (``module:attribute`` references, loaded by
  :mod:`importlib` when first asked for) and answers in plain data: the names, the dialects, the config models.
  It imports no plugin and no part's protocol, so :mod:`alflow.config` and the simulator's settings build on it;
- :mod:`alflow.frameworks.registry` loads the typed :class:`~alflow.frameworks.registry.Framework` objects, whose
  parts' protocols (recipe, metrics reader, knobs, simulator) sit in the modules that define them.

The built-in specs are :data:`BUILTIN`; a third-party package adds a framework through the entry point group
``alflow.frameworks`` (as vLLM loads its own plugins from ``vllm.general_plugins``)::

    [project.entry-points."alflow.frameworks"]
    myengine = "myengine_alflow.spec:SPEC"      # a FrameworkSpec

The spec's module must be light (it is loaded while :mod:`alflow.config` builds its server union), and its
config model must import only :mod:`alflow.config.server`'s ``ServerBase``. An entry point that does not load (any
error or exit while importing it, not a spec, a name taken, a config that is not a ``ServerBase`` variant of its name)
is left out with one warning naming its distribution and the reason, as vLLM treats its plugins; so is one whose
plugin object is not a ``Framework`` (:func:`alflow.frameworks.registry.frameworks`). ``alflow frameworks`` lists
why. ``alflow --version`` and ``alflow --help`` load no entry point (:func:`skip_entry_points`).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib.metadata import EntryPoint, distributions, entry_points
from typing import Literal, TypeVar, get_args

from alflow.errors import AlflowError, InvalidInputError
from alflow.plugin_probe import IN_CHILD, load_seconds, printable, probe, reason_of
from alflow.util.redact import cut_middle

log = logging.getLogger(__name__)
T = TypeVar("T")

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
    """The :class:`~alflow.frameworks.registry.Framework` object."""
    dialect: bool = False
    """A real framework whose metrics alflow reads and whose API the simulator speaks (its plugin then has both a
    metrics reader and a simulator emitter; the registry checks when it loads the plugin)."""


class PluginError(AlflowError):
    """A framework plugin could not be loaded (the message names the plugin and the reference)."""


BUILTIN: tuple[FrameworkSpec, ...] = tuple(
    FrameworkSpec(
        name, f"alflow.frameworks.{name}.config:{model}", f"alflow.frameworks.{name}.plugin:PLUGIN", dialect
    )
    for name, model, dialect in (
        ("vllm", "VllmServer", True),
        ("sglang", "SglangServer", True),
        ("trtllm", "TrtllmServer", True),
        ("atom", "AtomServer", True),
        ("sim", "SimServer", False),
        ("tiny", "TinyServer", False),
    )
)
"""The frameworks alflow ships, in the order lists show them."""


def resolve(reference: str, what: str) -> object:
    """The object a ``module:attribute`` reference names; a :class:`PluginError` naming ``what`` if it does not load.

    Whatever its module raises or does while importing (an error of any kind, ``sys.exit``) is that error: a plugin
    cannot end or break the command that loads it.
    """
    module, _, attribute = reference.partition(":")
    try:
        with contextlib.redirect_stdout(sys.stderr):  # what it prints must not end in a command's JSON
            return getattr(importlib.import_module(module), attribute)
    except KeyboardInterrupt:
        if threading.current_thread() is threading.main_thread():
            raise  # Ctrl-C while importing: the user's, the command stops (in a loader thread: the module raised it)
        raise PluginError(
            f"{what}: cannot load {reference!r}: KeyboardInterrupt: raised by the module"
        ) from None
    except BaseException as exc:  # a third party's module may raise anything at import, or exit
        raise PluginError(f"{what}: cannot load {reference!r}: {reason_of(exc)}") from exc


def resolve_within(reference: str, what: str, seconds: float | None = None) -> object:
    """:func:`resolve` in a daemon thread, waited for at most ``seconds``.

    An import that never returns (a plugin waiting on a network or a lock) is a :class:`PluginError`, not a command
    that hangs for good. The stuck import keeps its thread (Python cannot stop one) and its module's import lock; nothing else imports that
    module, since its plugin is left out.
    """
    if _importing_here():
        return resolve(reference, what)
    outcome: list[object] = []

    def load() -> None:
        try:
            outcome.append(resolve(reference, what))
        except PluginError as exc:
            outcome.append(exc)

    worker = threading.Thread(target=load, name=f"alflow-plugin-{what[:40]}", daemon=True)
    stdout = sys.stdout
    worker.start()
    seconds = load_seconds() if seconds is None else seconds
    worker.join(seconds)
    sys.stdout = stdout  # the stuck import's stdout redirect (resolve) ends here, not with it
    if not outcome:
        raise PluginError(f"{what}: importing {reference!r} did not end within {seconds:g} s")
    if isinstance(outcome[0], PluginError):
        raise outcome[0]
    return outcome[0]


def _importing_here() -> bool:
    """Whether this thread is inside an import (it holds a module's import lock).

    Such as alflow's configuration building its model of every framework: a plugin imported in another thread could
    wait for that lock, so it is imported in this one, unbounded (the command line loads the plugins first, outside
    any import).
    """
    try:
        from importlib import _bootstrap  # CPython's import machinery: each module's lock and its owner

        me = threading.get_ident()
        locks = [ref() for ref in list(_bootstrap._module_locks.values())]  # type: ignore[attr-defined]
        return any(getattr(lock, "owner", None) == me for lock in locks)
    except Exception:  # another Python: bounded, as by default
        return False


_ENTRY_POINTS = [True]
"""Whether third-party entry points are read (off for ``--version`` and ``--help``: :func:`skip_entry_points`)."""


def skip_entry_points() -> None:
    """Register the built-in frameworks only in this process (before anything asks the registry)."""
    _ENTRY_POINTS[0] = False


def _where(point: EntryPoint) -> str:
    dist = getattr(point, "dist", None)
    source = printable(f"{dist.name} {dist.version}") if dist is not None else "an unknown distribution"
    return f"entry point {point.name!r} of {ENTRY_POINT_GROUP} in {source} ({printable(point.value)})"


def _entry_points() -> tuple[EntryPoint, ...]:
    """The group's entry points (read, not loaded); a distribution whose ``entry_points.txt`` cannot be parsed is left out.

    One warning names it. Python's reader raises for every group then, and pydantic's plugin loader reads the same files: it is made to
    fail once here, quietly, so that it keeps no plugin (it sets its cache before reading) and alflow's models build.
    """
    try:
        return tuple(entry_points(group=ENTRY_POINT_GROUP))
    except Exception:  # noqa: S110 (each distribution is read alone below)
        pass
    found: list[EntryPoint] = []
    bad: list[str] = []
    for dist in distributions():
        try:
            found.extend(point for point in dist.entry_points if point.group == ENTRY_POINT_GROUP)
        except Exception as exc:
            bad.append(printable(f"{dist.metadata['Name']} {dist.version} ({type(exc).__name__}: {exc})"))
    try:
        from pydantic.plugin._loader import get_plugins

        get_plugins()
    except ImportError:  # another pydantic: switched off by its documented variable
        os.environ["PYDANTIC_DISABLE_PLUGINS"] = "__all__"
    except Exception:  # noqa: S110 (the failure expected: pydantic now holds no plugin)
        pass
    log.warning(
        "%s",
        cut_middle(
            f"the entry points of {', '.join(bad) or 'an installed distribution'} cannot be read: its framework "
            "plugins are left out, and pydantic's plugins are off"
        ),
    )
    return tuple(found)


@functools.cache
def entry_specs() -> tuple[tuple[EntryPoint, object], ...]:
    """Each third-party entry point with what its reference loads, or the :class:`PluginError` it gave.

    Each is first tried in a process of its own (:func:`alflow.plugin_probe.probe`: its spec, config and plugin
    modules), then imported in time (:func:`resolve_within`); the command line calls it first, outside any import.
    Their config models are imported later, where alflow's configuration builds its model of every framework.
    """
    points = _entry_points()  # read even for --help: an unreadable file must switch pydantic's plugins off
    if not _ENTRY_POINTS[0] or IN_CHILD:
        return ()
    loaded: list[tuple[EntryPoint, object]] = []
    for point in sorted(points, key=lambda p: p.name):
        try:
            dist = getattr(point, "dist", None)
            origin = "" if dist is None else f"{dist.name} {dist.version} {getattr(dist, '_path', '')}"
            why = probe(point.value, origin=origin)
            if why is not None:
                raise PluginError(f"{_where(point)}: {why}")
            loaded.append((point, resolve_within(point.value, _where(point))))
        except PluginError as exc:
            loaded.append((point, exc))
    return tuple(loaded)


@functools.cache
def _loaded() -> tuple[tuple[FrameworkSpec, ...], tuple[str, ...], dict[str, str]]:
    found = list(BUILTIN)
    broken: list[str] = []
    origins = {spec.name: "built-in" for spec in BUILTIN}
    for point, spec in entry_specs():
        where = _where(point)
        try:
            if isinstance(spec, PluginError):
                raise spec
            if not isinstance(spec, FrameworkSpec) or spec.name != point.name:
                raise PluginError(f"{where} must be a FrameworkSpec named {point.name!r}")
            if spec.name in {s.name for s in found}:
                raise PluginError(f"{where} names framework {spec.name!r}, which is already registered")
            _config_model(spec)
        except PluginError as exc:
            # as vLLM does with its plugins: a broken one is left out and said, the others still work
            reason = cut_middle(str(exc) if str(exc).startswith(where) else f"{where}: {exc}")
            log.warning("framework plugin left out: %s", reason)
            broken.append(reason)
            continue
        found.append(spec)
        origins[spec.name] = where
    return tuple(found), tuple(broken), origins


@functools.cache
def plugin_of(name: str) -> object:
    """Framework ``name``'s plugin object, loaded from its spec (an unknown name lists the known ones).

    Plain: the registry (:func:`alflow.frameworks.registry.get_framework`) checks it is a ``Framework``; a lower
    layer that reads one part of it (the simulator, the metrics readers) reads that part through a protocol of
    its own, so it never imports the registry or a plugin module.
    """
    plugin = resolve(spec_of(name).plugin, f"framework {name!r}")
    if getattr(plugin, "name", None) != name:
        raise PluginError(f"framework {name!r}: {spec_of(name).plugin} is not a Framework named {name!r}")
    try:  # what generic code reads of every plugin's metrics reader, read once here (a part that raises is broken)
        reader = getattr(plugin, "metrics", None)
        if reader is not None and not (
            isinstance(reader.name, str) and isinstance(reader.metrics_path, str) and callable(reader.matches)
        ):
            raise TypeError("its metrics reader has no name, metrics_path or matches of the right kinds")
    except Exception as exc:
        why = reason_of(exc)[:300]
        raise PluginError(f"framework {name!r}: {spec_of(name).plugin}: {why}") from exc
    return plugin


def specs() -> tuple[FrameworkSpec, ...]:
    """Every framework's spec: the built-in ones, then the entry points' that load (see :func:`broken_plugins`)."""
    return _loaded()[0]


def broken_plugins() -> tuple[str, ...]:
    """Why each entry point that could not be loaded was left out (logged once as a warning too)."""
    return _loaded()[1]


def load_each(names: Iterable[str], load: Callable[[str], T]) -> tuple[tuple[T, ...], tuple[str, ...]]:
    """``load(name)`` of each name, and why each third-party one whose load raised :class:`PluginError` was left out.

    A left-out one is logged once as a warning naming its entry point and distribution; a built-in one that does not
    load is alflow's own bug and raises.
    """
    loaded: list[T] = []
    broken: list[str] = []
    builtin = {spec.name for spec in BUILTIN}
    for name in names:
        try:
            loaded.append(load(name))
        except PluginError as exc:
            if name in builtin:
                raise
            reason = cut_middle(
                f"{_loaded()[2].get(name, 'unknown')}: {exc}"
            )  # its entry point and distribution
            log.warning("framework plugin left out: %s", reason)
            broken.append(reason)
    return tuple(loaded), tuple(broken)


def _checked_name(name: str) -> str:
    plugin_of(name)
    return name


@functools.cache
def _usable() -> tuple[tuple[str, ...], tuple[str, ...]]:
    return load_each(framework_names(), _checked_name)


def usable_names() -> tuple[str, ...]:
    """The frameworks whose plugin object loads: what code that walks every plugin iterates.

    Every built-in one, and the entry points' that load (the others are left out with one warning each,
    :func:`unusable_plugins`).
    """
    return _usable()[0]


def unusable_plugins() -> tuple[str, ...]:
    """Why each entry point whose spec loaded but whose plugin object did not was left out."""
    return _usable()[1]


def framework_names() -> tuple[str, ...]:
    """The registered frameworks' names."""
    return tuple(s.name for s in specs())


def spec_of(name: str) -> FrameworkSpec:
    """The spec of framework ``name``; an unknown name is an error listing the known ones."""
    for spec in specs():
        if spec.name == name:
            return spec
    raise InvalidInputError(f"unknown framework {name!r}; known: {', '.join(framework_names())}")


def config_models() -> tuple[type, ...]:
    """Every framework's server-configuration model, in registry order (for :mod:`alflow.config.server`)."""
    return tuple(_config_model(spec) for spec in specs())


def config_model_of(name: str) -> type:
    """The server-configuration model of framework ``name``."""
    return _config_model(spec_of(name))


def _config_model(spec: FrameworkSpec) -> type:
    model = resolve(spec.config, f"framework {spec.name!r}")
    fields = getattr(model, "model_fields", None)
    field = fields.get("framework") if isinstance(fields, dict) else None
    from pydantic import BaseModel

    if (
        not isinstance(model, type)
        or not issubclass(model, BaseModel)
        or field is None
        or get_args(getattr(field, "annotation", None)) != (spec.name,)
    ):
        raise PluginError(
            f"framework {spec.name!r}: {spec.config} is not a server configuration model "
            f"(a ServerBase subclass with framework: Literal[{spec.name!r}])"
        )
    try:  # a model whose schema cannot be built (a type named but never defined) would break every config
        model.model_rebuild(raise_errors=True)
        model.__pydantic_validator__.validate_python  # noqa: B018 (built, or raises)
    except Exception as exc:
        raise PluginError(
            f"framework {spec.name!r}: {spec.config} cannot be built: {reason_of(exc)[:300]}"
        ) from exc
    return model


def dialect_names() -> tuple[str, ...]:
    """The frameworks whose metrics alflow reads and whose API the simulator speaks (the real frameworks)."""
    return tuple(s.name for s in specs() if s.dialect)


def check_dialect(name: str, what: str = "dialect") -> str:
    """``name`` if it is a dialect (:func:`dialect_names`), else an error naming it and the allowed ones."""
    allowed = dialect_names()
    if name not in allowed:
        raise InvalidInputError(f"{what} {name!r} is not one of {', '.join(allowed)}")
    return name


def is_set(value: object) -> bool:
    """A synthetic marker's test: anything but null, false, zero or empty."""
    return value not in (None, False, "", 0, [], {})


def is_given(value: object) -> bool:
    """A synthetic marker's test: any value but null."""
    return value is not None


def number_of(value: object) -> float | None:
    """``value`` as a number (a number or its text), or None."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        return float(value)
    except ValueError:
        return None
