"""Gates: verdicts that decide whether a run passes (M1 accuracy gate; AL gate and audit later).

A verdict says passed or not, and when not, names the failing quantity, its value and the
threshold, in one sentence a person can act on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from alflow.acceptance.stats import SpecStats, goodness_of_fit
from alflow.acceptance.synthetic import AcceptanceDistribution
from alflow.config import GateTolerances
from alflow.evals.gsm8k import EvalResult


@dataclass(frozen=True)
class Verdict:
    """The outcome of one gate."""

    gate: str
    passed: bool
    message: str
    details: dict[str, object] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form."""
        return {"gate": self.gate, "passed": self.passed, "message": self.message, **self.details}


def accuracy_gate(result: EvalResult, threshold: float) -> Verdict:
    """Pass only when strict-match and flexible-extract both reach ``threshold`` and no request failed."""
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
        "gsm8k-accuracy",
        not problems,
        message,
        {
            "threshold": threshold,
            "failing": [s.name for s in failing],
            "subset": result.subset,
            "scores": {s.name: round(s.accuracy, 6) for s in scores},
        },
    )


def al_gate(stats: SpecStats, reference_al: float, tolerances: GateTolerances, *, subject: str) -> Verdict:
    """M1: the achieved AL must not fall below ``reference - max(abs_tol, rel_tol * reference)``.

    With ``use_ci="upper"`` the gate fails only when the upper bound of the AL confidence interval
    is below the threshold (the AL is confidently too low); with ``"point"`` the estimate itself
    is compared.
    """
    threshold = tolerances.al_threshold(reference_al)
    rule = f"reference {reference_al:.4f} - max({tolerances.abs_tol:g}, {tolerances.rel_tol:g} x {reference_al:.4f})"
    details: dict[str, object] = {"threshold": threshold, "reference_al": reference_al, "rule": rule}
    if not stats.observed or stats.al is None:
        return Verdict(
            "al",
            False,
            f"AL gate FAILED for {subject}: {stats.note or 'no speculative steps observed'}",
            {**details, "al": None},
        )
    al = stats.al
    ci = stats.ci
    ci_text = f" ({ci.level:.0%} CI [{ci.low:.4f}, {ci.high:.4f}], {ci.method})" if ci is not None else ""
    use_upper = tolerances.use_ci == "upper" and ci is not None
    compared = ci.high if (use_upper and ci is not None) else al
    passed = compared >= threshold
    details.update(al=al, ci=None if ci is None else ci.to_dict(), compared=compared)
    if passed:
        message = f"AL gate passed for {subject}: AL {al:.4f}{ci_text} >= threshold {threshold:.4f} ({rule})"
    else:
        what = "the upper CI bound of AL" if use_upper else "AL"
        message = (
            f"AL gate FAILED for {subject}: {what} {compared:.4f} < threshold {threshold:.4f} "
            f"(AL {al:.4f}{ci_text}; threshold = {rule})"
        )
    return Verdict("al", passed, message, details)


def audit_synthetic(
    stats: SpecStats,
    distribution: AcceptanceDistribution,
    *,
    abs_tol: float = 0.02,
    z: float = 3.29,
    min_fit_p: float = 1e-9,
    subject: str,
) -> Verdict:
    """M2: the achieved AL must match the synthetic target within tolerance.

    Allowed deviation ``= max(abs_tol, z * std / sqrt(n))`` where ``std`` is the scheme's per-step
    standard deviation and ``n`` the number of independent draws (verify steps with drafts; for a
    per-batch scheme the counters still count one draw per request, so the spread is a lower
    bound there). Where per-position counters give the histogram and the scheme draws per request,
    the histogram must also fit the scheme's exact distribution (chi-square p >= ``min_fit_p``).
    """
    target = distribution.target.mean_al
    expected = distribution.mean
    if not stats.observed or stats.al is None:
        return Verdict(
            "synthetic-audit",
            False,
            f"synthetic audit FAILED for {subject}: {stats.note or 'no speculative steps observed'}",
            {"target_al": target, "achieved_al": None},
        )
    n = stats.num_drafts
    spread = distribution.std / math.sqrt(n)
    allowed = max(abs_tol, z * spread)
    deviation = stats.al - expected
    details: dict[str, object] = {
        "target_al": target,
        "expected_al": expected,
        "scheme": distribution.scheme,
        "granularity": distribution.granularity,
        "achieved_al": stats.al,
        "deviation": deviation,
        "allowed": allowed,
        "expected_std_of_mean": spread,
        "num_drafts": n,
    }
    problems = []
    if abs(deviation) > allowed:
        problems.append(
            f"achieved AL {stats.al:.4f} differs from the scheme's expected {expected:.4f} by {deviation:+.4f} "
            f"(allowed +/-{allowed:.4f})"
        )
    if abs(distribution.bias) > 1e-9:
        problems.append(
            f"scheme {distribution.scheme} is biased: expected {expected:.4f} for target {target:.4f}"
        )
    if stats.histogram is not None and distribution.granularity == "per-request":
        fit = goodness_of_fit(stats.histogram, distribution.pmf)
        details["fit_p_value"] = fit.p_value
        if fit.p_value < min_fit_p:
            problems.append(
                f"accept-length histogram does not fit scheme {distribution.scheme} (chi-square p={fit.p_value:.2e})"
            )
    if problems:
        return Verdict(
            "synthetic-audit", False, f"synthetic audit FAILED for {subject}: " + "; ".join(problems), details
        )
    return Verdict(
        "synthetic-audit",
        True,
        f"synthetic audit passed for {subject}: achieved AL {stats.al:.4f}, target {target:.4f} "
        f"(+/-{allowed:.4f}, {n} steps)",
        details,
    )
