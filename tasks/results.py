"""Result steps: store a run's tables and summary; publish its report as Prefect artifacts (``flows/steps.py``)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import polars as pl
from prefect import get_run_logger
from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_table_artifact
from prefect.context import FlowRunContext
from prefect.settings import PREFECT_API_URL
from prefect.variables import Variable

from alflow.errors import InvalidInputError
from alflow.reports import render_pages
from alflow.results.links import RESULTS_URL_ENV, RESULTS_URL_VARIABLE, check_results_url, report_link
from alflow.results.store import RunWriter, StoredRun
from alflow.results.summaries import StoredSummary, store_summary
from alflow.util.names import safe_key
from alflow.util.redact import redact_url


def store_results(writer: RunWriter, tables: Mapping[str, pl.DataFrame], summary: StoredSummary) -> str:
    """Write the run's parquet tables and summary.json (atomic, schema-versioned, checked against its model)."""
    for name, frame in tables.items():
        writer.write_table(name, frame)
    store_summary(writer, summary)
    get_run_logger().info("results stored in %s", redact_url(writer.dir))
    return writer.dir


def _publish(what: str, create: Callable[..., object], *args: Any, **kwargs: Any) -> None:
    """Create one Prefect artifact; a refusal (a bad key, an unreachable API) is a warning, never a failure.

    The run's files are already stored when its artifacts are published: an artifact is a view of them.
    """
    try:
        create(*args, **kwargs)
    except Exception as exc:
        get_run_logger().warning(
            "Prefect artifact %s (key %r) not published: %r", what, kwargs.get("key"), exc
        )


def render_report(writer: RunWriter, rows: Sequence[Mapping[str, Any]], key: str) -> str | None:
    """Save ``report.md`` and ``report.html`` in the run directory and publish them as artifacts.

    Both pages are built from what the run has stored (:func:`alflow.reports.render_pages`): ``report.md`` is the
    text ``alflow report RUN --format md`` prints and the markdown artifact, every user value escaped;
    ``report.html`` the self-contained page (inline SVG plots), a link artifact points at it. A failure to build
    them is logged and never fails the flow (the measurement is already stored); None then.
    """
    try:
        pages = render_pages(
            StoredRun(writer.dir, writer.manifest.model_copy(deep=True), writer.storage), live=True
        )
    except Exception as exc:  # a derived page must never fail a measured run; the error is logged
        get_run_logger().warning("report not written for %s: %r", writer.dir, exc, exc_info=True)
        return None
    path = writer.write_text("report.md", pages.markdown)
    html_path = writer.write_text("report.html", pages.html)
    base = safe_key(key)  # the key is derived: the model id in it stays data (report.md, the artifact text)
    _publish("report", create_markdown_artifact, pages.markdown, key=base, description=pages.title)
    if rows:
        _publish(
            "key numbers",
            create_table_artifact,
            [dict(r) for r in rows],
            key=base + "-table",
            description=f"{pages.title}: key numbers",
        )
    site, problem = results_site()
    link = report_link(html_path, writer.dir, site, problem)
    _publish(
        "report.html link",
        create_link_artifact,
        link.url,
        link_text="report on the results site" if link.on_site else "report.html",
        key=base + "-html",
        description=f"{pages.title}: HTML report" + (f"\n\n{link.note}" if link.note else ""),
    )
    return path


def results_site() -> tuple[str | None, str | None]:
    """The results site's URL (``$ALFLOW_RESULTS_URL``, else the Prefect Variable ``alflow-results-url``), or why none.

    Returns ``(url, None)``, ``(None, None)`` when neither is set, or ``(None, problem)`` when the value set is not
    a site URL: the run's link then falls back to the stored file and its artifact says why (the measurement is
    stored; a bad setting never fails it).
    """
    source, value = f"${RESULTS_URL_ENV}", os.environ.get(RESULTS_URL_ENV, "").strip()
    if not value and (FlowRunContext.get() is not None or PREFECT_API_URL.value()):
        source = f"Prefect Variable {RESULTS_URL_VARIABLE}"
        try:
            value = str(Variable.get(RESULTS_URL_VARIABLE) or "").strip()
        except Exception as exc:  # the API is unreachable: the stored file's link still works
            get_run_logger().warning("could not read the Prefect Variable %s: %r", RESULTS_URL_VARIABLE, exc)
            value = ""
    if not value:
        return None, None
    try:
        return check_results_url(value, source), None
    except InvalidInputError as exc:
        get_run_logger().warning("%s", exc)
        return None, str(exc)
