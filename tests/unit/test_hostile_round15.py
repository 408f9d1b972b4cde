"""Hostile round 15 (issue #49): each failure of the round with a test that fails without its fix.

R15-3: a stored ``regression.json`` whose verdicts the check's own rule does not make of their numbers (the direction
of each metric, ``change = current / baseline - 1``, the interval holding its change, a judged metric with numbers,
the metrics the judge writes, possible medians, the default threshold when no parameters are stored) is refused.
"""

from __future__ import annotations

import copy
import json
import math
import random
import re
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from alflow.errors import AlflowError
from alflow.results.regression import parse_report
from tests.regression_reports import PARAMETERS
from tests.unit.test_site import M2, make_root
from tests.unit.test_site_security import _list_file

pytestmark = pytest.mark.unit

PARAMS = PARAMETERS  # the check's parameters as a stored report holds them


def _tpot(outcome: str, current: float | None, baseline: float | None, change: float | None,
          low: float | None, high: float | None, name: str = "tpot_ms") -> dict[str, Any]:  # fmt: skip
    return {"metric": name, "current": current, "baseline": baseline, "change": change, "low": low, "high": high,
            "outcome": outcome}  # fmt: skip


def _report(outcome: str, metrics: list[dict[str, Any]], params: bool = True) -> dict[str, Any]:
    point = {"series": {}, "concurrency": 4, "k": 3, "outcome": outcome, "metrics": metrics, "message": ""}
    return {"kind": "m2", "method": "bootstrap", "parameters": PARAMS if params else None, "points": [point]}


CASES = {  # the report's six, by letter
    "a-direction": _report("improved", [_tpot("improved", 15.0, 10.0, 0.5, 0.4, 0.6)]),
    "b-change-not-the-ratio": _report("improved", [_tpot("improved", 20.0, 10.0, -0.5, -0.6, -0.4)]),
    "c-no-parameters": _report("unchanged", [_tpot("unchanged", 19.0, 10.0, 0.9, 0.8, 1.0)], params=False),
    "d-no-numbers": _report("improved", [_tpot("improved", None, None, None, None, None)]),
    "e-absurd-median": _report(
        "improved", [_tpot("improved", 1e-300, 10.0, -0.9999999, -0.99999999, -0.999999)]
    ),
    "f-unknown-name": _report(
        "improved", [_tpot("improved", 5.0, 10.0, -0.5, 0.1, 0.2, name="<b>bogus</b>")]
    ),
}
WHY = {
    "a-direction": "higher is worse.*the check makes it regressed",
    "b-change-not-the-ratio": r"current / baseline - 1 is \+100",
    "c-no-parameters": "threshold 3%.*the check makes it regressed",
    "d-no-numbers": "without its numbers",
    "e-absurd-median": "1e-300, not a possible value",
    "f-unknown-name": "a metric named '<b>bogus</b>', not one of",
}


@pytest.mark.parametrize("case", list(CASES))
def test_r15_3_a_stored_verdict_its_numbers_do_not_make_is_refused(case: str) -> None:
    with pytest.raises(AlflowError, match=r"^regression.json: not a regression report: points\.0: ") as err:
        parse_report(CASES[case], "regression.json")
    assert len(str(err.value).splitlines()) == 1
    assert re.search(WHY[case], str(err.value)), str(err.value)


@pytest.mark.parametrize("case", list(CASES))
def test_r15_3_the_report_warns_and_the_site_names_the_problem(case: str, tmp_path: Path) -> None:
    """Through the stored run: the report's "cannot be read" warning, the catalogue entry's problem."""
    from alflow.reports.content.regression import regression_sections
    from alflow.results.catalog import read_entry
    from alflow.results.manifest import SCHEMA_VERSION
    from alflow.results.store import open_run

    run_dir = make_root(tmp_path) / M2
    stored = {"schema_version": SCHEMA_VERSION, **CASES[case]}
    _list_file(run_dir, "regression.json", json.dumps(stored).encode())
    (section,) = regression_sections(open_run(str(run_dir)))
    assert section.status == "warn"
    assert section.paragraphs[0].startswith("The regression verdicts cannot be read: regression.json: not a ")
    assert "points.0: " in section.paragraphs[0]
    assert "not a regression report: points.0" in (read_entry(M2, str(run_dir)).problem or "")


def test_r15_3_the_judge_and_the_reader_share_one_rule() -> None:
    import alflow.methods.regression as judge
    import alflow.results.regression as reader

    assert judge.metric_outcome is reader.metric_outcome
    assert judge.combine is reader.combine
    assert judge.METRICS is reader.METRICS
    assert not hasattr(reader.MetricChange, "against")  # no second copy of the threshold rule


# --------------------------------------------------------------------------------------------
# The property: consistent reports parse; a single-field change the rule does not follow is refused


WORSE = {"tpot_ms": "higher", "tokens_per_s_per_request": "lower"}
BOUNDS = {"tpot_ms": (0.001, 3_600_000.0), "tokens_per_s_per_request": (0.001, 10_000_000.0)}


def _oracle_metric(m: dict[str, Any], threshold: float) -> str | None:
    """The verdict the check makes of a stored metric, written out here independently; None: it makes none."""
    if m["metric"] not in WORSE:
        return None
    numbers = [m[f] for f in ("current", "baseline", "change", "low", "high")]
    if any(v is None or not math.isfinite(v) for v in numbers):
        return None
    current, baseline, change, low, high = numbers
    least, most = BOUNDS[m["metric"]]
    if not (least <= current <= most and least <= baseline <= most and low <= change <= high):
        return None
    if not math.isclose(change, current / baseline - 1, rel_tol=1e-6, abs_tol=1e-6):
        return None
    if abs(change) < threshold or low <= 0 <= high:
        return "unchanged"
    up = low > 0
    return "regressed" if up == (WORSE[m["metric"]] == "higher") else "improved"


def _consistent(report: dict[str, Any]) -> bool:
    threshold = (report["parameters"] or {}).get("threshold", 0.03)
    for point in report["points"]:
        made = [_oracle_metric(m, threshold) for m in point["metrics"]]
        if (
            not made
            or None in made
            or any(m["outcome"] != v for m, v in zip(point["metrics"], made, strict=True))
        ):
            return False
        want = "regressed" if "regressed" in made else "improved" if "improved" in made else "unchanged"
        if point["outcome"] != want:
            return False
    return True


def _random_metric(rng: random.Random, name: str, threshold: float) -> dict[str, Any]:
    least, most = BOUNDS[name]
    baseline = math.exp(rng.uniform(math.log(least * 10), math.log(most / 10)))
    change = rng.choice([rng.uniform(-0.5, 0.5), rng.uniform(-threshold, threshold), rng.uniform(0.0, 3.0)])
    current = baseline * (1.0 + change)
    change = current / baseline - 1.0
    low, high = change - rng.uniform(0, 0.2), change + rng.uniform(0, 0.2)
    m = {"metric": name, "current": current, "baseline": baseline, "change": change, "low": low, "high": high,
         "p_value": rng.random(), "outcome": "unchanged"}  # fmt: skip
    m["outcome"] = _oracle_metric(m, threshold)
    return m


def _random_report(rng: random.Random) -> dict[str, Any]:
    threshold = rng.choice([0.01, 0.03, 0.05, 0.2])
    params = {**PARAMS, "threshold": threshold} if threshold != 0.03 or rng.random() < 0.5 else None
    points = []
    for _ in range(rng.randint(1, 3)):
        names = rng.sample(list(WORSE), rng.randint(1, 2))
        metrics = [_random_metric(rng, n, threshold) for n in names]
        made = [m["outcome"] for m in metrics]
        outcome = "regressed" if "regressed" in made else "improved" if "improved" in made else "unchanged"
        points.append({"series": {}, "concurrency": 4, "k": 3, "outcome": outcome, "metrics": metrics})
    return {
        "kind": rng.choice(["m2", "sweep"]),
        "method": "bootstrap",
        "parameters": params,
        "points": points,
    }


def _perturbations(rng: random.Random, report: dict[str, Any]) -> list[dict[str, Any]]:
    """Copies of ``report`` with one field changed: an outcome, a name, a number, the threshold, the parameters."""
    out = []
    p = rng.randrange(len(report["points"]))
    point = report["points"][p]
    i = rng.randrange(len(point["metrics"]))
    m = point["metrics"][i]
    for outcome in ("regressed", "improved", "unchanged"):
        for target in ("point", "metric"):
            bad = copy.deepcopy(report)
            (bad["points"][p] if target == "point" else bad["points"][p]["metrics"][i])["outcome"] = outcome
            out.append(bad)
    other = "tokens_per_s_per_request" if m["metric"] == "tpot_ms" else "tpot_ms"
    for field, value in (
        ("metric", other), ("metric", "ttft_ms"), ("current", m["current"] * rng.uniform(0.2, 3.0)),
        ("baseline", m["baseline"] * rng.uniform(0.2, 3.0)), ("change", -m["change"]),
        ("change", m["change"] + rng.uniform(-0.5, 0.5)), ("low", m["change"] + rng.uniform(0.001, 0.3)),
        ("high", m["change"] - rng.uniform(0.001, 0.3)), ("low", rng.uniform(-0.1, 0.1)),
        ("high", rng.uniform(-0.1, 0.1)), ("current", 1e-300), ("baseline", 1e300), ("current", None),
        ("low", None),
    ):  # fmt: skip
        bad = copy.deepcopy(report)
        bad["points"][p]["metrics"][i][field] = value
        out.append(bad)
    for threshold in (0.001, 0.5, 1.0):
        bad = copy.deepcopy(report)
        bad["parameters"] = {**PARAMS, "threshold": threshold}
        out.append(bad)
    bad = copy.deepcopy(report)
    bad["parameters"] = None
    out.append(bad)
    return out


def _parses(report: dict[str, Any]) -> bool:
    try:
        parse_report(report, "regression.json")
    except AlflowError:
        return False
    return True


def test_r15_3_consistent_reports_parse_and_every_change_the_rule_does_not_make_is_refused() -> None:
    rng = random.Random(15_3)
    refused = 0
    for _ in range(300):
        report = _random_report(rng)
        assert _consistent(report)
        assert _parses(report), report
        for bad in _perturbations(rng, report):
            want = _consistent(bad)
            assert _parses(bad) == want, (want, bad)
            refused += not want
    assert refused > 3000  # most perturbations change what the rule makes


def test_r15_3_what_the_judge_writes_is_read_back() -> None:
    """The judge's own verdicts of seeded histories (slower, faster, the same, lopsided) all parse."""
    from alflow.config import RegressionSettings
    from alflow.methods.regression import HistoryRun, judge_point, parameters_of
    from alflow.results.regression import RegressionReport
    from alflow.results.rows import M2Point
    from alflow.results.series import SeriesKey

    key = SeriesKey("sim", "alflow-sim", "test-llama", 3, 4, "off", target_al="2.5000")
    point = M2Point.model_validate(
        {"concurrency": 4, "k": 3, "target_al": 2.5, "achieved_al": 2.5, "valid": True}
    )
    rng = random.Random(7)

    def frame(n: int, scale: float) -> pl.DataFrame:
        tpot = [scale * rng.lognormvariate(3.0, rng.choice([0.05, 0.3, 1.0])) for _ in range(n)]
        return pl.DataFrame({"tpot_ms": tpot, "tokens_per_s_per_request": [1000.0 / t for t in tpot],
                             "output_tokens": [100.0] * n})  # fmt: skip

    judged = []
    for trial in range(12):
        settings = RegressionSettings(resamples=200, seed=trial, threshold=rng.choice([0.01, 0.03, 0.1]))
        history = [
            HistoryRun(f"m2/h{i}", (point,), frame(rng.randint(5, 60), rng.uniform(0.8, 1.2)))
            for i in range(3)
        ]
        verdict = judge_point(
            key, point, frame(rng.randint(5, 60), rng.choice([0.5, 1.0, 1.5])), history, settings
        )
        report = RegressionReport(kind="m2", method="m", parameters=parameters_of(settings), points=[verdict])
        parse_report(json.loads(report.model_dump_json()), "regression.json")
        judged.append(verdict.outcome)
    assert {"regressed", "improved"} <= set(judged)


def test_r15_3_an_interval_that_misses_its_change_is_widened_to_hold_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A percentile interval can miss its own estimate (lopsided resamples): the judge stores one that holds it."""
    import alflow.methods.regression as judge
    from alflow.config import RegressionSettings
    from alflow.results.regression import MetricChange

    calls = iter([30.0, 10.0])  # the resampled medians: this point's, then the history's, every draw alike

    def lopsided(runs: Any, names: Any, resamples: int, rng: Any) -> pl.DataFrame:
        value = next(calls)
        return pl.DataFrame({"b": list(range(resamples)), **{n: [value] * resamples for n in names}})

    monkeypatch.setattr(judge, "_boot_medians", lopsided)
    same = pl.DataFrame({"tpot_ms": [20.0] * 10, "tokens_per_s_per_request": [50.0] * 10})
    changes = judge.compare_metrics(same, [same, same, same], RegressionSettings(resamples=200))
    assert changes
    for m in changes:
        assert isinstance(m, MetricChange)
        assert m.low is not None
        assert m.high is not None
        assert m.low <= (m.change or 0.0) <= m.high, m
        point = {"series": {}, "concurrency": 4, "k": 3, "outcome": m.outcome, "metrics": [m.model_dump()]}
        parse_report(
            {"kind": "m2", "method": "m", "parameters": PARAMS, "points": [point]}, "regression.json"
        )
