"""Gates: verdicts that decide whether a run passes (M1 accuracy gate; AL gate and audit later).

A verdict says passed or not, and when not, names the failing quantity, its value and the
threshold, in one sentence a person can act on.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
