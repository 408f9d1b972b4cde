r"""Render reports: one self-contained HTML page per run (inline SVG plots) and a Markdown summary.

Templates are jinja2 files shipped in ``alflow/reports/templates``: the HTML page is rendered with
HTML autoescape, the Markdown summary by :mod:`alflow.reports.markdown` (Markdown-escaped values), so
user-supplied strings (model names, commands, error texts) stay text in both. Charts arrive as :class:`markupsafe.Markup` built by
:mod:`alflow.reports.svg`, which escapes its own text. The HTML has no script and no external
resource: it opens offline. Both pages leave :func:`~alflow.reports.markdown.escape_controls` last: no
control or format character but newline and tab is left in them (an escape sequence in a model name shows as
``\x1b``, in a value, a chart label or a table cell alike), so ``cat report.md`` cannot drive a terminal; every URL
in them is redacted (:func:`~alflow.util.redact.redact_urls_in_text`), as on the results site.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Literal

import jinja2

from alflow import __version__
from alflow.reports.content import SIMULATED_BANNER, Report, build_comparison, build_report
from alflow.reports.markdown import MARKDOWN_ENV, escape_controls
from alflow.results.store import StoredRun, open_run
from alflow.util.redact import redact_urls_in_text

Format = Literal["html", "md"]
HTML_REPORT: Final = "report.html"


def environment(
    package: str = "alflow.reports",
    *,
    keep_trailing_newline: bool = True,
    finalize: Callable[[object], object] | None = None,
) -> jinja2.Environment:
    """The jinja2 environment of HTML pages: ``package``'s templates, HTML autoescape, strict undefined.

    ``finalize``: what every ``{{ ... }}`` passes through before escaping (the site's redaction).
    """
    return jinja2.Environment(
        loader=jinja2.PackageLoader(package, "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=keep_trailing_newline,
        finalize=finalize,
    )


def _redacted(value: object) -> object:
    """A plain text value of a report, redacted before it is HTML-escaped.

    A ``"api_key": "..."`` pair in a stored error is no longer one once its quotes are ``&#34;``; the page is
    redacted whole again after (:func:`render`).
    """
    return redact_urls_in_text(value) if type(value) is str else value


_ENV: Final = environment(finalize=_redacted)


def render(report: Report, fmt: Format = "html") -> str:
    """A built report as HTML or Markdown text, with no control character but newline and tab (see the module doc)."""
    template = (
        _ENV.get_template("report.html.j2") if fmt == "html" else MARKDOWN_ENV.get_template("report.md.j2")
    )
    text = template.render(report=report, banner=SIMULATED_BANNER, generator=f"alflow {__version__}")
    return escape_controls(redact_urls_in_text(text))  # a password in a stored model id or URL never shows


def _as_run(run: StoredRun | str | os.PathLike[str]) -> StoredRun:
    return run if isinstance(run, StoredRun) else open_run(run)


def render_run(run: StoredRun | str | os.PathLike[str], fmt: Format = "html", *, live: bool = False) -> str:
    """Render one stored run; ``live`` when the run writes its own report before it is closed."""
    return render(build_report(_as_run(run), live=live), fmt)


@dataclass(frozen=True)
class RunPages:
    """One run's report as its pages: its title, ``report.md`` and ``report.html``.

    Both come from one build of its content (:func:`~alflow.reports.content.build_report`); the Markdown is also
    the flows' Prefect markdown artifact.
    """

    title: str
    markdown: str
    html: str


def render_pages(run: StoredRun | str | os.PathLike[str], *, live: bool = False) -> RunPages:
    """Both pages of one stored run; ``live`` when the run writes its own report before it is closed."""
    report = build_report(_as_run(run), live=live)
    return RunPages(report.title, render(report, "md"), render(report, "html"))


def render_comparison(runs: Sequence[StoredRun | str | os.PathLike[str]], fmt: Format = "html") -> str:
    """Render several runs side by side."""
    return render(build_comparison([_as_run(r) for r in runs]), fmt)


def write_html_report(run: StoredRun | str | os.PathLike[str], *, live: bool = False) -> str:
    """Write ``report.html`` into the run directory (atomic on local disks) and return its path."""
    stored = _as_run(run)
    path = stored.storage.join(stored.dir, HTML_REPORT)
    stored.storage.write_bytes(path, render_run(stored, "html", live=live).encode())
    return path
