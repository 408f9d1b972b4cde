"""Serve every deployment of ``prefect.yaml`` from this process (no work pool or worker needed).

    PREFECT_API_URL=http://127.0.0.1:4200/api python -m alflow_deployments.serve [--only m2-benchmark ...]

The deployments, their parameters, schedules and triggers are read from ``prefect.yaml`` (the one source),
so serving and deploying never drift apart.
"""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path
from typing import Any

from prefect import Flow, serve
from prefect.client.schemas.schedules import CronSchedule
from prefect.deployments.runner import RunnerDeployment
from prefect.events import DeploymentTriggerTypes
from pydantic import TypeAdapter

from alflow.util.yamlfile import load_yaml

ROOT = Path(__file__).resolve().parents[1]


def load_deployments(path: Path = ROOT / "prefect.yaml") -> list[dict[str, Any]]:
    """The ``deployments`` list of prefect.yaml."""
    data = load_yaml(path, what="Prefect project file")
    deployments: list[dict[str, Any]] = data.get("deployments") or []
    return deployments


def load_flow(entrypoint: str) -> Flow[..., Any]:
    """The flow object named by an entrypoint ``path/to/file.py:function`` (relative to the repo)."""
    file, _, name = entrypoint.partition(":")
    folder, _, rest = file.removesuffix(".py").partition("/")
    module = f"alflow_{folder}.{rest.replace('/', '.')}"  # the layer's folder installs as alflow_<folder>
    flow = getattr(importlib.import_module(module), name)
    if not isinstance(flow, Flow):
        raise TypeError(f"{entrypoint} is not a Prefect flow")
    return flow


def schedules(spec: dict[str, Any]) -> list[CronSchedule]:
    """The cron schedules of one deployment (active ones only)."""
    return [
        CronSchedule(cron=s["cron"], timezone=s.get("timezone", "UTC"))
        for s in spec.get("schedules") or []
        if s.get("active", True) and "cron" in s
    ]


_TRIGGER: TypeAdapter[DeploymentTriggerTypes] = TypeAdapter(DeploymentTriggerTypes)


def triggers(spec: dict[str, Any]) -> list[DeploymentTriggerTypes]:
    """The deployment triggers of one deployment (e.g. m2-after-m1's: M2 on M1's pass event), as `prefect deploy` reads them."""
    return [_TRIGGER.validate_python(t) for t in spec.get("triggers") or []]


def main() -> None:
    """Serve the deployments named with --only (default: all)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", nargs="*", help="deployment names to serve (default: all)")
    args = parser.parse_args()
    runnables: list[RunnerDeployment] = []
    for spec in load_deployments():
        if args.only and spec["name"] not in args.only:
            continue
        deployment = load_flow(spec["entrypoint"]).to_deployment(
            name=spec["name"],
            description=spec.get("description"),
            parameters=spec.get("parameters") or {},
            tags=spec.get("tags") or [],
            schedules=schedules(spec),
            triggers=list(triggers(spec)),
        )
        assert isinstance(deployment, RunnerDeployment)  # sync context: not a coroutine
        runnables.append(deployment)
    serve(*runnables)


if __name__ == "__main__":
    main()
