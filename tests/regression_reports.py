"""A ``regression.json`` the regression check could have written, for tests that need a stored verdict.

The reader re-judges each stored point from its numbers (hostile round 15): a verdict without them is refused.
"""

from __future__ import annotations

from typing import Any

from alflow.results.series import SeriesKey

PARAMETERS = {"history_runs": 5, "min_history": 3, "threshold": 0.03, "resamples": 2000, "confidence": 0.95,
              "seed": 0}  # fmt: skip
TPOT = {  # the per-request TPOT of a point (ms) judged so: +50 % is regressed, no change is unchanged
    "regressed": {"current": 15.0, "baseline": 10.0, "change": 0.5, "low": 0.4, "high": 0.6},
    "unchanged": {"current": 10.0, "baseline": 10.0, "change": 0.0, "low": -0.01, "high": 0.01},
    "improved": {"current": 5.0, "baseline": 10.0, "change": -0.5, "low": -0.6, "high": -0.4},
}


def m2_report(verdicts: list[tuple[SeriesKey, str]], k: int = 3) -> dict[str, Any]:
    """An M2 report with one point per (series, outcome), each outcome its TPOT's (:data:`TPOT`)."""
    points = [
        {
            "series": key.to_dict(),
            "concurrency": key.concurrency,
            "k": k,
            "outcome": outcome,
            "metrics": [{"metric": "tpot_ms", **TPOT[outcome], "outcome": outcome}],
            "message": "",
        }
        for key, outcome in verdicts
    ]
    return {"kind": "m2", "method": "bootstrap", "parameters": PARAMETERS, "points": points}
