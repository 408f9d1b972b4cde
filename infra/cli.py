"""``alflow infra ...``: server-lifecycle commands.

``cleanup`` removes what killed or finished runs left behind (process-runner servers from the
registry, containers, Slurm jobs); ``sim-image`` makes the local image the docker runner runs the
simulator in.

:func:`register` adds the ``infra`` group to a typer app (the top-level entry calls it: ``alflow``
itself must not import ``infra``). ``python -m alflow_infra.cli cleanup ...`` runs the group on its own.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from alflow.frameworks.sim.recipe import SIM_IMAGE
from alflow_infra.errors import RunnerError
from alflow_infra.images import ensure_sim_image, runtime_mounts
from alflow_infra.lifecycle import LiveRun, alflow_slurm_job_list
from alflow_infra.runners.docker import CleanupEntry, cleanup_containers, docker_client
from alflow_infra.runners.registry import reclaim_processes

_IS_LIVE: dict[str, LiveRun] = {}
"""How ``cleanup`` tells a finished run from one still going (set by :func:`register`; none: keep Slurm jobs)."""

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_UNIT_S = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_duration(text: str) -> float:
    """``'90'``, ``'90s'``, ``'10m'``, ``'2h'``, ``'1d'``, ``'1w'`` in seconds."""
    match = _DURATION.match(text.lower())
    if match is None:
        raise typer.BadParameter(f"{text!r} is not a duration such as 30s, 10m, 2h or 1d")
    return float(match.group(1)) * _UNIT_S[match.group(2)]


@dataclass(frozen=True)
class Found:
    """One thing ``cleanup`` looked at: a process-runner server, a container or a Slurm job."""

    kind: str  # "process" | "container" | "slurm job"
    name: str
    state: str
    run_id: str
    age_s: float
    selected: bool
    removed: bool

    def action(self, dry_run: bool) -> str:
        if self.removed:
            return "removed"
        if self.selected:
            return "would remove" if dry_run else "FAILED to remove"
        return "kept"


def _as_json(item: Found | CleanupEntry) -> dict[str, object]:
    """``item``'s fields for ``--json``, its age rounded (None: unknown)."""
    return {**asdict(item), "age_s": None if math.isinf(item.age_s) else round(item.age_s, 3)}


def _slurm_jobs(
    older_than_s: float, run_id: str | None, dry_run: bool, is_live: LiveRun | None
) -> list[Found]:
    """Alflow's Slurm jobs; those of runs that are over (``is_live``) are cancelled. Without it, none is."""
    from alflow_infra.runners.slurm import SubprocessSlurm

    found: list[Found] = []
    for job in alflow_slurm_job_list():
        if run_id is not None and job.run_id != run_id:
            continue
        live = is_live is None or is_live(job.run_id)
        state = "run still going" if live else "run over"
        if is_live is None:
            state = "run state unknown (use `alflow infra cleanup`)"
        selected = not live and job.age_s() >= older_than_s
        removed = selected and not dry_run
        if removed:
            SubprocessSlurm(30.0).cancel(job.job_id)
        found.append(Found("slurm job", job.job_id, state, job.run_id, job.age_s(), selected, removed))
    return found


def cleanup(
    older_than: Annotated[
        str,
        typer.Option("--older-than", help="Only what was started at least this long ago (30s, 10m, 2h, 1d)."),
    ] = "1h",
    run_id: Annotated[str | None, typer.Option("--run-id", help="Only what belongs to this run id.")] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="List what would be removed; remove nothing.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Remove what killed or finished runs left behind: process-runner servers, containers, Slurm jobs.

    Process-runner servers (from the registry in alflow's state folder) whose owner process is gone;
    containers labelled by alflow (alflow=1) old enough; Slurm jobs (comment alflow-run:<id>) whose
    Prefect flow run is over. Where a Docker engine or Slurm is not reachable, that part is skipped
    and said so.
    """
    older_than_s = parse_duration(older_than)
    skipped: dict[str, str] = {}
    processes = [
        Found(
            "process",
            f"pid {item.entry.pid} ({item.entry.framework} at {item.entry.base_url})",
            item.state,
            item.entry.run_id,
            item.entry.age_s(),
            item.selected,
            item.removed,
        )
        for item in reclaim_processes(older_than_s=older_than_s, run_id=run_id, dry_run=dry_run)
    ]
    containers: list[CleanupEntry] = []
    try:
        containers = cleanup_containers(
            docker_client(), older_than_s=older_than_s, run_id=run_id, dry_run=dry_run
        )
    except RunnerError as exc:
        skipped["docker"] = str(exc)
    slurm: list[Found] = []
    if shutil.which("squeue") is None:
        skipped["slurm"] = "squeue not found"
    else:
        try:
            slurm = _slurm_jobs(older_than_s, run_id, dry_run, _IS_LIVE.get("fn"))
        except RunnerError as exc:
            skipped["slurm"] = str(exc)
    found = [
        *processes,
        *(Found("container", e.name, e.status, e.run_id, e.age_s, e.selected, e.removed) for e in containers),
        *slurm,
    ]
    if as_json:
        payload = {
            "older_than_s": older_than_s,
            "dry_run": dry_run,
            "processes": [_as_json(f) for f in processes],
            "containers": [_as_json(e) for e in containers],
            "slurm_jobs": [_as_json(f) for f in slurm],
            "skipped": skipped,
        }
        typer.echo(json.dumps(payload, indent=2))
        return
    console = Console()
    for part, reason in skipped.items():
        console.print(Text(f"{part}: skipped ({reason})"))
    if not found:
        console.print("nothing left behind by alflow runs")
        return
    table = Table(title="left behind by alflow runs" + (" (dry run)" if dry_run else ""))
    for column in ("kind", "name", "state", "run id", "age", "action"):
        table.add_column(column)
    for f in found:
        age = "unknown" if math.isinf(f.age_s) else f"{f.age_s:.0f} s"
        cells = (f.kind, f.name, f.state, f.run_id, age, f.action(dry_run))
        table.add_row(*(Text(c) for c in cells))
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


def register(app: typer.Typer, is_live: Callable[[str], bool] | None = None) -> None:
    """Add the ``infra`` group to ``app`` (``alflow infra cleanup ...``).

    ``is_live(run_id)`` says whether a run is still going (the top-level CLI asks Prefect's API);
    without it, ``cleanup`` cancels no Slurm job (it cannot tell a finished run from a live one).
    """
    if is_live is not None:
        _IS_LIVE["fn"] = is_live
    app.add_typer(infra_app(), name="infra")


def main() -> None:
    """Run the ``infra`` group as a program (``python -m alflow_infra.cli``)."""
    infra_app()(prog_name="alflow infra")


if __name__ == "__main__":
    main()
