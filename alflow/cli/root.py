"""The root ``alflow`` command: every command group registered on one Typer app, and the entry point.

Every command that produces numbers has ``--json`` (machine-readable output on stdout). Errors in
the user's input are printed as one line on stderr (``error: ...``) with exit code 2
(:mod:`alflow.cli.common`).
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from alflow import __version__
from alflow.cli import bench, demo, evals, frameworks, models, reference, report, results, run, synthetic
from alflow.cli.common import error_line, say_err, tolerant_output, unencodable_output_line, usage_error_line
from alflow.errors import AlflowError
from alflow.sim import cli as sim_cli
from alflow.tiny import cli as tiny_cli
from alflow_flows.entry import flow_run_is_live, register_infra

app = typer.Typer(
    name="alflow",
    help="Calibrate, gate and benchmark speculative decoding in LLM serving frameworks.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def _run_is_live(run_id: str) -> bool:
    """Whether a Prefect flow run is still going (asked lazily: only cleanup of Slurm jobs needs it)."""
    run.prefect_defaults()
    return flow_run_is_live(run_id)


for group in (synthetic, reference, evals, models, bench, report, results, run, demo, frameworks):
    group.register(app)
sim_cli.register(app)
tiny_cli.register(app)
register_infra(app, is_live=_run_is_live)


@app.callback(invoke_without_command=True)
def _root(
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.")] = False,
) -> None:
    if version:
        sys.stdout.write(f"alflow {__version__}\n")
        raise typer.Exit


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``alflow`` console script.

    Every input error ends the same way: one line on stderr (``error: ...``) and exit code 2, also
    the parser's own usage errors (a bad option value, an unknown option), which Typer would print as
    a usage box, and an alflow input error of a command that does not catch its own.
    A terminal that cannot encode a character gets it as a backslash escape (:func:`tolerant_output`).
    """
    tolerant_output()
    try:
        code = app(args=argv, prog_name="alflow", standalone_mode=False)
    except typer.TyperException as exc:  # click's ClickException family, vendored by Typer
        if type(exc).__name__ != "NoArgsIsHelpError":  # that one has printed the help already
            say_err(error_line(usage_error_line(exc)))
        sys.exit(exc.exit_code)
    except typer.Abort:
        say_err("aborted")
        sys.exit(130)
    except AlflowError as exc:
        say_err(error_line(" ".join(str(exc).split())))
        sys.exit(2)
    except (
        UnicodeEncodeError
    ) as exc:  # a stream tolerant_output could not change: the terminal, not the input
        line = unencodable_output_line(exc)
        if line is None:
            raise
        say_err(error_line(line))
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)
