"""``alflow frameworks``: the framework plugins the registry holds (built-in and from entry points), and their parts."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import typer
from rich.table import Table

from alflow.cli.common import JsonOpt, console, emit_json, markup_safe
from alflow.config.server import engine_note_of
from alflow.frameworks.registry import Framework, frameworks, left_out
from alflow.plugins import BUILTIN, specs


@dataclass(frozen=True)
class FrameworkRow:
    """One plugin as the command shows it."""

    name: str
    title: str
    source: str
    """``built-in`` or the plugin's module reference (an entry point's)."""
    metrics: str
    """Its metrics path, or what it speaks instead."""
    synthetic: str
    """Its default synthetic scheme, or ``-``."""
    simulated: bool
    gpu: str
    note: str

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def row_of(plugin: Framework, source: str) -> FrameworkRow:
    """The row of ``plugin``."""
    return FrameworkRow(
        name=plugin.name,
        title=plugin.title,
        source=source,
        metrics=plugin.metrics.metrics_path if plugin.metrics is not None else "another framework's dialect",
        synthetic=plugin.knobs.default_scheme if plugin.knobs is not None else "-",
        simulated=plugin.sim is not None,
        gpu=plugin.gpu or "none",
        note=engine_note_of(plugin.name) or "",
    )


def rows() -> list[FrameworkRow]:
    """Every registered framework, in registry order."""
    builtin = {s.name for s in BUILTIN}
    source = {s.name: "built-in" if s.name in builtin else s.plugin for s in specs()}
    return [row_of(plugin, source[plugin.name]) for plugin in frameworks()]


def frameworks_command(json_out: JsonOpt = False) -> None:
    """List the serving frameworks alflow can drive: built-in plugins and those from the alflow.frameworks entry point."""
    found = rows()
    if json_out:
        emit_json({"frameworks": [r.to_dict() for r in found], "left_out": list(left_out())})
        return
    table = Table("framework", "name", "source", "metrics", "synthetic scheme", "sim speaks it", "GPUs")
    for r in found:
        table.add_row(
            markup_safe(r.name),
            markup_safe(r.title),
            markup_safe(r.source),
            markup_safe(r.metrics),
            markup_safe(r.synthetic),
            "yes" if r.simulated else "no",
            markup_safe(r.gpu),
        )
    console.print(table)
    for reason in left_out():
        console.print(f"left out: {markup_safe(reason)}")


def register(app: typer.Typer) -> None:
    """Add ``alflow frameworks`` to ``app``."""
    app.command("frameworks")(frameworks_command)
