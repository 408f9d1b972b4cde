"""The stored regression verdicts of a run: ``regression.json`` (written by :mod:`alflow.methods.regression`).

One :class:`RegressionReport` per run: the method in words, the parameters it ran with, and one
:class:`PointVerdict` per judged point (an M2 point against its series' history, a reference entry against
the previous calibration, or, in a sweep's run, its children's verdicts gathered). The site's catalogue
(:mod:`alflow.results.catalog`) reads ``points[*].outcome``, ``points[*].series`` and ``points[*].concurrency``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from alflow.acceptance.synthetic import K_MAX, K_MIN
from alflow.config.regression import RegressionSettings
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


JUDGED: Final = ("regressed", "improved", "unchanged")
"""The verdicts the check gives a metric it compared (besides ``not compared``)."""
DEFAULT_THRESHOLD: Final[float] = RegressionSettings.model_fields["threshold"].default
"""The threshold a stored report without parameters is read at (the check's default)."""
REL_TOLERANCE: Final = 1e-6
"""How far a stored change may be from ``current / baseline - 1`` (and outside its interval): rounding only."""
ACHIEVED_AL: Final = "achieved_al"
"""The metric of a point whose AL audit failed (its verdict follows :func:`audit_point_outcome`)."""
REFERENCE_AL: Final = "al"
"""The metric of a reference entry's verdict."""


@dataclass(frozen=True)
class Metric:
    """A per-request metric the check compares, which direction is worse, and its possible values."""

    name: str
    label: str
    higher_is_worse: bool
    least: float
    """The smallest possible value above zero: a token a microsecond is faster than any server streams (a TPOT of
    3e-8 ms, forged, was judged "regressed +517,946,600 %"), a token in 1,000 s slower than any (a request of 31
    years, forged, was "improved +8e12 %")."""
    most: float
    """The largest possible value: a TPOT of one hour a token, ten million tokens a second for one request."""


TPOT: Final = Metric("tpot_ms", "TPOT", higher_is_worse=True, least=0.001, most=3_600_000.0)
THROUGHPUT: Final = Metric(
    "tokens_per_s_per_request",
    "output tokens/s per request",
    higher_is_worse=False,
    least=0.001,
    most=10_000_000.0,
)
METRICS: Final = (TPOT, THROUGHPUT)
BY_NAME: Final = {m.name: m for m in METRICS}


def metric_outcome(
    change: float, low: float, high: float, *, higher_is_worse: bool, threshold: float
) -> Outcome:
    """A metric's verdict from its relative change and the interval [low, high] of the change.

    ``regressed``/``improved`` when the interval is on one side of zero and ``|change| >= threshold``;
    ``unchanged`` otherwise (which side is worse: ``higher_is_worse``). The one rule: the judge gives it, the reader
    of a stored report checks each stored verdict against it (:func:`contradiction`).
    """
    if abs(change) < threshold:
        return "unchanged"
    if low > 0:
        return "regressed" if higher_is_worse else "improved"
    if high < 0:
        return "improved" if higher_is_worse else "regressed"
    return "unchanged"


def combine(outcomes: Iterable[Outcome]) -> Outcome:
    """A point's verdict from its metrics': regressed if any, else improved if any, else unchanged."""
    seen = set(outcomes)
    return "regressed" if "regressed" in seen else "improved" if "improved" in seen else "unchanged"


def audit_point_outcome(al_outcome: Outcome) -> Outcome:
    """The verdict of a point whose AL audit failed, from its AL metric's: regressed, else not enough history.

    The judge makes the AL ``regressed`` when the series has enough good runs, ``unchanged`` when not.
    """
    return "regressed" if al_outcome == "regressed" else "not enough history"


def reference_outcome(
    change: float, low: float | None, high: float | None, new_low: float | None, new_high: float | None
) -> Outcome:
    """A reference entry's verdict from its AL's change and the two confidence intervals, all relative to the previous AL.

    ``change``: new AL / previous AL - 1; [``low``, ``high``]: the previous entry's interval, [``new_low``,
    ``new_high``]: the new entry's, each bound / previous AL - 1 (dividing by one positive AL keeps their order).
    ``not enough history`` when the previous entry has no interval; ``moved`` when the intervals do not overlap, or,
    when only the previous has one, when the change is outside it; ``unchanged`` otherwise. The one rule: the judge
    (:func:`alflow.methods.regression.judge_reference`) gives it, the reader of a stored report checks each stored
    verdict against it (:func:`contradiction`).
    """
    if low is None or high is None:
        return "not enough history"
    if new_low is not None and new_high is not None:
        return "moved" if new_high < low or new_low > high else "unchanged"
    return "unchanged" if low <= change <= high else "moved"


REFERENCE_OUTCOMES: Final = ("moved", "unchanged", "not enough history")
"""The verdicts :func:`reference_outcome` gives."""


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
    current_low: float | None = Field(
        None,
        description="A reference: the new AL's interval's lower end / the previous AL - 1 (None for M2).",
    )
    current_high: float | None = Field(
        None,
        description="A reference: the new AL's interval's upper end / the previous AL - 1 (None for M2).",
    )
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
        for name in ("current", "baseline", "change", "low", "high", "current_low", "current_high"):
            value = getattr(self, name)
            positive = name in ("current", "baseline")
            if value is not None and (not math.isfinite(value) or (positive and value <= 0)):
                what = "positive finite" if positive else "finite"
                raise ValueError(
                    f"a metric judged {self.outcome} has a {name} of {value!r}, not a {what} number"
                )
        for low, high in ((self.low, self.high), (self.current_low, self.current_high)):
            if low is not None and high is not None and low > high:
                raise ValueError(f"its interval [{low!r}, {high!r}] ends below where it starts")
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


_MOVED: Final = ("regressed", "improved")


class PointVerdict(_Stored):
    """One judged point and why."""

    series: dict[str, str | int] = Field(description="The series key (SeriesKey as dump_row stores it).")
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
    """Where a report's verdicts are not the check's of their own numbers, None if nowhere.

    Each point is judged again from what it stores, by the judge's own rules (:func:`metric_outcome`,
    :func:`combine`, :func:`audit_point_outcome`), at the report's threshold (the default one when it stores no
    parameters): a metric the judge writes by name, a judged metric with its numbers, possible medians, its change
    ``current / baseline - 1`` inside its interval, its verdict the rule's for its direction; the point's verdict
    the combination of its metrics'. Rounds 14 and 15 (#49): an "unchanged" at +90 %, a TPOT +50 % "improved", a
    change of -50 % where 20 / 10 is +100 %, an "improved" of no numbers or of a TPOT of 1e-300 ms were shown.
    A reference report's points are judged again by :func:`reference_problem` (round 16: an "unchanged" of an AL
    that moved by 50 %, a "moved" of one that did not, an AL of -1 or above K + 1 were shown as verdicts).
    """
    threshold = report.parameters.threshold if report.parameters is not None else DEFAULT_THRESHOLD
    for i, point in enumerate(report.points):
        why = reference_problem(point) if report.kind == "reference" else _point_problem(point, threshold)
        if why:
            return f"points.{i}: {why}"
    return None


def _point_problem(point: PointVerdict, threshold: float) -> str | None:
    """Why an M2 point's stored verdict is not the one the check makes of its stored metrics, None if it is."""
    if point.outcome == "moved":
        return "judged moved, which the check gives a reference entry only"
    audit = [m for m in point.metrics if m.metric == ACHIEVED_AL]
    if audit:  # the AL audit failed: one metric, the AL, and the point's verdict follows it
        alone = len(point.metrics) == 1 and audit[0].outcome in ("regressed", "unchanged")
        made = audit_point_outcome(audit[0].outcome) if alone else None
        if made != point.outcome:
            return (
                f"judged {point.outcome} on {len(point.metrics)} metric(s) with {ACHIEVED_AL} "
                f"{audit[0].outcome} (the check makes it {made or 'one metric, the AL, alone'})"
            )
        return None
    for m in point.metrics:
        why = metric_problem(m, threshold)
        if why:
            return why
    if point.outcome in ("not compared", "not enough history"):
        if point.outcome == "not enough history" and point.metrics:
            return f"judged not enough history with {len(point.metrics)} metric(s) compared"
        return None
    verdicts = [m.outcome for m in point.metrics]
    made = combine(verdicts) if verdicts and "not compared" not in verdicts else "not compared"
    if made != point.outcome:
        return f"judged {point.outcome} with metric verdicts {verdicts or 'none'} (the check makes it {made})"
    return None


def metric_problem(m: MetricChange, threshold: float) -> str | None:
    """Why a stored TPOT or throughput metric's verdict is not the check's of its own numbers, None if it is."""
    metric = BY_NAME.get(m.metric)
    if metric is None:
        known = ", ".join([*BY_NAME, ACHIEVED_AL])
        return f"a metric named {m.metric[:40]!r}, not one of {known}"
    if m.current_low is not None or m.current_high is not None:
        return f"{m.metric} stores a new interval, which only a reference entry's AL has"
    if m.outcome == "not compared":
        return None
    if m.outcome not in JUDGED:
        return f"{m.metric} judged {m.outcome}, which the check never makes a metric"
    if m.current is None or m.baseline is None or m.change is None or m.low is None or m.high is None:
        return f"{m.metric} judged {m.outcome} without its numbers (current, baseline, change, low and high)"
    for side, value in (("current", m.current), ("baseline", m.baseline)):
        if not metric.least <= value <= metric.most:
            return (
                f"{m.metric} has a {side} median of {value!r}, not a possible value "
                f"(from {metric.least:g} to {metric.most:,.0f})"
            )
    ratio = m.current / m.baseline - 1.0
    if not math.isclose(m.change, ratio, rel_tol=REL_TOLERANCE, abs_tol=REL_TOLERANCE):
        return f"{m.metric} has a change of {m.change:+.4%} where current / baseline - 1 is {ratio:+.4%}"
    slack = REL_TOLERANCE * max(1.0, abs(m.change))
    if not m.low - slack <= m.change <= m.high + slack:
        return f"{m.metric}'s interval [{m.low:+.4%}, {m.high:+.4%}] does not hold its change {m.change:+.4%}"
    made = metric_outcome(
        m.change, m.low, m.high, higher_is_worse=metric.higher_is_worse, threshold=threshold
    )
    if made != m.outcome:
        return (
            f"{m.metric} judged {m.outcome} at {m.change:+.1%} [{m.low:+.1%}, {m.high:+.1%}] "
            f"({'higher' if metric.higher_is_worse else 'lower'} is worse, threshold {threshold:.0%}): "
            f"the check makes it {made}"
        )
    return None


def reference_problem(point: PointVerdict) -> str | None:
    """Why a reference entry's stored verdict is not the one the check makes of its stored AL, None if it is.

    What :func:`alflow.methods.regression.judge_reference` writes: one metric, ``al``, whose verdict is the point's;
    the two ALs possible for the point's K (in [1, K + 1], finite); the change their ratio - 1; the previous interval
    holding the previous AL (0), the new one holding the new AL (the change); the verdict :func:`reference_outcome`'s,
    or, without a new interval, one the previous release's judge could have made (:func:`_old_judge_could`).
    """
    if point.outcome not in REFERENCE_OUTCOMES:
        return f"judged {point.outcome}, which the check never makes a reference entry"
    if len(point.metrics) != 1 or point.metrics[0].metric != REFERENCE_AL:
        names = ", ".join(repr(m.metric[:40]) for m in point.metrics[:3]) or "none"
        return f"a reference entry judged on the metric(s) {names}, not on {REFERENCE_AL!r} alone"
    m = point.metrics[0]
    if m.outcome != point.outcome:
        return f"judged {point.outcome} with its {REFERENCE_AL} judged {m.outcome}"
    if m.current is None or m.baseline is None or m.change is None:
        return f"{REFERENCE_AL} judged {m.outcome} without its numbers (current, baseline and change)"
    if not K_MIN <= point.k <= K_MAX:
        return f"a reference entry of K={point.k}, not from {K_MIN} to {K_MAX}"
    for side, value in (("current", m.current), ("baseline", m.baseline)):
        if not (math.isfinite(value) and 1.0 <= value <= point.k + 1):
            return f"{REFERENCE_AL} has a {side} AL of {value!r}, not a possible AL at K={point.k} (from 1 to {point.k + 1})"
    ratio = m.current / m.baseline - 1.0
    if not math.isclose(m.change, ratio, rel_tol=REL_TOLERANCE, abs_tol=REL_TOLERANCE):
        return f"{REFERENCE_AL} has a change of {m.change:+.4%} where current / baseline - 1 is {ratio:+.4%}"
    for name, low, high, holds in (
        ("previous", m.low, m.high, 0.0),
        ("new", m.current_low, m.current_high, m.change),
    ):
        if (low is None) != (high is None):
            return f"{REFERENCE_AL}'s {name} interval has one end, not both or neither"
        slack = REL_TOLERANCE * max(1.0, abs(holds))
        if low is not None and high is not None and not low - slack <= holds <= high + slack:
            return f"{REFERENCE_AL}'s {name} interval [{low:+.4%}, {high:+.4%}] does not hold its {name} AL"
    made = reference_outcome(m.change, m.low, m.high, m.current_low, m.current_high)
    if made != m.outcome and not _old_judge_could(m):
        return (
            f"{REFERENCE_AL} judged {m.outcome} at {m.change:+.2%} against the previous interval "
            f"[{_pct(m.low)}, {_pct(m.high)}] and the new [{_pct(m.current_low)}, {_pct(m.current_high)}]: "
            f"the check makes it {made}"
        )
    return None


def _old_judge_could(m: MetricChange) -> bool:
    """Whether the previous release's judge (11bbe4f) could have written ``m``'s verdict, stored without a new interval.

    That judge compared the two intervals too, but stored the previous one only: of a report without
    ``current_low`` and ``current_high`` the rule cannot be re-run. It made "unchanged" of a new AL inside the
    previous interval, either verdict of one outside it (the unknown new interval overlapping it or not), "moved" of
    none inside it and "not enough history" only without a previous interval (round 17, #49).
    """
    if m.current_low is not None or m.current_high is not None or m.low is None or m.high is None:
        return False
    if m.outcome == "unchanged":
        return True
    change = m.change if m.change is not None else 0.0
    slack = REL_TOLERANCE * max(1.0, abs(change))  # it compared the ALs, not their ratios: a tie may round
    return m.outcome == "moved" and not m.low + slack < change < m.high - slack


def _pct(value: float | None) -> str:
    return "none" if value is None else f"{value:+.2%}"


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
