"""A ``regression.json`` the regression check could have written, for tests that need a stored verdict.

The reader re-judges each stored point from its numbers (hostile round 15): a verdict without them is refused.
"""

from __future__ import annotations

import json
from typing import Any

from alflow.results.series import SeriesKey
from alflow.util.rows import dump_row

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
            "series": dump_row(key),
            "concurrency": key.concurrency,
            "k": k,
            "outcome": outcome,
            "metrics": [{"metric": "tpot_ms", **TPOT[outcome], "outcome": outcome}],
            "message": "",
        }
        for key, outcome in verdicts
    ]
    return {"kind": "m2", "method": "bootstrap", "parameters": PARAMETERS, "points": points}


ALCI = tuple[float, tuple[float, float] | None]
"""An entry's AL and its confidence interval (None: it has none)."""


def reference_entry(al: float, ci: tuple[float, float] | None, k: int = 3, model: str = "test-llama") -> Any:
    """A reference entry of ``model`` at K ``k`` with AL ``al`` and interval ``ci``."""
    from alflow.reference.table import ReferenceEntry, SpecMethod, ThinkingMode

    return ReferenceEntry(
        model=model, method=SpecMethod.MTP, thinking=ThinkingMode.OFF, k=k, draft_sample_method="greedy",
        rejection_sample_method="standard", concurrency=1, prefix_caching=False, al=al,
        ci_low=None if ci is None else ci[0], ci_high=None if ci is None else ci[1],
    )  # fmt: skip


def reference_report(changes: list[tuple[int, ALCI, ALCI]]) -> dict[str, Any]:
    """The report the reference check writes (:func:`~alflow.methods.regression.judge_reference`, the real judge) of
    entries recalibrated from (K, previous AL and interval, new AL and interval), one model each."""
    from alflow.methods.regression import judge_reference
    from alflow.reference.table import ReferenceTable

    def table(side: int) -> ReferenceTable:
        entries = tuple(
            reference_entry(*change[side], k=k, model=f"test-llama-{i}")
            for i, (k, *change) in enumerate(changes)
        )
        return ReferenceTable(kind="example", dataset="d", category="coding", entries=entries)

    before, after = table(0), table(1)
    report = judge_reference(before, after, [e.key for e in after.entries])
    return json.loads(report.model_dump_json())
