"""A reference ``regression.json`` written by the previous release (11bbe4f) is read (review of #49, round 17).

That judge called an entry "unchanged" when the previous and new confidence intervals overlapped, but stored the
previous interval only (``low``/``high``, no ``current_low``/``current_high``). The reader re-ran the rule without the
new interval and refused an old "unchanged" whose new AL had left the previous interval. The report below is the one
11bbe4f's ``judge_reference`` wrote (``_moved``), by hand: previous AL 2.5 [2.45, 2.55], new 2.58 [2.53, 2.63].
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from alflow.errors import AlflowError
from alflow.results.regression import parse_report

pytestmark = pytest.mark.unit


def _old_point(
    label: str, old: tuple[float, float, float], new: tuple[float, float, float]
) -> dict[str, Any]:
    """The point 11bbe4f's judge wrote of an entry whose AL and interval went from ``old`` to ``new``."""
    (o_al, o_low, o_high), (n_al, n_low, n_high) = old, new
    apart = n_high < o_low or n_low > o_high
    outcome = "moved" if apart else "unchanged"
    text = f"[{n_low:.4f}, {n_high:.4f}] against [{o_low:.4f}, {o_high:.4f}]"
    why = f"the intervals do not overlap: {text}" if apart else f"overlap: {text}"
    metric = {
        "metric": "al", "current": n_al, "baseline": o_al, "change": n_al / o_al - 1.0,
        "low": o_low / o_al - 1.0, "high": o_high / o_al - 1.0, "outcome": outcome,
    }  # fmt: skip
    return {
        "series": {"framework": "vllm", "image": "", "model": label, "k": 3, "concurrency": 1, "thinking": "off"},
        "concurrency": 1, "k": 3, "outcome": outcome, "metrics": [metric],
        "message": f"{label}: AL {o_al:.4f} -> {n_al:.4f}; {why}", "reference": label,
    }  # fmt: skip


def _old_report(*points: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "reference", "version": 1, "method": "(11bbe4f's text)", "points": list(points)}


OVERLAP_OUTSIDE = _old_point(
    "m-overlap", (2.5, 2.45, 2.55), (2.58, 2.53, 2.63)
)  # +3.2 %, outside, overlapping
APART = _old_point("m-apart", (2.5, 2.45, 2.55), (2.7, 2.65, 2.75))
INSIDE = _old_point("m-inside", (2.5, 2.45, 2.55), (2.52, 2.47, 2.57))


def test_an_old_unchanged_whose_new_al_left_the_previous_interval_is_read() -> None:
    assert OVERLAP_OUTSIDE["outcome"] == "unchanged"
    report = parse_report(_old_report(OVERLAP_OUTSIDE, APART, INSIDE), "regression.json")
    assert [p.outcome for p in report.points] == ["unchanged", "moved", "unchanged"]
    assert report.points[0].metrics[0].current_low is None


def _relabelled(point: dict[str, Any], outcome: str) -> dict[str, Any]:
    bad = copy.deepcopy(point)
    bad["outcome"] = bad["metrics"][0]["outcome"] = outcome
    return bad


@pytest.mark.parametrize(
    ("point", "outcome", "why"),
    [
        (INSIDE, "moved", "al judged moved .* the check makes it unchanged"),  # no version made it
        (OVERLAP_OUTSIDE, "not enough history", "al judged not enough history .* the check makes it moved"),
    ],
)
def test_what_no_version_of_the_rule_makes_of_an_old_report_is_refused(
    point: dict[str, Any], outcome: str, why: str
) -> None:
    with pytest.raises(AlflowError, match=r"^regression.json: not a regression report: points\.0: " + why):
        parse_report(_old_report(_relabelled(point, outcome)), "regression.json")


def test_a_new_report_with_both_intervals_is_still_judged_strictly() -> None:
    point = copy.deepcopy(OVERLAP_OUTSIDE)
    point["metrics"][0].update(current_low=2.53 / 2.5 - 1.0, current_high=2.63 / 2.5 - 1.0)
    parse_report(_old_report(point), "r")
    with pytest.raises(AlflowError, match=r"al judged moved .* the check makes it unchanged"):
        parse_report(_old_report(_relabelled(point, "moved")), "r")
