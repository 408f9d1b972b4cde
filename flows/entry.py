"""The orchestration layer as the command line calls it: the one module above the core that the CLI imports.

:mod:`alflow.cli` reaches ``flows/``, ``tasks/`` and ``infra/`` through here only. Each function imports what it needs when it is called, so a command that starts no flow (``alflow --help``,
``alflow bench``) loads no Prefect. ``tests/unit/test_architecture.py`` checks that the command line reaches the
layers above the core through this module only.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import typer
    from pydantic import BaseModel

    from alflow.config import BenchmarkParams, CalibrateParams, GateParams, SweepParams
    from alflow.methods.dry_run import Plan

FLOW_FUNCTIONS: dict[str, tuple[str, str]] = {
    "m0": ("alflow_flows.calibrate", "calibrate"),
    "m1": ("alflow_flows.gate", "gate"),
    "m2": ("alflow_flows.benchmark", "benchmark"),
    "sweep": ("alflow_flows.sweep", "sweep"),
    "demo": ("alflow_flows.demo", "demo"),
}
"""Flow name -> (module, flow function)."""


def flow_function(flow: str) -> Any:
    """The Prefect flow ``flow`` (one of :data:`FLOW_FUNCTIONS`)."""
    module, name = FLOW_FUNCTIONS[flow]
    return getattr(importlib.import_module(module), name)


def resolve_short_form(
    resolver: str, preset: str | None, params: BaseModel | None, fields: dict[str, object]
) -> Any:
    """A flow's full parameters from its short form, by the flows' own resolver (``alflow_flows.presets``)."""
    import alflow_flows.presets

    return getattr(alflow_flows.presets, resolver)(preset=preset, params=params, **fields)


def checked_plan(flow: str, params: CalibrateParams | GateParams | BenchmarkParams | SweepParams) -> Plan:
    """Every check a real run makes before it starts, then its plan (:func:`alflow_flows.common.checked_plan`)."""
    from alflow_flows.common import checked_plan as plan

    return plan(flow, params)


def check_launchable(params: object) -> None:
    """Refuse a run whose first server cannot start (:func:`alflow_flows.common.check_launchable`)."""
    from alflow_flows.common import check_launchable as check

    check(params)


def flow_run_is_live(run_id: str) -> bool:
    """Whether a Prefect flow run is still going (:func:`alflow_tasks.servers.flow_run_is_live`)."""
    from alflow_tasks.servers import flow_run_is_live as live

    return live(run_id)


def register_infra(app: typer.Typer, is_live: Callable[[str], bool]) -> None:
    """Add the ``infra`` group (``alflow infra cleanup ...``) to ``app``."""
    from alflow_infra import cli

    cli.register(app, is_live=is_live)
