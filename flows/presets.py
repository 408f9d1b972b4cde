"""The flows' short forms: a server preset found by name, the full parameters, and the run names.

A preset is ``presets/<name>.yaml`` under the project root (:func:`alflow.config.presets.presets_root`);
when no file has that name, the Prefect Variable ``alflow-preset-<name>`` (a JSON object or YAML text of
a :class:`~alflow.config.presets.ServerPreset`) is read, so a team can add a server from the UI without a
commit. The rules that merge the short form over the base live in :mod:`alflow.config.presets`.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, ParamSpec, TypeVar, cast

from prefect.context import FlowRunContext
from prefect.runtime import flow_run
from prefect.settings import PREFECT_API_URL
from prefect.variables import Variable

from alflow.config import BenchmarkParams, CalibrateParams, GateParams, SweepParams, ThinkingMode
from alflow.config.presets import (
    VARIABLE_PREFIX,
    ServerPreset,
    benchmark_params,
    calibrate_params,
    check_preset_name,
    gate_params,
    load_preset,
    preset_from_data,
    preset_path,
    presets_root,
    sweep_params,
    unknown_preset,
)
from alflow.methods.sweep_rules import DRY_RUN
from alflow.util.names import safe_key

_log = logging.getLogger(__name__)


def _variable(name: str) -> Any:
    """The value of the Prefect Variable ``name`` (None when there is none, or no API to ask).

    Outside a flow run without ``PREFECT_API_URL`` there is no API to ask short of starting a temporary
    server, so none is asked.
    """
    if FlowRunContext.get() is None and not PREFECT_API_URL.value():
        return None
    try:
        return Variable.get(name)
    except Exception as exc:  # the API is unreachable: the file presets still work; say why this one did not
        _log.warning("could not read the Prefect Variable %s: %s", name, exc)
        return None


def find_preset(name: str | None) -> ServerPreset | None:
    """The preset ``name``: its file under the project root, else its Prefect Variable; None for None."""
    if name is None:
        return None
    check_preset_name(name)
    root = presets_root()
    if preset_path(name, root).is_file():
        return load_preset(name, root)
    variable = VARIABLE_PREFIX + name
    value = _variable(variable)
    if value is None:
        raise unknown_preset(name, root, also=f"a Prefect Variable {VARIABLE_PREFIX}<name>")
    return preset_from_data(value, f"Prefect Variable {variable}")


_RESOLVED: OrderedDict[tuple[str, str, str], Any] = OrderedDict()
"""The parameters each flow run resolved, by (flow run, resolver, its arguments): the latest few runs only."""
_KEEP = 32
_LOCK = threading.Lock()

P = ParamSpec("P")
R = TypeVar("R")


def resolved_once(resolve: Callable[P, R]) -> Callable[P, R]:
    """``resolve`` run once per flow run: the run's name (:func:`run_name`) and its body share the result.

    Prefect names a run before its body starts; both resolve the same short form (a preset read from a file or a
    Prefect Variable). The first resolution in a flow run is kept and handed to the second, so a Variable changed
    in between cannot give the run a name of other parameters than it measures. Outside a flow run (the command
    line resolves before it starts one and hands the flow the full parameters) every call resolves.
    """
    signature = inspect.signature(resolve)

    @functools.wraps(resolve)
    def once(*args: P.args, **kwargs: P.kwargs) -> R:
        run = flow_run.get_id()
        if not run:
            return resolve(*args, **kwargs)
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        given = json.dumps(bound.arguments, sort_keys=True, default=_plain)
        key = (str(run), resolve.__name__, given)
        with _LOCK:
            if key in _RESOLVED:
                return cast(R, _RESOLVED[key])
        resolved = resolve(*args, **kwargs)
        with _LOCK:
            _RESOLVED[key] = resolved
            while len(_RESOLVED) > _KEEP:
                _RESOLVED.popitem(last=False)
        return resolved

    return once


def _plain(value: object) -> object:
    dump = getattr(value, "model_dump", None)
    return dump(mode="json") if callable(dump) else str(value)


@resolved_once
def m2_params(
    preset: str | None = None,
    model: str | None = None,
    k: int | None = None,
    target_al: float | None = None,
    concurrencies: Sequence[int] | None = None,
    params: BenchmarkParams | None = None,
) -> BenchmarkParams:
    """M2's full parameters from the flow's short form."""
    return benchmark_params(
        preset=find_preset(preset),
        model=model,
        k=k,
        target_al=target_al,
        concurrencies=concurrencies,
        params=params,
    )


@resolved_once
def m1_params(
    preset: str | None = None,
    model: str | None = None,
    k: int | None = None,
    thinking: ThinkingMode | None = None,
    params: GateParams | None = None,
) -> GateParams:
    """M1's full parameters from the flow's short form."""
    return gate_params(preset=find_preset(preset), model=model, k=k, thinking=thinking, params=params)


@resolved_once
def m0_params(
    preset: str | None = None,
    models: Sequence[str] | None = None,
    ks: Sequence[int] | None = None,
    params: CalibrateParams | None = None,
) -> CalibrateParams:
    """M0's full parameters from the flow's short form."""
    return calibrate_params(preset=find_preset(preset), models=models, ks=ks, params=params)


@resolved_once
def sweep_params_of(
    preset: str | None = None,
    model: str | None = None,
    ks: Sequence[int] | None = None,
    target_al: float | None = None,
    concurrencies: Sequence[int] | None = None,
    params: SweepParams | None = None,
) -> SweepParams:
    """The sweep's full parameters from the flow's short form (the preset found by name)."""
    return sweep_params(
        preset=find_preset(preset),
        model=model,
        ks=ks,
        target_al=target_al,
        concurrencies=concurrencies,
        params=params,
    )


def run_name(prefix: str, resolve: Callable[..., Any], name: Callable[[Any], str]) -> Callable[[], str]:
    """A ``flow_run_name`` callable: ``prefix-`` plus ``name`` of the resolved parameters.

    A short form that does not resolve names the run after its preset (the flow itself then fails with
    the reason); a dry run's name says so (``m2-dry-run-...``). The part after the prefix goes through :func:`alflow.util.names.safe_key` (``always_hash=False``):
    ``m2-demo-llama-70b-k2`` as typed, a Japanese or bidi model id as an ASCII slug with a hash.
    """

    def flow_run_name() -> str:
        given = {key: value for key, value in flow_run.parameters.items() if key != DRY_RUN}
        try:
            fragment = str(name(resolve(**given)))
        except Exception:  # the flow reports the reason itself, at its start
            fragment = str(given.get("preset") or "custom")
        # a name built from a model id is derived: a slug (hashed where it differs from the id), never the id
        plan_only = "-dry-run" if flow_run.parameters.get(DRY_RUN) else ""
        return f"{prefix}{plan_only}-{safe_key(fragment, always_hash=False)}"

    return flow_run_name
