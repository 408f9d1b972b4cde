"""Where a run's report opens: a page on the results site when the team has one, else the file itself.

``alflow results serve`` (:mod:`alflow.site`) serves a results root at ``<site>/runs/<flow>/<run dir>/``.
A team that runs it sets its URL once, as the environment variable :data:`RESULTS_URL_ENV` or the
Prefect Variable :data:`RESULTS_URL_VARIABLE` (the flows read both, the environment first), and every
run's "report.html" link artifact points at the run's page there, so a teammate's browser opens it from
the Prefect UI. Without one the link is the file on the worker's disk (``file://``) or in the object store
(``s3://``), which only that machine opens, and the artifact says how to get a shareable one.

The rules (which URL is allowed, how a run's page is addressed, what the note says) live here; reading
the setting from Prefect is the task's (``tasks/results.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final
from urllib.parse import quote, urlsplit

from alflow.errors import InvalidInputError
from alflow.util.redact import redact_url, url_credentials, url_syntax_problem

RESULTS_URL_ENV: Final = "ALFLOW_RESULTS_URL"
"""The environment variable that holds the results site's URL (``http(s)://host[:port][/prefix]``)."""
RESULTS_URL_VARIABLE: Final = "alflow-results-url"
"""The Prefect Variable that holds it when the environment does not."""
RUNS_PATH: Final = "runs"
"""The site's path prefix of a run's page: ``<site>/runs/<flow>/<run dir>/``."""

NO_SITE_NOTE: Final = (
    f"This link opens only on the machine that stored the run. For a link a teammate can open, serve the "
    f"results root with `alflow results serve` and set its URL as the Prefect Variable "
    f"`{RESULTS_URL_VARIABLE}` (or the environment variable `{RESULTS_URL_ENV}` of the worker)."
)


def check_results_url(value: str, source: str) -> str:
    """The site URL of ``value`` without a trailing slash; refused (naming ``source``) unless plain http(s).

    A URL with credentials is refused too: the link is shown to everyone who opens the Prefect UI (the site
    takes its token from the reader, never from the link).
    """
    text = value.strip()
    problem = url_syntax_problem(text)  # an unclosed IPv6 bracket raised in urlsplit (round 13)
    if problem:
        raise InvalidInputError(f"{source}={redact_url(text)!r}: {problem}")
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InvalidInputError(
            f"{source}={redact_url(text)!r} is not a results site URL: expected http(s)://HOST[:PORT][/PREFIX]"
        )
    if parts.query or parts.fragment:
        raise InvalidInputError(f"{source}={redact_url(text)!r}: a results site URL has no query or fragment")
    found = url_credentials(text)
    if found:
        raise InvalidInputError(
            f"{source}={redact_url(text)!r} carries credentials ({', '.join(found)}): a link in the Prefect UI "
            "is shown to everyone; the site asks each reader for its token"
        )
    return text.rstrip("/")


def run_rel(run_dir: str) -> str:
    """``<flow>/<run dir>``: where a run sits under its results root (the last two parts of its directory)."""
    parts = [p for p in run_dir.replace("\\", "/").rstrip("/").split("/") if p]
    if len(parts) < 2:
        raise InvalidInputError(f"run directory {redact_url(run_dir)!r} is not <root>/<flow>/<run>")
    return "/".join(parts[-2:])


def run_page_url(site: str, run_dir: str) -> str:
    """The run's page on the site at ``site`` (checked by :func:`check_results_url`), every part percent-encoded."""
    flow, name = run_rel(run_dir).split("/")
    return f"{site}/{RUNS_PATH}/{quote(flow, safe='')}/{quote(name, safe='')}/"


def file_url(path: str) -> str:
    """A stored file as a URL: ``file://`` for a local path, the redacted, percent-encoded URL of an object."""
    if "://" in path:
        # percent-encoded: no character of the results root can end the artifact's Markdown link
        return quote(redact_url(path), safe=":/")
    return Path(path).resolve().as_uri()


@dataclass(frozen=True)
class ReportLink:
    """The "report.html" link artifact of one run: where it points and what its description adds."""

    url: str
    on_site: bool
    note: str | None
    """Said in the artifact's description: how to get a shareable link, or why the setting was not used."""


def report_link(html_path: str, run_dir: str, site: str | None, problem: str | None = None) -> ReportLink:
    """The link to a run's report: its page on ``site`` when one is set, else the stored file with a note.

    ``problem`` is why a configured site was not used (a bad URL); the note then says so.
    """
    if site is not None:
        return ReportLink(run_page_url(site, run_dir), True, None)
    note = (
        NO_SITE_NOTE if problem is None else f"The results site URL was not used: {problem}. {NO_SITE_NOTE}"
    )
    return ReportLink(file_url(html_path), False, note)
