"""The site's faster paths (#49, its page latency) answer what the plain ones did; round 12's minor findings.

The index's text filter reads each run's text from a cache keyed by the catalogue's entries (a refresh makes new
ones); the JSON answers are built without ``dataclasses.asdict``'s deep copies; a trend chart is built from texts
already redacted and control-escaped, and the page prints it as it is; a bounded read reads in parts.
"""

from __future__ import annotations

import io
import json
from dataclasses import asdict
from pathlib import Path

import pytest

from alflow.errors import InvalidInputError
from alflow.results.catalog import Catalog
from alflow.site.pages import ChoiceCache, IndexQuery, TrendQuery, index_page, trends_page
from alflow.util.fsutil import read_at_most
from alflow.util.redact import redact_urls_in_text
from tests.unit.test_site import M2, make_root, serving
from tests.unit.test_site_security import SECRET, _edit_manifest

pytestmark = pytest.mark.unit


def _matching(catalog: Catalog, cache: ChoiceCache, text: str) -> list[str]:
    page = index_page(catalog, IndexQuery.parse({"text": text}), cache)
    return [r.rel for r in page.rows]


def test_the_text_filter_sees_a_refreshed_run_and_not_its_old_text(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    catalog = Catalog(str(root), cache_dir=None)
    cache = ChoiceCache()
    assert M2 in _matching(catalog, cache, "M2")  # the rel, case-insensitive
    _edit_manifest(root / M2, {"config.model.id": "a-model-named-later"})
    catalog.refresh(force=True)
    assert _matching(catalog, cache, "named-later") == [M2]
    assert _matching(catalog, cache, "NAMED-LATER") == [M2]
    assert _matching(catalog, cache, "nothing-holds-this") == []


def test_the_json_answers_hold_what_asdict_holds(tmp_path: Path) -> None:
    catalog = Catalog(str(make_root(tmp_path)), cache_dir=None)
    index = index_page(catalog, IndexQuery.parse({}), ChoiceCache())
    trends = trends_page(catalog, TrendQuery.parse({}))
    assert trends.series, "the fixture root has a trend line"
    for page in (index, trends):
        assert json.loads(json.dumps(page.to_dict())) == json.loads(json.dumps(asdict(page)))


async def test_a_trend_charts_run_texts_are_redacted_and_control_escaped(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    _edit_manifest(
        root / M2, {"provenance.server.provenance.image": f"reg/img:t\x1b[31m\u202e?token={SECRET}"}
    )
    async with serving(root) as site:
        page = await site.get("/trends")
    assert page.status == 200
    assert SECRET not in page.text
    assert "token=***" in page.text  # the tag is shown, redacted, in the chart's labels and tooltips
    assert "\x1b" not in page.text
    assert "\u202e" not in page.text
    assert "\\x1b[31m\\u202e?token=***" in page.text  # the control characters as visible text


@pytest.mark.parametrize(("size", "limit"), [(0, 10), (10, 10), (11, 10), (700_000, 600_000), (5, 0)])
def test_a_bounded_read_reads_at_most_one_byte_over_its_limit(size: int, limit: int) -> None:
    data = bytes(range(256)) * (size // 256 + 1)
    got = read_at_most(io.BytesIO(data[:size]), limit)
    assert got == data[: min(size, limit + 1)]


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (
            "http://127.0.0.1:9/metrics?privateKey=X: Cannot connect",
            "http://127.0.0.1:9/metrics?privateKey=***: Cannot",
        ),
        ("see (http://u:pw@h/x).", "see (http://***@h/x)."),
        ("GET /x?token=abc, then", "GET /x?token=***, then"),
        ("password=abc. Then", "password=***. Then"),
    ],
)
def test_the_punctuation_after_a_redacted_value_is_kept(text: str, shown: str) -> None:
    """R12-10: the ``:`` of ``URL: reason`` was taken into the redacted value (``...?privateKey=*** Cannot``)."""
    assert redact_urls_in_text(text).startswith(shown)


@pytest.mark.parametrize("value", ["a\x7f", "a\x9b[2J", "a\u202eb", "a\tb", "a\u200bb"])
def test_a_filter_with_a_control_or_format_character_is_refused(value: str) -> None:
    """R12-10: the refusal said "without control characters" but let DEL, C1 (CSI) and RLO through."""
    with pytest.raises(InvalidInputError, match="without control characters"):
        IndexQuery.parse({"model": value})
