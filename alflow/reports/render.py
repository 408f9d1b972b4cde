"""Render reports: one self-contained HTML page per run (inline SVG plots) and a Markdown summary.

Templates are jinja2 files shipped in ``alflow/reports/templates`` and rendered with autoescape on
for every template (HTML and Markdown alike), so user-supplied strings (model names, commands,
error texts) stay text. Charts arrive as :class:`markupsafe.Markup` built by
:mod:`alflow.reports.svg`, which escapes its own text. The HTML has no script and no external
resource: it opens offline.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Final, Literal

import jinja2
from markupsafe import Markup

from alflow import __version__
from alflow.reports.content import SIMULATED_BANNER, Report, build_comparison, build_report
from alflow.results.store import StoredRun, open_run

Format = Literal["html", "md"]
HTML_REPORT: Final = "report.html"
MARKDOWN_REPORT: Final = "report.md"


def _escape_md(text: str) -> Markup:
    """Escape what Markdown renderers would read as HTML (``&``, ``<``, ``>``), keep quotes readable."""
    return Markup(text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;"))  # noqa: S704


def _md(text: object) -> Markup:
    """Markdown paragraph text, HTML-escaped (``<script>`` stays text), trailing spaces dropped."""
    return _escape_md(str(text).strip())


def _cell(text: object) -> Markup:
    """A Markdown table cell: one line, pipes escaped, HTML-escaped."""
    return _escape_md(" ".join(str(text).split()).replace("|", "\\|") or " ")


def environment() -> jinja2.Environment:
    """The jinja2 environment: package templates, autoescape on for every file, strict undefined."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("alflow.reports", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["md"] = _md
    env.filters["cell"] = _cell
    return env


_ENV: Final = environment()


def render(report: Report, fmt: Format = "html") -> str:
    """A built report as HTML or Markdown text."""
    name = "report.html.j2" if fmt == "html" else "report.md.j2"
    return _ENV.get_template(name).render(
        report=report, banner=SIMULATED_BANNER, generator=f"alflow {__version__}"
    )


def _as_run(run: StoredRun | str | os.PathLike[str]) -> StoredRun:
    return run if isinstance(run, StoredRun) else open_run(run)


def render_run(run: StoredRun | str | os.PathLike[str], fmt: Format = "html", *, live: bool = False) -> str:
    """Render one stored run; ``live`` when the run writes its own report before it is closed."""
    return render(build_report(_as_run(run), live=live), fmt)


def render_comparison(runs: Sequence[StoredRun | str | os.PathLike[str]], fmt: Format = "html") -> str:
    """Render several runs side by side."""
    return render(build_comparison([_as_run(r) for r in runs]), fmt)


def write_html_report(run: StoredRun | str | os.PathLike[str], *, live: bool = False) -> str:
    """Write ``report.html`` into the run directory (atomic on local disks) and return its path."""
    stored = _as_run(run)
    path = stored.storage.join(stored.dir, HTML_REPORT)
    stored.storage.write_bytes(path, render_run(stored, "html", live=live).encode())
    return path
