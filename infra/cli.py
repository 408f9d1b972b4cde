"""``alflow infra ...``: server-lifecycle commands.

``cleanup`` removes containers a killed run left behind; ``sim-image`` makes the local image the
docker runner runs the simulator in.

:func:`register` adds the ``infra`` group to a typer app (the top-level entry calls it: ``alflow``
itself must not import ``infra``). ``python -m infra.cli cleanup ...`` runs the group on its own.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from infra.errors import RunnerError
from infra.images import ensure_sim_image, runtime_mounts
from infra.recipes.sim import SIM_IMAGE
from infra.runners.docker import cleanup_containers, docker_client

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_UNIT_S = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_duration(text: str) -> float:
    """``'90'``, ``'90s'``, ``'10m'``, ``'2h'``, ``'1d'``, ``'1w'`` in seconds."""
    match = _DURATION.match(text.lower())
    if match is None:
        raise typer.BadParameter(f"{text!r} is not a duration such as 30s, 10m, 2h or 1d")
    return float(match.group(1)) * _UNIT_S[match.group(2)]


def cleanup(
    older_than: Annotated[
        str,
        typer.Option(
            "--older-than", help="Only containers created at least this long ago (30s, 10m, 2h, 1d)."
        ),
    ] = "1h",
    run_id: Annotated[str | None, typer.Option("--run-id", help="Only containers of this run id.")] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="List what would be removed; remove nothing.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Remove containers labelled by alflow (alflow=1) that a killed run left behind."""
    older_than_s = parse_duration(older_than)
    try:
        entries = cleanup_containers(
            docker_client(), older_than_s=older_than_s, run_id=run_id, dry_run=dry_run
        )
    except RunnerError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if as_json:
        rows = [{**asdict(e), "age_s": None if math.isinf(e.age_s) else round(e.age_s, 3)} for e in entries]
        payload = {"older_than_s": older_than_s, "dry_run": dry_run, "containers": rows}
        typer.echo(json.dumps(payload, indent=2))
        return
    console = Console()
    if not entries:
        console.print("no alflow containers found")
        return
    table = Table(title="alflow containers" + (" (dry run)" if dry_run else ""))
    for column in ("name", "status", "run id", "age", "action"):
        table.add_column(column)
    for e in entries:
        action = "removed" if e.removed else ("would remove" if e.selected and dry_run else "kept")
        if e.selected and not dry_run and not e.removed:
            action = "FAILED to remove"
        age = "unknown" if math.isinf(e.age_s) else f"{e.age_s:.0f} s"
        table.add_row(Text(e.name), Text(e.status), Text(e.run_id), age, action)
    console.print(table)


def sim_image(
    rebuild: Annotated[
        bool, typer.Option("--rebuild", help="Import the image again even if it exists.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Make the local simulator image (alflow-sim-base:local) that the docker runner runs the sim in."""
    try:
        image_id = ensure_sim_image(docker_client(), rebuild=rebuild)
    except RunnerError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    mounts = list(runtime_mounts())
    if as_json:
        typer.echo(json.dumps({"image": SIM_IMAGE, "id": image_id, "mounts": mounts}, indent=2))
        return
    console = Console()
    console.print(f"{SIM_IMAGE} ({image_id[:19]}); run with host networking and read-only mounts:")
    for mount in mounts:
        console.print(f"  -v {mount}", highlight=False, markup=False)


def infra_app() -> typer.Typer:
    """The ``infra`` command group."""
    app = typer.Typer(help="Server lifecycle: containers started by alflow.", no_args_is_help=True)
    app.callback()(_group)
    app.command("cleanup")(cleanup)
    app.command("sim-image")(sim_image)
    return app


def _group() -> None:
    """Server lifecycle: containers started by alflow."""


def register(app: typer.Typer) -> None:
    """Add the ``infra`` group to ``app`` (``alflow infra cleanup ...``)."""
    app.add_typer(infra_app(), name="infra")


def main() -> None:
    """Run the ``infra`` group as a program (``python -m infra.cli``)."""
    infra_app()(prog_name="alflow infra")


if __name__ == "__main__":
    main()
