"""Hostile round 17 of issue #49, minors: a webhook body of an infinite number, a leap second's start.

``python -m alflow_deployments.webhook --json-data '{"text": 1e999}'`` was taken (Python reads it as infinity) and
went on to the Prefect API, where ``bench --extra-body`` refuses the same number; a run whose manifest starts at
``23:59:60`` (no time Python reads) was unreadable as "impossible (before 2024 or in the future)".
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from alflow.errors import InvalidInputError
from alflow_deployments.webhook import json_data_of

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('{"text": 1e999}', "the number 1e999 is infinity as a float"),
        ('{"text": -1e400}', "the number -1e400 is infinity as a float"),
        ('{"text": NaN}', "NaN is not a JSON number"),
        ('{"a": [Infinity]}', "Infinity is not a JSON number"),
    ],
)
def test_a_webhook_body_of_a_number_that_is_no_float_is_refused(text: str, said: str) -> None:
    with pytest.raises(InvalidInputError, match=rf"^--json-data is not valid JSON: {said}"):
        json_data_of(text)


def test_a_webhook_body_of_finite_numbers_is_kept() -> None:
    assert json_data_of('{"text": "{{subject}}", "n": 1.5e300, "m": -0.0}') == {
        "text": "{{subject}}",
        "n": 1.5e300,
        "m": -0.0,
    }


@pytest.mark.parametrize(
    ("started", "said"),
    [
        ("2026-12-07T23:59:60+00:00", "is no ISO 8601 date and time"),
        ("2026-13-07T10:00:00+00:00", "is no ISO 8601 date and time"),
        ("1999-01-01T00:00:00+00:00", "is impossible"),
    ],
)
def test_a_start_that_is_no_time_is_named_so(started: str, said: str, tmp_path: Path) -> None:
    from alflow.results.catalog import Catalog
    from tests.unit.test_site import M2, make_root

    root = make_root(tmp_path)
    manifest = root / M2 / "manifest.json"
    data = json.loads(manifest.read_text())
    data["started"] = started
    manifest.write_text(json.dumps(data))
    (entry,) = [e for e in Catalog(str(root)).entries() if e.rel == M2]
    assert entry.problem is not None
    assert said in entry.problem, entry.problem
