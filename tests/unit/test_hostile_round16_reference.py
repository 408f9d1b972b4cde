"""Hostile round 16 (issue #49): a stored reference ``regression.json`` is judged again from its ALs.

The reader checked a reference report's metric name only: a hand-written report of kind "reference" whose verdicts
its numbers contradict ("unchanged" where the AL moved by 50 %, "moved" where it did not, a change that is not
current / baseline - 1, an interval that does not hold its AL, an AL of -1, 0, NaN or above K + 1) was shown as a
verdict. Now the judge and the reader share one rule (:func:`alflow.results.regression.reference_outcome`), and the
reports here are written by the real judge (:func:`tests.regression_reports.reference_report`).
"""

from __future__ import annotations

import copy
import json
import math
import random
import re
from pathlib import Path
from typing import Any

import pytest

from alflow.errors import AlflowError
from alflow.results.regression import parse_report
from tests.regression_reports import ALCI, reference_report

pytestmark = pytest.mark.unit

MOVED = (3, (2.5, (2.45, 2.55)), (2.7, None))  # K, the previous AL and interval, the new: +8 %, outside
STILL = (3, (2.5, (2.45, 2.55)), (2.52, (2.47, 2.57)))  # the intervals overlap


def _judged(change: tuple[int, ALCI, ALCI]) -> dict[str, Any]:
    return reference_report([change])


def _with(report: dict[str, Any], outcome: str | None = None, **fields: Any) -> dict[str, Any]:
    """``report`` with its first point's (and metric's) outcome, and its metric's ``fields``, changed."""
    bad = copy.deepcopy(report)
    point = bad["points"][0]
    if outcome is not None:
        point["outcome"] = point["metrics"][0]["outcome"] = outcome
    point["metrics"][0].update(fields)
    return bad


def _cases() -> dict[str, dict[str, Any]]:
    fifty = _judged((3, (2.0, (1.95, 2.05)), (3.0, (2.9, 3.1))))  # +50 %, moved: the intervals are apart
    moved, still = _judged(MOVED), _judged(STILL)
    k_two = _judged((2, (2.5, (2.45, 2.55)), (2.52, None)))
    first = _judged(
        (3, (2.5, None), (2.7, (2.6, 2.8)))
    )  # not enough history: the metric's own checks skip it
    return {
        "unchanged-at-50%": _with(fifty, "unchanged"),
        "moved-not-moving": _with(still, "moved"),
        "moved-inside-without-a-new-interval": _with(
            _judged((3, (2.5, (2.45, 2.55)), (2.52, None))), "moved"
        ),
        "change-not-the-ratio": _with(moved, change=-0.08),
        "new-interval-misses-its-al": _with(still, current_low=0.05, current_high=0.1),
        "previous-interval-misses-its-al": _with(moved, low=0.1, high=0.2),
        "negative-al": _with(first, current=-1.0, change=-1.4),
        "zero-al": _with(first, current=0.0, change=-1.0),
        "nan-al": _with(first, baseline=float("nan")),
        "al-above-k-plus-1": _with(k_two, current=3.5, change=0.4),
        "regressed": _with(_judged((3, (2.0, (1.95, 2.05)), (3.0, None))), "regressed", low=0.4, high=0.6),
        "point-and-metric-disagree": {
            **moved,
            "points": [{**moved["points"][0], "outcome": "unchanged"}],
        },
        "no-history-with-an-interval": _with(moved, "not enough history"),
        "two-metrics": {
            **moved,
            "points": [{**moved["points"][0], "metrics": moved["points"][0]["metrics"] * 2}],
        },
        "k-zero": {**moved, "points": [{**moved["points"][0], "k": 0}]},
    }


CASES = _cases()
WHY = {
    "unchanged-at-50%": r"al judged unchanged at \+50\.00% .* the check makes it moved",
    "moved-not-moving": "al judged moved .* the check makes it unchanged",
    "moved-inside-without-a-new-interval": "al judged moved .* the check makes it unchanged",
    "change-not-the-ratio": r"a change of -8\.0000% where current / baseline - 1 is \+8\.0000%",
    "new-interval-misses-its-al": "new interval .* does not hold its new AL",
    "previous-interval-misses-its-al": "previous interval .* does not hold its previous AL",
    "negative-al": r"current AL of -1\.0, not a possible AL at K=3 \(from 1 to 4\)",
    "zero-al": r"current AL of 0\.0, not a possible AL",
    "nan-al": "baseline AL of nan, not a possible AL",
    "al-above-k-plus-1": r"current AL of 3\.5, not a possible AL at K=2 \(from 1 to 3\)",
    "regressed": "judged regressed, which the check never makes a reference entry",
    "point-and-metric-disagree": "judged unchanged with its al judged moved",
    "no-history-with-an-interval": "al judged not enough history .* the check makes it moved",
    "two-metrics": r"on the metric\(s\) 'al', 'al', not on 'al' alone",
    "k-zero": "a reference entry of K=0, not from 1 to 16",
}


def test_r16_the_cases_are_written_by_the_judge_and_parse_before_they_are_changed() -> None:
    for change in (MOVED, STILL, (3, (2.0, (1.95, 2.05)), (3.0, None))):
        report = parse_report(_judged(change), "regression.json")
        assert report.kind == "reference"
    assert parse_report(_judged(MOVED), "r").points[0].outcome == "moved"
    assert parse_report(_judged(STILL), "r").points[0].outcome == "unchanged"


@pytest.mark.parametrize("case", list(CASES))
def test_r16_a_reference_verdict_its_als_do_not_make_is_refused(case: str) -> None:
    with pytest.raises(AlflowError, match=r"^regression.json: not a regression report: points\.0: ") as err:
        parse_report(CASES[case], "regression.json")
    assert len(str(err.value).splitlines()) == 1
    assert re.search(WHY[case], str(err.value)), str(err.value)


def test_r16_the_judge_and_the_reader_share_one_reference_rule() -> None:
    import alflow.methods.regression as judge
    import alflow.results.regression as reader

    assert judge.reference_outcome is reader.reference_outcome
    assert not hasattr(judge, "_moved")  # no second copy of the rule in the judge


# --------------------------------------------------------------------------------------------
# The property: what the judge writes parses; a single-field change the rule does not follow is refused

TOL = 1e-6


def _oracle(point: dict[str, Any]) -> bool:
    """Whether the check could have written ``point`` of a reference report, written out here independently."""
    k, metrics = point["k"], point["metrics"]
    if not isinstance(k, int) or not 1 <= k <= 16 or len(metrics) != 1 or metrics[0]["metric"] != "al":
        return False
    m = metrics[0]
    if m["outcome"] != point["outcome"]:
        return False
    cur, base, change = m["current"], m["baseline"], m["change"]
    low, high, new_low, new_high = m["low"], m["high"], m.get("current_low"), m.get("current_high")
    values = [cur, base, change]
    if None in values or (low is None) != (high is None) or (new_low is None) != (new_high is None):
        return False
    values += [v for v in (low, high, new_low, new_high) if v is not None]
    if not all(math.isfinite(v) for v in values) or not (1 <= cur <= k + 1 and 1 <= base <= k + 1):
        return False
    if not math.isclose(change, cur / base - 1, rel_tol=TOL, abs_tol=TOL):
        return False
    if low is not None and not low - TOL <= 0 <= high + TOL:
        return False
    if new_low is not None and not new_low - TOL * max(1, abs(change)) <= change <= new_high + TOL * max(
        1, abs(change)
    ):
        return False
    if (low is not None and low > high) or (new_low is not None and new_low > new_high):
        return False
    if low is None:
        want = "not enough history"
    elif new_low is not None:  # in the ALs: the new interval against the previous one
        want = "moved" if new_high < low or new_low > high else "unchanged"
    elif low <= change <= high:  # no new interval: the previous release's judge made "unchanged" of it too
        want = "unchanged"
    else:  # ... and either verdict outside, by a new interval it did not store
        return point["outcome"] in ("moved", "unchanged")
    return bool(point["outcome"] == want)


def _random_side(rng: random.Random, k: int, near: float | None = None) -> ALCI:
    top = k + 1.0
    al = rng.uniform(1.0, top) if near is None else min(top, max(1.0, near * rng.uniform(0.9, 1.1)))
    if rng.random() < 0.25:
        return al, None
    return al, (al - rng.uniform(0, 0.2), al + rng.uniform(0, 0.2))


def _random_report(rng: random.Random) -> dict[str, Any]:
    changes = []
    for _ in range(rng.randint(1, 3)):
        k = rng.randint(1, 16)
        old = _random_side(rng, k)
        changes.append((k, old, _random_side(rng, k, near=old[0] if rng.random() < 0.7 else None)))
    return reference_report(changes)


def _perturbations(rng: random.Random, report: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    p = rng.randrange(len(report["points"]))
    m = report["points"][p]["metrics"][0]
    k = report["points"][p]["k"]
    for outcome in ("moved", "unchanged", "not enough history", "regressed", "improved"):
        for both in (True, False):
            bad = copy.deepcopy(report)
            bad["points"][p]["outcome"] = outcome
            if both:
                bad["points"][p]["metrics"][0]["outcome"] = outcome
            out.append(bad)
    change = m["change"]
    for field, value in (
        ("current", m["current"] * rng.uniform(0.5, 1.5)), ("baseline", m["baseline"] * rng.uniform(0.5, 1.5)),
        ("change", -change - 0.01), ("change", change + rng.uniform(-0.5, 0.5)), ("current", -1.0),
        ("current", 0.0), ("baseline", float("nan")), ("current", k + 1.5), ("baseline", 0.5),
        ("low", change + rng.uniform(0.001, 0.3)), ("high", change - rng.uniform(0.001, 0.3)),
        ("low", rng.uniform(-0.1, 0.1)), ("high", rng.uniform(-0.1, 0.1)), ("low", None), ("high", None),
        ("current_low", change + rng.uniform(0.001, 0.3)), ("current_high", change - rng.uniform(0.001, 0.3)),
        ("current_low", None), ("current_high", None), ("current_low", -0.05), ("current_high", 0.05),
        ("metric", "tpot_ms"),
    ):  # fmt: skip
        bad = copy.deepcopy(report)
        bad["points"][p]["metrics"][0][field] = value
        out.append(bad)
    for point_k in (0, max(1, k - 1), 17):
        bad = copy.deepcopy(report)
        bad["points"][p]["k"] = point_k
        out.append(bad)
    return out


def _parses(report: dict[str, Any]) -> bool:
    try:
        parse_report(report, "regression.json")
    except AlflowError:
        return False
    return True


def test_r16_what_the_reference_judge_writes_parses_and_every_change_its_rule_does_not_make_is_refused() -> (
    None
):
    rng = random.Random(16)
    refused = 0
    outcomes: set[str] = set()
    for _ in range(300):
        report = _random_report(rng)
        assert all(_oracle(p) for p in report["points"]), report
        assert _parses(report), report
        outcomes |= {p["outcome"] for p in report["points"]}
        for bad in _perturbations(rng, report):
            want = all(_oracle(p) for p in bad["points"])
            assert _parses(bad) == want, (want, bad)
            refused += not want
    assert outcomes == {"moved", "unchanged", "not enough history"}
    assert refused > 6000  # most perturbations change what the rule makes


# --------------------------------------------------------------------------------------------
# Through the stored run: the catalogue's entry and the site show the problem, no verdict


def test_r16_a_contradictory_reference_report_shows_its_problem_and_no_verdict(tmp_path: Path) -> None:
    import asyncio

    from alflow.reports.content.regression import regression_sections
    from alflow.results.catalog import Catalog
    from alflow.results.manifest import SCHEMA_VERSION
    from alflow.results.store import open_run
    from tests.unit.test_catalog import write_run
    from tests.unit.test_site import serving
    from tests.unit.test_site_security import _list_file

    root = tmp_path / "root"
    summary = {"flow": "m0", "points": []}
    good_report, bad_report = (
        {"schema_version": SCHEMA_VERSION, **r} for r in (_judged(MOVED), CASES["unchanged-at-50%"])
    )
    good = write_run(root, "2026-01-01T00:00:00+00:00", flow="m0", summary=summary, regression=good_report)
    bad = write_run(root, "2026-01-02T00:00:00+00:00", flow="m0", summary=summary, regression=bad_report)
    entries = {e.rel: e for e in Catalog(str(root)).entries()}
    fine, broken = entries[f"m0/{good.name}"], entries[f"m0/{bad.name}"]
    assert (fine.verdict, fine.problem) == ("moved", None)
    assert broken.verdict is None
    assert "regression.json: not a regression report: points.0: al judged unchanged at +50.00%" in (
        broken.problem or ""
    )
    _list_file(bad, "regression.json", None)  # the run's report lists the files its manifest names
    (section,) = regression_sections(open_run(str(bad)))
    assert section.status == "warn"
    assert section.paragraphs[0].startswith("The regression verdicts cannot be read: regression.json: not a ")

    async def site() -> None:
        async with serving(root) as s:
            api = json.loads((await s.get(f"/api/runs/m0/{bad.name}")).body)
            assert api["verdict"] is None
            assert "al judged unchanged at +50.00%" in (api["problem"] or "")
            index = await s.get("/")
            assert "al judged unchanged at +50.00%" in index.text

    asyncio.run(site())
