"""The stored regression verdicts of a run: ``regression.json`` (written by :mod:`alflow.methods.regression`).

One :class:`RegressionReport` per run: the method in words, the parameters it ran with, and one
:class:`PointVerdict` per judged point (an M2 point against its series' history, a reference entry against
the previous calibration, or, in a sweep's run, its children's verdicts gathered). The site's catalogue
(:mod:`alflow.results.catalog`) reads ``points[*].outcome``, ``points[*].series`` and ``points[*].concurrency``.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from alflow.errors import AlflowError

REGRESSION_FILE: Final = "regression"
"""The run file's name without ``.json`` (:meth:`alflow.results.store.RunWriter.write_json`)."""
REPORT_VERSION: Final = 1
"""Version of the ``regression.json`` layout (its own, beside the store's ``schema_version``)."""

Outcome = Literal["regressed", "improved", "unchanged", "not enough history", "not compared", "moved"]
"""A point's verdict. ``not compared``: the point itself cannot be compared (stopped mid-way, client-bound);
``moved``: a reference entry whose AL left its confidence interval between two calibrations."""
ReportKind = Literal["m2", "sweep", "reference"]
ALERT_OUTCOMES: Final = frozenset({"regressed", "moved"})
"""Outcomes that emit ``alflow.regression.detected``."""


class _Stored(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class MetricChange(_Stored):
    """One metric of a point: the history's median, this run's, the relative change and its interval."""

    metric: str = Field(description="tpot_ms, tokens_per_s_per_request, achieved_al or al.")
    current: float | None = Field(description="This run's median (a reference: the new AL).")
    baseline: float | None = Field(description="The history's median (a reference: the previous AL).")
    change: float | None = Field(description="current / baseline - 1.")
    low: float | None = Field(None, description="Lower end of the interval of the relative change.")
    high: float | None = Field(None, description="Upper end of the interval of the relative change.")
    p_value: float | None = Field(None, description="Two-sided Mann-Whitney p (information only).")
    outcome: Outcome = Field("unchanged", description="This metric's verdict alone.")
    note: str = Field("", description="Why the metric was not compared (impossible values, a zero median).")

    @model_validator(mode="after")
    def _possible(self) -> MetricChange:
        """A judged metric (not ``not compared``) holds what the check judges.

        Positive finite medians, a finite change and interval, where given (round 13: a stored "improved" of a
        TPOT of -5 ms against 0, change NaN, was shown as a verdict).
        """
        if self.outcome in ("not compared", "not enough history"):
            return self
        for name in ("current", "baseline", "change", "low", "high"):
            value = getattr(self, name)
            positive = name in ("current", "baseline")
            if value is not None and (not math.isfinite(value) or (positive and value <= 0)):
                what = "positive finite" if positive else "finite"
                raise ValueError(
                    f"a metric judged {self.outcome} has a {name} of {value!r}, not a {what} number"
                )
        if self.low is not None and self.high is not None and self.low > self.high:
            raise ValueError(f"its interval [{self.low!r}, {self.high!r}] ends below where it starts")
        if self.change is not None and self.change <= -1.0:  # current / baseline - 1 of two positive medians
            raise ValueError(
                f"a metric judged {self.outcome} has a change of {self.change!r}, not above -100%"
            )
        if (
            self.outcome in _MOVED
            and self.low is not None
            and self.high is not None
            and self.low <= 0 <= self.high
        ):
            raise ValueError(
                f"a metric judged {self.outcome} has an interval [{self.low!r}, {self.high!r}] holding 0"
            )
        return self

    def against(self, threshold: float) -> str | None:
        """Why this metric's verdict contradicts its own numbers at ``threshold`` (the check's rule), None if not."""
        if self.change is None or self.low is None or self.high is None:
            return None
        beyond = abs(self.change) >= threshold and not self.low <= 0 <= self.high
        if self.outcome in _MOVED and not beyond:
            return f"{self.metric} judged {self.outcome} at {self.change:+.1%}, under the threshold {threshold:.0%}"
        if self.outcome == "unchanged" and beyond:
            return (
                f"{self.metric} judged unchanged at {self.change:+.1%} [{self.low:+.1%}, {self.high:+.1%}], beyond the "
                f"threshold {threshold:.0%} on one side"
            )
        return None


_MOVED: Final = ("regressed", "improved")


class PointVerdict(_Stored):
    """One judged point and why."""

    series: dict[str, str | int] = Field(description="The series key (SeriesKey.to_dict()).")
    concurrency: int
    k: int
    repeat: int = 0
    outcome: Outcome
    metrics: list[MetricChange] = Field(default_factory=list)
    history: list[str] = Field(
        default_factory=list, description="The history runs compared with (rel paths)."
    )
    message: str = ""
    run: str | None = Field(None, description="The run that judged the point (a sweep's child), rel path.")
    reference: str | None = Field(None, description="The reference entry's label (reference verdicts).")


class RegressionParameters(_Stored):
    """What the check ran with (within the bounds :class:`~alflow.config.regression.RegressionConfig` allows)."""

    history_runs: int = Field(ge=1, le=100)
    min_history: int = Field(ge=1, le=100)
    threshold: float = Field(gt=0.0, le=1.0, allow_inf_nan=False)
    resamples: int = Field(ge=0, le=20_000)
    confidence: float = Field(gt=0.0, lt=1.0, allow_inf_nan=False)
    seed: int = Field(ge=0, lt=2**64)


class RegressionReport(_Stored):
    """``regression.json``: the verdicts of one run's points."""

    version: int = REPORT_VERSION
    kind: ReportKind
    method: str
    parameters: RegressionParameters | None = None
    points: list[PointVerdict] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """How many points got each outcome (outcomes with none left out)."""
        return dict(Counter(p.outcome for p in self.points))

    def alerts(self) -> list[PointVerdict]:
        """The points that emit ``alflow.regression.detected`` (regressed, moved)."""
        return [p for p in self.points if p.outcome in ALERT_OUTCOMES]


def contradiction(report: RegressionReport) -> str | None:
    """Where an M2 report's verdicts contradict their own metrics (stored files are checked so), None if nowhere.

    A point's verdict is what its metrics' verdicts make it, and a metric's what its change and interval make it at the
    report's threshold. Round 14: an "unchanged" at +90 % [+80 %, +100 %], an "improved" of no metric, or one whose
    one metric "regressed", was shown as stored.
    """
    if report.kind != "m2":
        return None
    for i, point in enumerate(report.points):
        if point.outcome not in ("regressed", "improved", "unchanged"):
            continue
        judged = [m.outcome for m in point.metrics if m.outcome not in ("not compared", "not enough history")]
        combined = (
            "regressed" if "regressed" in judged else "improved" if "improved" in judged else "unchanged"
        )
        if not judged or combined != point.outcome:
            made = combined if judged else "not compared"
            return f"points.{i}: judged {point.outcome} with metric verdicts {judged or 'none'} (the check makes it {made})"
        if report.parameters is None:
            continue
        for m in point.metrics:
            why = m.against(report.parameters.threshold)
            if why:
                return f"points.{i}: {why}"
    return None


def parse_report(data: object, where: str) -> RegressionReport:
    """The report a stored ``regression.json`` holds; one line naming ``where`` and the field when it is not one."""
    try:
        report = RegressionReport.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "(top level)"
        raise AlflowError(f"{where}: not a regression report: {field}: {err['msg']}") from None
    why = contradiction(report)
    if why:
        raise AlflowError(f"{where}: not a regression report: {why}")
    return report
