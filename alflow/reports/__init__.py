"""Reports of stored runs: self-contained HTML (inline SVG plots) and Markdown, plus peer exports.

Usage::

    from alflow.reports import render_run, render_comparison, write_html_report
    html = render_run("results/m2/20261130T054521Z-db50ebba0573")          # one page, no network
    md = render_run(run_dir, "md")                                        # report.md, the Prefect artifact text
    write_html_report(run_dir)                                            # <run_dir>/report.html
    html = render_comparison([run_a, run_b])                              # side by side

Exports to peers' layouts live in :mod:`alflow.reports.exports` (AL matrix CSV, InferenceX rows);
``alflow report`` (:mod:`alflow.cli.report`) is the command line.
"""

from __future__ import annotations

from alflow.reports.content import Report, build_comparison, build_report
from alflow.reports.exports import al_matrix, al_matrix_csv, inferencex_rows, rows_csv, rows_json
from alflow.reports.render import (
    RunPages,
    render,
    render_comparison,
    render_pages,
    render_run,
    write_html_report,
)

__all__ = [
    "Report",
    "RunPages",
    "al_matrix",
    "al_matrix_csv",
    "build_comparison",
    "build_report",
    "inferencex_rows",
    "render",
    "render_comparison",
    "render_pages",
    "render_run",
    "rows_csv",
    "rows_json",
    "write_html_report",
]
