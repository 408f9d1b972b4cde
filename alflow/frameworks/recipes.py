"""Recipes: one per framework plugin, each turns a :class:`~alflow.config.ServerConfig` into a Launch.

A framework's recipe is its plugin's ``recipe`` (:mod:`alflow.frameworks.registry`; its protocol:
:mod:`alflow.frameworks.contract`); :func:`build_launch` is the only entry
generic code needs. A framework's flags, file formats, endpoints and silent no-ops live in its plugin folder
(``alflow/frameworks/<name>/recipe.py``) and nowhere else.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from alflow.config import ServerConfig
from alflow.errors import InvalidInputError, RecipeError
from alflow.frameworks.contract import DialectSource, HintSource, InstallCheck, LogFacts, Recipe, SeedWarning
from alflow.frameworks.launch import Launch
from alflow.frameworks.registry import get_framework
from alflow.plugins import framework_names, usable_names


def recipes() -> dict[str, Recipe]:
    """Every registered framework's recipe, keyed by framework name."""
    return {name: get_recipe(name) for name in usable_names()}


def get_recipe(framework: str) -> Recipe:
    """The recipe of ``framework``, with an error listing the known ones."""
    try:
        return get_framework(framework).recipe
    except InvalidInputError:
        raise RecipeError(
            f"no recipe for framework {framework!r}; known: {', '.join(framework_names())}"
        ) from None


def dialect_source(dialect: str) -> DialectSource:
    """The recipe of the framework whose dialect ``dialect`` is (the simulator and the external runner use it)."""
    recipe: object = get_recipe(dialect)
    if not all(hasattr(recipe, a) for a in ("health_path", "metrics_path", "sim_source")):
        raise RecipeError(
            f"framework {dialect!r} has no dialect the simulator or an external server can speak"
        )
    return recipe  # type: ignore[return-value]


LOOPBACK = "127.0.0.1"
ALL_ADDRESSES = "0.0.0.0"  # noqa: S104 - only where a server must be reached from another host


def build_launch(config: ServerConfig, *, default_host: str = LOOPBACK) -> Launch:
    """The Launch for ``config`` from its framework's recipe.

    A config without a ``host`` binds ``default_host``: loopback unless the runner needs the server
    reachable from elsewhere (see :func:`alflow_infra.lifecycle.bind_host`).
    """
    if config.host is None:
        config = config.model_copy(update={"host": default_host})
    return get_recipe(config.framework).build(config)


def preflight_hints(config: ServerConfig) -> tuple[str, ...]:
    """Why a pre-flight may fail for ``config``: its framework recipe's ``knob_hints`` (none when it has none).

    (The simulator's recipe gives its dialect's framework hints, plus its own fault switches.)
    """
    source: HintSource | None = getattr(get_recipe(config.framework), "knob_hints", None)
    return source(config) if source is not None else ()


def speculative_label(config: ServerConfig) -> str | None:
    """The speculative method as ``config``'s framework names it on a live server, or None where it names none.

    TensorRT-LLM: ``trtllm_speculative_config_info{spec_method}`` (its ``decoding_type``).
    """
    label: object = getattr(get_recipe(config.framework), "speculative_label", None)
    return label(config) if callable(label) else None


def check_install(launch: Launch, prefix: Path | None) -> Launch:
    """``launch`` as it runs from an installed program (``prefix``: its environment, None: found on ``PATH``).

    The recipe's install rules (``check_install(launch, prefix)``, where it has them and the prefix is known) refuse
    what the install cannot run, before launch. No image is used, so the launch's image and its tag's release-gate
    warnings are dropped (:meth:`~alflow.frameworks.launch.Launch.without_image`; the live server's version is
    checked after start), except for a recipe whose image only labels the same program (``process_image_label``:
    the sim, whose image name is its series' identity). A launch of no registered framework (built by hand) has no
    install rules.
    """
    recipe: object = get_recipe(launch.framework) if launch.framework in framework_names() else None
    checker: InstallCheck | None = getattr(recipe, "check_install", None)
    if checker is not None and prefix is not None:
        launch = checker(launch, prefix)
    return launch if getattr(recipe, "process_image_label", False) else launch.without_image()


def log_facts(launch: Launch, log: Callable[[], str]) -> dict[str, str]:
    """What the started server's log (read by ``log`` only for a recipe that reads it) states (:class:`LogFacts`).

    Empty for a recipe without the hook, an unregistered framework or an empty log.
    """
    recipe: object = get_recipe(launch.framework) if launch.framework in framework_names() else None
    reader: LogFacts | None = getattr(recipe, "log_facts", None)
    if reader is None:
        return {}
    text = log()
    return reader(launch, text) if text else {}


def seed_warning(framework: str, facts: dict[str, str], seed: int | None) -> str | None:
    """The recipe's warning about a constant per-request seed under synthetic acceptance (:class:`SeedWarning`)."""
    recipe: object = get_recipe(framework) if framework in framework_names() else None
    check: SeedWarning | None = getattr(recipe, "seed_warning", None)
    return None if check is None else check(facts, seed)
