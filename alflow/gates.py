"""Gates: verdicts that decide whether a run passes (M1 accuracy gate; AL gate and audit later).

A verdict says passed or not, and when not, names the failing quantity, its value and the
threshold, in one sentence a person can act on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Final

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from alflow.acceptance.stats import ConfidenceInterval, SpecStats, goodness_of_fit
from alflow.acceptance.synthetic import AcceptanceDistribution
from alflow.config import GateTolerances
from alflow.evals.gsm8k import EvalResult
from alflow.evals.thresholds import check_threshold


class _Details(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class AccuracyDetails(_Details):
    """What the GSM8K accuracy gate compared: each score against the threshold."""

    threshold: float
    failing: tuple[str, ...] = ()
    subset: bool = False
    scores: dict[str, float] = Field(default_factory=dict)
    """Accuracy by score name (strict-match, flexible-extract), rounded to 6 digits."""


class AlGateDetails(_Details):
    """What the AL gate compared: the AL (or its CI's upper bound) against the threshold from the reference."""

    threshold: float
    reference_al: float
    rule: str = ""
    al: float | None = None
    ci: ConfidenceInterval | None = None
    compared: float | None = None
    """The number held against the threshold: the AL, or the upper CI bound with ``use_ci="upper"``."""


class AuditDetails(_Details):
    """What the synthetic audit compared: the achieved AL against the scheme's expected AL, within ``allowed``."""

    target_al: float
    achieved_al: float | None
    expected_al: float | None = None
    scheme: str | None = None
    granularity: str | None = None
    deviation: float | None = None
    allowed: float | None = None
    """``max(abs_tol, z * std / sqrt(n))``: the largest deviation that passes."""
    expected_std_of_mean: float | None = None
    num_drafts: int | None = None
    fit_p_value: float | None = None
    """Chi-square p of the accept-length histogram against the scheme's pmf, where one was tested."""
    histogram_observed: tuple[int, ...] | None = None
    """Verify steps by accept length 1..K+1 (index 0 = length 1), where the statistics have a histogram."""
    histogram_expected: tuple[float, ...] | None = None
    """The scheme's expected steps by accept length at the target (pmf x steps), same indexing."""
    truncation: float | None = None
    """How far below the scheme's mean the counters are expected to read, where they cut each request's
    last verify step at its limit (SGLang): ``truncated_requests x mean_overshoot / num_drafts``."""
    short_draft_share: float | None = None
    """The share of draft slots left empty, ``1 - draft_tokens / (K x steps)``, where steps carried fewer than K
    drafts (n-gram partial matches, grammar, drafts cut at the output limit, adaptive verification)."""


GateDetails = AccuracyDetails | AlGateDetails | AuditDetails
GATE_DETAILS: Final[Mapping[str, type[GateDetails]]] = {
    "al": AlGateDetails,
    "gsm8k-accuracy": AccuracyDetails,
    "synthetic-audit": AuditDetails,
}
"""The details each gate's verdict carries, by gate name."""


def _readable(kind: type[GateDetails], row: Mapping[str, Any]) -> GateDetails | None:
    """The details a stored verdict holds; a field this version cannot read is left out (None: not even then)."""
    try:
        return kind.model_validate(row)
    except ValidationError as exc:
        unreadable = {error["loc"][0] for error in exc.errors() if error["loc"]}
    try:
        return kind.model_validate({key: value for key, value in row.items() if key not in unreadable})
    except ValidationError:
        return None


class Verdict(BaseModel):
    """The outcome of one gate, with what it compared (None for a verdict that compared nothing).

    Stored flat (``summary.json``'s verdicts): gate, passed, message and the details' fields beside them; a
    stored verdict whose details this version cannot read keeps its outcome with no details.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    gate: str
    passed: bool
    message: str = ""
    details: GateDetails | None = None

    @model_validator(mode="before")
    @classmethod
    def _stored_row(cls, row: Any) -> Any:
        if not isinstance(row, Mapping) or "details" in row:
            return row
        if not isinstance(row.get("gate"), str) or not isinstance(row.get("passed"), bool):
            raise ValueError(f"a verdict needs a gate name and passed: {dict(row)!r:.200}")
        kind = GATE_DETAILS.get(row["gate"])
        details = None if kind is None else _readable(kind, row)
        return {
            "gate": row["gate"],
            "passed": row["passed"],
            "message": row.get("message") or "",
            "details": details,
        }

    @model_serializer(mode="wrap")
    def _flat_row(self, dump: SerializerFunctionWrapHandler) -> dict[str, Any]:
        row: dict[str, Any] = dump(self)
        row.update(row.pop("details", None) or {})
        return row

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        """The stored form's schema (``summary.schema.json``): the details' fields beside the outcome's."""
        schema = handler(core_schema)
        verdict = handler.resolve_ref_schema(schema)
        details = verdict["properties"].pop("details")
        kinds = [s for s in details["anyOf"] if s.get("type") != "null"]
        verdict["anyOf"] = [*kinds, {"description": "a verdict that compared nothing: no details"}]
        return schema


def accuracy_gate(result: EvalResult, threshold: float) -> Verdict:
    """Pass only when strict-match and flexible-extract both reach ``threshold`` and no request failed.

    A threshold NaN, infinite or outside [0, 1] is :class:`InvalidInputError` (NaN used to pass every score).
    """
    check_threshold(threshold, "the accuracy threshold")
    scores = (result.strict, result.flexible)
    failing = [s for s in scores if s.accuracy < threshold]
    problems = [f"{s.name} {s.accuracy:.4f} < threshold {threshold:.4f}" for s in failing]
    if result.failed_requests:
        problems.append(f"{result.failed_requests} of {len(result.results)} requests failed")
    scope = (
        f"seeded subset of {len(result.results)} of {result.population} questions"
        if result.subset
        else f"all {result.population} questions"
    )
    summary = ", ".join(f"{s.name} {s.accuracy:.4f}" for s in scores)
    if problems:
        message = f"GSM8K accuracy gate FAILED for {result.model}: " + "; ".join(problems) + f" ({scope})"
    else:
        message = f"GSM8K accuracy gate passed for {result.model}: {summary} >= {threshold:.4f} ({scope})"
    return Verdict(
        gate="gsm8k-accuracy",
        passed=not problems,
        message=message,
        details=AccuracyDetails(
            threshold=threshold,
            failing=tuple(s.name for s in failing),
            subset=result.subset,
            scores={s.name: round(s.accuracy, 6) for s in scores},
        ),
    )


def al_gate(stats: SpecStats, reference_al: float, tolerances: GateTolerances, *, subject: str) -> Verdict:
    """M1: the achieved AL must not fall below ``reference - max(abs_tol, rel_tol * reference)``.

    With ``use_ci="upper"`` the gate fails only when the upper bound of the AL confidence interval
    is below the threshold (the AL is confidently too low); with ``"point"`` the estimate itself
    is compared.
    """
    threshold = tolerances.al_threshold(reference_al)
    rule = f"reference {reference_al:.4f} - max({tolerances.abs_tol:g}, {tolerances.rel_tol:g} x {reference_al:.4f})"
    if not stats.observed or stats.al is None:
        return Verdict(
            gate="al",
            passed=False,
            message=f"AL gate FAILED for {subject}: {stats.note or 'no speculative steps observed'}",
            details=AlGateDetails(threshold=threshold, reference_al=reference_al, rule=rule),
        )
    al = stats.al
    ci = stats.ci
    ci_text = f" ({ci.level:.0%} CI [{ci.low:.4f}, {ci.high:.4f}], {ci.method})" if ci is not None else ""
    use_upper = tolerances.use_ci == "upper" and ci is not None
    compared = ci.high if (use_upper and ci is not None) else al
    passed = compared >= threshold
    details = AlGateDetails(
        threshold=threshold, reference_al=reference_al, rule=rule, al=al, ci=ci, compared=compared
    )
    if passed:
        message = f"AL gate passed for {subject}: AL {al:.4f}{ci_text} >= threshold {threshold:.4f} ({rule})"
    else:
        what = "the upper CI bound of AL" if use_upper else "AL"
        message = (
            f"AL gate FAILED for {subject}: {what} {compared:.4f} < threshold {threshold:.4f} "
            f"(AL {al:.4f}{ci_text}; threshold = {rule})"
        )
    return Verdict(gate="al", passed=passed, message=message, details=details)


AUDIT_ABS_TOL: Final = 0.02
"""The synthetic audit's smallest allowed deviation of the achieved AL from the scheme's expected AL."""
AUDIT_Z: Final = 3.29
"""The synthetic audit's z (two-sided 0.1%) applied to the standard deviation of the mean AL."""
AUDIT_MIN_FIT_P: Final = 1e-8
"""The shape test's threshold: a point whose accept-length histogram fits the scheme's pmf with a chi-square p below
this fails. Under the scheme (draws independent per request and step, as vLLM's and the sim's are) the chi-square's
p would be uniform, so a correct server would fail a point with probability 1e-8; but the test merges cells only down
to an expected count of 5, and the upper tail of such a small cell (Poisson-like, skewed) is heavier than the
chi-square's: computed exactly for the worst case (two cells, the small one expecting 5 steps, 400 to 20,000 steps)
a correct server fails with probability up to 5.4e-6 at this threshold (up to 6.9e-5 at 1e-6, 1.4e-6 at 1e-9); with
well-filled cells it is the nominal 1e-8. So at most about one false alarm in 180,000 points (a K sweep of 7 K x 6
concurrencies: one in 4,000 sweeps). A wrong shape at the same mean is far below it at a few hundred steps: a
min-variance target of 2.3 at K = 3 served with SGLang's multinomial draw puts steps on lengths the pmf gives
probability 0 (p = 0), and the chi-square grows linearly with the steps for any fixed difference of the pmfs (at
one degree of freedom 1e-8 needs a chi-square of 32.8 against 23.9 at 1e-6: 37% more steps for the same
difference, while an M2 point has thousands of steps)."""


def _mean_problems(
    al: float, expected: float, allowed: float, distribution: AcceptanceDistribution
) -> list[str]:
    """The mean test of :func:`audit_synthetic`: the achieved AL off the expected one, or a biased scheme."""
    problems = []
    deviation = al - expected
    if abs(deviation) > allowed:
        problems.append(
            f"achieved AL {al:.4f} differs from the scheme's expected {expected:.4f} by {deviation:+.4f} "
            f"(allowed +/-{allowed:.4f})"
        )
    if abs(distribution.bias) > 1e-9:
        problems.append(
            f"scheme {distribution.scheme} is biased: expected {expected:.4f} for target "
            f"{distribution.target.mean_al:.4f}"
        )
    return problems


def audit_synthetic(
    stats: SpecStats,
    distribution: AcceptanceDistribution,
    *,
    abs_tol: float = AUDIT_ABS_TOL,
    z: float = AUDIT_Z,
    min_fit_p: float = AUDIT_MIN_FIT_P,
    subject: str,
) -> Verdict:
    """M2: the achieved AL must match the synthetic target within tolerance.

    Allowed deviation ``= max(abs_tol, z * std / sqrt(n))`` where ``std`` is the scheme's per-step
    standard deviation and ``n`` the number of independent draws (verify steps with drafts; for a
    per-batch scheme the counters still count one draw per request, so the spread is a lower
    bound there). Where the statistics have a histogram (per-request histograms pooled, or per-position counters)
    and the scheme draws per request, the histogram must also fit the scheme's exact distribution: the shape
    test, chi-square p >= ``min_fit_p`` (:data:`AUDIT_MIN_FIT_P`); the observed and expected counts are kept.
    Counters that cut each request's last verify step at its limit (``stats.truncated_requests``,
    SGLang) are expected to read ``truncated_requests x mean_overshoot / n`` below the scheme's mean.
    """
    target = distribution.target.mean_al
    expected = distribution.mean
    if not stats.observed or stats.al is None:
        return Verdict(
            gate="synthetic-audit",
            passed=False,
            message=f"synthetic audit FAILED for {subject}: {stats.note or 'no speculative steps observed'}",
            details=AuditDetails(target_al=target, achieved_al=None),
        )
    n = stats.num_drafts
    spread = distribution.std / math.sqrt(n)
    allowed = max(abs_tol, z * spread)
    truncation, slack = truncation_shift(stats, distribution)
    allowed += slack
    expected -= truncation or 0.0
    deviation = stats.al - expected
    problems = _mean_problems(stats.al, expected, allowed, distribution)
    hist = stats.histogram
    observed, expected_counts = (None, None) if hist is None else histogram_counts(hist, distribution.pmf)
    short = short_draft_share(stats)
    fit_p, shape_problems, notes = shape_test(stats, distribution, min_fit_p, short)
    problems += shape_problems
    details = AuditDetails(
        target_al=target,
        achieved_al=stats.al,
        expected_al=expected,
        scheme=distribution.scheme,
        granularity=distribution.granularity,
        deviation=deviation,
        allowed=allowed,
        expected_std_of_mean=spread,
        num_drafts=n,
        fit_p_value=fit_p,
        histogram_observed=observed,
        histogram_expected=expected_counts,
        truncation=truncation,
        short_draft_share=short or None,
    )
    message = (
        f"synthetic audit FAILED for {subject}: " + "; ".join(problems)
        if problems
        else f"synthetic audit passed for {subject}: achieved AL {stats.al:.4f}, target {target:.4f} "
        f"(+/-{allowed:.4f}, {n} steps{'' if fit_p is None else f'; shape test p={fit_p:.3g}'})"
        + "".join(f"; {note}" for note in notes)
    )
    return Verdict(gate="synthetic-audit", passed=not problems, message=message, details=details)


def short_draft_share(stats: SpecStats) -> float:
    """The share of draft slots the steps left empty, ``1 - draft_tokens / (K x steps)`` (0: every step had K)."""
    if stats.k is None or stats.draft_tokens is None or not stats.num_drafts:
        return 0.0
    return max(0.0, 1.0 - stats.draft_tokens / (stats.k * stats.num_drafts))


def truncation_shift(stats: SpecStats, distribution: AcceptanceDistribution) -> tuple[float | None, float]:
    """How far below the scheme's mean counters that cut each request's last step read, and the extra slack.

    (None, 0) without truncated requests. A drawn scheme: ``truncated_requests x mean_overshoot / n``; one fixed
    length L: a request's cut is set by its output length modulo L (0..L-1), not drawn, so the middle of that range
    is expected and its half-width allowed.
    """
    if not stats.truncated_requests:
        return None, 0.0
    n = stats.num_drafts
    if distribution.variance > 0.0:
        return stats.truncated_requests * distribution.mean_overshoot / n, 0.0
    slack = stats.truncated_requests * (distribution.mean - 1.0) / n
    return slack / 2.0, slack / 2.0


def shape_test(
    stats: SpecStats, distribution: AcceptanceDistribution, min_fit_p: float, short: float
) -> tuple[float | None, list[str], list[str]]:
    """The histogram against the scheme's pmf, for a per-request scheme: (p, problems, notes).

    A step with fewer than K drafts (``short``: the share of empty draft slots) has its own accept distribution, a
    cell of probability 0 under K. Where the server says each step's draft count (``stats.full_k_histogram``), only
    the steps that carried all K drafts are tested, and the share of the others is a note; without it the pooled
    shape cannot be judged when drafts are short, so a misfit is a note then, never a failure.
    """
    if stats.histogram is None or distribution.granularity != "per-request":
        return None, [], []
    full = stats.full_k_histogram
    notes: list[str] = []
    if full is not None and sum(full.values()) < sum(stats.histogram.values()):
        steps, kept = sum(stats.histogram.values()), sum(full.values())
        notes.append(
            f"shape test on the {kept} steps that carried all K drafts; {steps - kept} of {steps} steps "
            f"({(steps - kept) / steps:.1%}) carried fewer and follow another distribution"
        )
        if kept == 0:
            return None, [], notes
        return _judged(full, distribution, min_fit_p, notes)
    return _judged(stats.histogram, distribution, min_fit_p, notes, short=short)


def _judged(
    histogram: Mapping[int, int],
    distribution: AcceptanceDistribution,
    min_fit_p: float,
    notes: list[str],
    *,
    short: float = 0.0,
) -> tuple[float | None, list[str], list[str]]:
    """``histogram`` against the scheme's pmf: a misfit is a problem, or only a note when ``short`` drafts blur it."""
    fit = goodness_of_fit(histogram, distribution.pmf)
    if fit.p_value >= min_fit_p:
        return fit.p_value, [], notes
    if short:
        return (
            fit.p_value,
            [],
            [
                *notes,
                f"shape test not judged: {short:.1%} of the draft slots were empty (drafts < K x steps), and "
                f"steps with fewer than K drafts do not follow the K-draft pmf (chi-square p={fit.p_value:.2e})",
            ],
        )
    return (
        fit.p_value,
        [
            f"accept-length histogram does not fit scheme {distribution.scheme} (chi-square p={fit.p_value:.2e} < "
            f"{min_fit_p:g}; steps by accept length, observed vs expected: "
            f"{shown_counts(histogram, distribution.pmf)})"
        ],
        notes,
    )


def histogram_counts(
    histogram: Mapping[int, int], pmf: Sequence[float]
) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """Observed and expected verify steps by accept length 1..K+1 (``pmf`` x all observed steps), index 0 = length 1.

    Steps at a length outside 1..K+1 count in the expected total but have no cell here (:func:`shown_counts` names
    them).
    """
    total = sum(histogram.values())
    lengths = range(1, len(pmf) + 1)
    return tuple(int(histogram.get(j, 0)) for j in lengths), tuple(p * total for p in pmf)


def shown_counts(histogram: Mapping[int, int], pmf: Sequence[float]) -> str:
    """``length: observed vs expected`` for lengths 1..K+1, then any steps at a length the scheme cannot give."""
    observed, expected = histogram_counts(histogram, pmf)
    parts = [f"{j}: {o} vs {e:.1f}" for j, (o, e) in enumerate(zip(observed, expected, strict=True), start=1)]
    parts += [f"{j}: {c} vs 0.0" for j, c in sorted(histogram.items()) if c and not 1 <= j <= len(pmf)]
    return ", ".join(parts)
