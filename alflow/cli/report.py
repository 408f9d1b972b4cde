"""``alflow report``: render a stored run, compare runs, export peers' formats.

- ``alflow report RUN_DIR [--format html|md|csv|json] [--output PATH]`` (same as ``alflow report
  show RUN_DIR``): ``html`` writes ``RUN_DIR/report.html`` unless ``--output`` is given; ``md``
  prints the Markdown summary; ``csv`` prints the run's export (M2: InferenceX rows; M0/M1: the
  acceptance-length matrix ``Model,<categories>,Overall``); ``json`` prints the same rows as JSON.
- ``alflow report compare RUN_DIR... [--root DIR [--flow m2]] [--format html|md|csv|json] [--output
  PATH]``: the runs side by side (HTML or Markdown), or the exports of all of them in one file (CSV /
  JSON); ``--root`` adds every complete run under a results root (oldest first).
- ``alflow report matrix RUN_DIR... [--metric accept_length|accept_rate|throughput] [--format
  table|csv|json]``: the matrix of ``aiperf speed-bench-report`` over M0/M1 runs, one column per
  literature dataset or SPEED-Bench category (:mod:`alflow.reports.matrix`).

``--json`` is ``--format json``; ``--output -`` writes to stdout. Errors (a directory that is not a run, an unreadable manifest) are
one line on stderr with exit code 2.

A run whose parquet tables are missing, truncated or garbage: the HTML and Markdown reports are still
rendered (the manifest and summary.json carry the run's headline numbers, and a reader wants what
survived) with one ``warning:`` line per damaged file naming it and what is wrong; the exports (CSV,
JSON), the matrix and the K schedule are read by programs, for which a silent gap is worse than none, so
they refuse with one ``error:`` line naming the file (exit 2). Nothing here ends in a traceback: an error no
check foresaw is one line naming the run directories (exit 2).
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, ParamSpec, TypeVar

import click
import typer
from typer.core import TyperGroup

from alflow.cli.common import fail, handle_errors, say_err, unencodable_output_line, warn, write_out_file
from alflow.errors import InvalidInputError
from alflow.methods.kchoice import Objective, describe, run_k_schedule
from alflow.reports.exports import al_matrix, al_matrix_csv, inferencex_rows, rows_csv, rows_json
from alflow.reports.markdown import escape_controls
from alflow.reports.matrix import METRICS, build_matrix, matrix_csv, matrix_json, matrix_table
from alflow.reports.render import render_comparison, render_run, write_html_report
from alflow.results.point_table import POINT_FLOWS
from alflow.results.store import StoredRun, StoreError, check_results_root, iter_runs, open_run
from alflow.results.view import m2_points
from alflow.util import jsonutil
from alflow.util.fsutil import STORE_URLS, foreign_url
from alflow.util.names import check_output_file, shown
from alflow.util.redact import redact_url, redact_urls_in_text

P = ParamSpec("P")
R = TypeVar("R")


class ReportFormat(StrEnum):
    """Output formats of ``alflow report``."""

    html = "html"
    md = "md"
    csv = "csv"
    json = "json"


class _DefaultShow(TyperGroup):
    """A group where ``alflow report RUN_DIR`` means ``alflow report show RUN_DIR``."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["show", *args]
        return super().parse_args(ctx, args)


report_app = typer.Typer(
    cls=_DefaultShow,
    help="Reports of stored runs (HTML with inline plots, Markdown) and exports (CSV, JSON).",
    no_args_is_help=True,
)


def register(app: typer.Typer) -> None:
    """Add the ``report`` group to the root command."""
    app.add_typer(report_app, name="report")


FormatOpt = Annotated[ReportFormat, typer.Option("--format", "-f", help="html, md, csv or json.")]
OutputOpt = Annotated[
    str | None,
    typer.Option(
        "--output",
        "-o",
        help="Write here ('-' for stdout). Default: RUN_DIR/report.html for html, else stdout.",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Same as --format json (the run's export rows).")]
DigitsOpt = Annotated[int, typer.Option("--digits", help="Decimals of the AL matrix CSV.", min=0, max=12)]


FLOWS = ("m0", "m1", "m2", "sweep")
"""The flows a results root holds runs of (``--flow``)."""


def _open(run_dir: str, *, strict: bool) -> StoredRun:
    """The run at ``run_dir``, its damaged tables checked: an error when ``strict``, else warnings."""
    if not run_dir.strip():  # "" would read the working folder
        raise InvalidInputError("RUN_DIR '' is empty: give a run directory (local path or s3:// / gs:// URL)")
    if foreign_url(run_dir):  # http://, ftp://: a server that never answers held the command for minutes
        raise InvalidInputError(
            f"RUN_DIR {shown(redact_url(run_dir))}: a URL of this scheme is not a run directory; allowed: a local "
            f"path or an {STORE_URLS} URL"
        )
    run = open_run(run_dir)
    if (
        run.manifest.flow in POINT_FLOWS
    ):  # its points are the report: never rendered without them, nor as "none"
        m2_points(run)
    problems = run.damaged_tables()
    if problems and strict:
        raise StoreError(f"{problems[0]} (this output needs every table of the run)")
    for problem in problems:
        warn(f"{problem}; the report is rendered without it")
    return run


def _points_read(run: StoredRun, skipped: list[str]) -> bool:
    """Whether the run's M2 points read (none to read: True); else its reason is added to ``skipped``."""
    if run.manifest.flow not in POINT_FLOWS:
        return True
    try:
        m2_points(run)
    except StoreError as exc:
        skipped.append(str(exc))
        return False
    return True


def _no_traceback(fn: Callable[P, R]) -> Callable[P, R]:
    """An error no check foresaw (a foreign file in a run directory) is one ``error:`` line, exit 2."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except (typer.Exit, click.exceptions.ClickException, click.exceptions.Abort):
            raise
        except Exception as exc:
            line = unencodable_output_line(exc) if isinstance(exc, UnicodeEncodeError) else None
            if line is not None:  # the terminal's encoding, not the run (round 17)
                raise fail(line, code=1) from None
            given = [str(v) for v in (*args, *kwargs.values()) if isinstance(v, str | list)]
            raise fail(
                f"could not read the run(s) {', '.join(given)[:300]}: {type(exc).__name__}: "
                f"{str(exc).strip().splitlines()[0] if str(exc).strip() else 'no detail'} "
                "(a damaged or foreign file in the run directory?)"
            ) from None

    return wrapper


def _export_text(runs: Sequence[StoredRun], fmt: ReportFormat, digits: int) -> str:
    """CSV or JSON of the runs' exports: InferenceX rows for M2, else the AL matrix."""
    flows = {r.manifest.flow for r in runs}
    if "m2" in flows:
        if flows - {"m2"}:
            raise InvalidInputError(
                f"cannot export M2 benchmark rows together with {', '.join(sorted(flows - {'m2'}))} runs in one file"
            )
        rows = [row for run in runs for row in inferencex_rows(run)]
        return rows_csv(rows) if fmt is ReportFormat.csv else rows_json(rows)
    if flows <= {"m0", "m1"}:
        frame = al_matrix(runs)
        if fmt is ReportFormat.csv:
            return al_matrix_csv(frame, digits)
        return jsonutil.dumps(frame.to_dicts()) + "\n"
    raise InvalidInputError(
        f"no export for flow(s) {', '.join(repr(f) for f in sorted(flows))}: exports cover m0, m1 and m2 runs"
    )


def _output(output: str | None, option: str = "--output") -> str | None:
    """``--output`` checked before any work (:func:`~alflow.util.names.check_output_file`); None or ``-``: stdout."""
    if output is None or output == "-":
        return output
    try:
        path = Path(os.path.realpath(check_output_file(output, what=option)))
    except ValueError as exc:
        raise InvalidInputError(str(exc)) from None
    if (path.parent / "manifest.json").is_file() and path.name not in ("report.html", "report.md"):
        raise InvalidInputError(  # it would replace what the run measured (its manifest, a table)
            f"{option} {output!r} is in a run folder ({path.parent.name}): a report may replace only its report.html "
            "or report.md there; give another path"
        )
    return output


def _write(text: str, output: str | None, option: str = "--output") -> None:
    # exports too: no password from a stored model id or URL, no raw control or bidi character (a CSV cell)
    text = escape_controls(redact_urls_in_text(text))
    output = _output(output, option)
    if output is None or output == "-":
        sys.stdout.write(text)
        return
    path = Path(output).expanduser()
    write_out_file(
        path, text.encode(), option
    )  # a full disk: one line naming the option, not "could not read"
    say_err(f"wrote {path}")


@report_app.command("show")
@_no_traceback
@handle_errors
def show(
    run_dir: Annotated[str, typer.Argument(help="A run directory (local path or s3:// / gs:// URL).")],
    fmt: FormatOpt = ReportFormat.html,
    output: OutputOpt = None,
    digits: DigitsOpt = 2,
    as_json: JsonOpt = False,
) -> None:
    """Render one run: HTML (default, written into the run directory), Markdown, CSV or JSON export."""
    fmt = ReportFormat.json if as_json else fmt
    _output(output)  # before any work
    run = _open(run_dir, strict=fmt not in (ReportFormat.html, ReportFormat.md))
    if fmt is ReportFormat.html and output is None:
        try:
            path = write_html_report(run)
        except OSError as exc:  # a folder named report.html: a write failure, not a read one
            target = shown(redact_url(f"{run_dir.rstrip('/')}/report.html"))
            raise StoreError(
                f"cannot write the report {target}: {exc.strerror or type(exc).__name__}"
            ) from None
        say_err(f"wrote {path}")
    elif fmt in (ReportFormat.html, ReportFormat.md):
        _write(render_run(run, "html" if fmt is ReportFormat.html else "md"), output)
    else:
        _write(_export_text([run], fmt, digits), output)


@report_app.command("compare")
@_no_traceback
@handle_errors
def compare(
    run_dirs: Annotated[list[str] | None, typer.Argument(help="Run directories to compare.")] = None,
    root: Annotated[
        str | None, typer.Option("--root", help="Also compare every complete run under this results root.")
    ] = None,
    flow: Annotated[
        str | None, typer.Option("--flow", help="With --root: only this flow (m0, m1, m2).")
    ] = None,
    fmt: FormatOpt = ReportFormat.html,
    output: OutputOpt = None,
    digits: DigitsOpt = 2,
    as_json: JsonOpt = False,
) -> None:
    """Several runs side by side (e.g. two frameworks or two images), or their exports in one file."""
    fmt = ReportFormat.json if as_json else fmt
    _output(output)  # before any work
    strict = fmt not in (ReportFormat.html, ReportFormat.md)
    if flow is not None and flow not in FLOWS:
        raise InvalidInputError(f"--flow {flow!r} is not one of: {', '.join(FLOWS)}")
    runs = [_open(d, strict=strict) for d in run_dirs or []]
    if root is not None:
        root = check_results_root(root, name="--root")  # as `alflow results serve` takes
        skipped: list[str] = []
        runs += [r for r in iter_runs(root, flow, skipped) if r.complete and _points_read(r, skipped)]
        if skipped:  # said, not dropped in silence
            warn(
                f"{len(skipped)} run folder(s) under {root} could not be read and are left out; the first: {skipped[0]}"
            )
    if not runs:
        raise InvalidInputError("nothing to compare: give run directories or a --root with complete runs")
    if fmt in (ReportFormat.html, ReportFormat.md):
        _write(render_comparison(runs, "html" if fmt is ReportFormat.html else "md"), output)
    else:
        _write(_export_text(runs, fmt, digits), output)


@report_app.command("matrix")
@_no_traceback
@handle_errors
def matrix(
    run_dirs: Annotated[
        list[str], typer.Argument(help="M0 / M1 run directories (one dataset or category each).")
    ],
    metric: Annotated[
        str, typer.Option("--metric", help="accept_length (default), accept_rate or throughput.")
    ] = "accept_length",
    fmt: Annotated[str, typer.Option("--format", "-f", help="table (default), csv or json.")] = "table",
    output: OutputOpt = None,
    digits: Annotated[int, typer.Option("--digits", help="Decimals of table and CSV.", min=0, max=12)] = 2,
    as_json: JsonOpt = False,
) -> None:
    """The matrix of aiperf speed-bench-report: a column per dataset or SPEED-Bench category, Overall = their mean."""
    fmt = "json" if as_json else fmt
    _output(output)  # before any work
    if fmt not in ("table", "csv", "json"):
        raise InvalidInputError(f"--format {fmt!r} is not one of: table, csv, json")
    if metric not in METRICS:
        raise InvalidInputError(f"--metric {metric!r} is not one of: {', '.join(METRICS)}")
    built = build_matrix([_open(d, strict=True) for d in run_dirs], metric)
    text = (
        matrix_table(built, digits)
        if fmt == "table"
        else matrix_csv(built, digits)
        if fmt == "csv"
        else matrix_json(built)
    )
    _write(text, output)


@report_app.command("k-schedule")
@_no_traceback
@handle_errors
def k_schedule(
    run_dir: Annotated[str, typer.Argument(help="A K sweep run directory (alflow run sweep).")],
    objective: Annotated[
        Objective, typer.Option("--objective", help="throughput (output tok/s/GPU) or interactivity.")
    ] = Objective.throughput,
    out: Annotated[
        str | None, typer.Option("--out", help="Write the JSON here ('-' or none: stdout).")
    ] = None,
    as_json: Annotated[
        bool,
        typer.Option("--json", help="The schedule with every decision and warning, not only the config."),
    ] = False,
) -> None:
    """The K schedule for vLLM (num_speculative_tokens_per_batch_size) from a sweep: K per concurrency ~ batch size.

    Per concurrency the K with the best median minus MAD penalty over the repeats, ties within 1 % to the
    smaller K (vLLM's tune_speculative_k). Writes a --speculative-config fragment; the decisions and any
    warning go to stderr.
    """
    out = _output(out, "--out")  # before the sweep is read (round 14)
    schedule = run_k_schedule(_open(run_dir, strict=True), objective)
    for line in describe(schedule):
        say_err(line)
    for line in schedule.warnings:
        say_err(f"warning: {line}")
    # without --json one line: pasteable into --speculative-config beside the method and drafter
    data = schedule.to_dict() if as_json else schedule.speculative_config()
    _write(jsonutil.dumps(data, indent=2 if as_json else None) + "\n", out, "--out")
