"""The report link of a run: its page on the results site when a site URL is set, else the stored file and a note."""

from __future__ import annotations

from pathlib import Path

import pytest

from alflow.errors import InvalidInputError
from alflow.results.links import (
    NO_SITE_NOTE,
    RESULTS_URL_VARIABLE,
    check_results_url,
    file_url,
    report_link,
    run_page_url,
    run_rel,
)

pytestmark = pytest.mark.unit


def test_a_site_url_is_kept_without_its_trailing_slash() -> None:
    assert (
        check_results_url(" https://results.team.example/alflow/ ", "$X")
        == "https://results.team.example/alflow"
    )
    assert check_results_url("http://127.0.0.1:8765", "$X") == "http://127.0.0.1:8765"


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("results.example", "not a results site URL"),
        ("file:///srv/results", "not a results site URL"),
        ("javascript:alert(1)", "not a results site URL"),
        ("https://", "not a results site URL"),
        ("https://site.example/?token=abc", "no query or fragment"),
        ("https://site.example/#x", "no query or fragment"),
        ("https://user:hunter2@site.example/", "carries credentials"),
    ],
)
def test_a_value_that_is_not_a_plain_site_url_is_refused_naming_its_source(value: str, said: str) -> None:
    with pytest.raises(InvalidInputError) as err:
        check_results_url(value, f"Prefect Variable {RESULTS_URL_VARIABLE}")
    message = str(err.value)
    assert said in message
    assert RESULTS_URL_VARIABLE in message
    assert "hunter2" not in message
    assert "abc" not in message


def test_a_run_page_is_addressed_by_its_flow_and_directory_percent_encoded() -> None:
    run_dir = "/srv/results/m2/20261205T010203Z-abc123"
    assert run_rel(run_dir) == "m2/20261205T010203Z-abc123"
    assert (
        run_page_url("https://r.example/x", run_dir) == "https://r.example/x/runs/m2/20261205T010203Z-abc123/"
    )
    assert run_rel("s3://bucket/alflow/sweep/20261205T010203Z-ff/") == "sweep/20261205T010203Z-ff"
    odd = run_page_url("http://h", "/r/m2/a b)#?")
    assert odd == "http://h/runs/m2/a%20b%29%23%3F/"
    with pytest.raises(InvalidInputError):
        run_rel("m2")


def test_without_a_site_the_link_is_the_file_and_the_note_says_how_to_share_it(tmp_path: Path) -> None:
    html = tmp_path / "m2" / "run-1" / "report.html"
    link = report_link(str(html), str(html.parent), None)
    assert link.url == html.resolve().as_uri()
    assert not link.on_site
    assert link.note == NO_SITE_NOTE
    assert "alflow results serve" in NO_SITE_NOTE
    bad = report_link(str(html), str(html.parent), None, "the value is bad")
    assert bad.note is not None
    assert bad.note.startswith("The results site URL was not used: the value is bad")
    on_site = report_link(str(html), str(html.parent), "https://r.example")
    assert on_site == type(on_site)("https://r.example/runs/m2/run-1/", True, None)


def test_an_object_store_file_is_linked_without_credentials_and_nothing_can_end_a_markdown_link() -> None:
    url = file_url("s3://key:secret@bucket/alflow/m2/r (1)/report.html")
    assert "secret" not in url
    assert " " not in url
    assert ")" not in url
    assert url.startswith("s3://")
