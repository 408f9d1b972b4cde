"""Gate steps: the M1 AL gate, the GSM8K accuracy gate, the M2 synthetic audit (``flows/steps.py`` makes them tasks)."""

from __future__ import annotations

from prefect import get_run_logger

from alflow.acceptance.stats import SpecStats
from alflow.acceptance.synthetic import AcceptanceDistribution
from alflow.config import GateTolerances, Gsm8kSettings, ModelSpec, ThinkingMode
from alflow.evals.gsm8k import EvalResult, PromptConfig
from alflow.evals.run import Gsm8kRequest, evaluate_gsm8k
from alflow.evals.thresholds import load_thresholds
from alflow.gates import Verdict, accuracy_gate, al_gate
from alflow.gates import audit_synthetic as audit
from alflow.util.eventloop import run_stoppable
from alflow_infra.runners import ServerHandle
from alflow_infra.runners.base import handle_api_key


def _log(verdict: Verdict) -> Verdict:
    log = get_run_logger()
    (log.info if verdict.passed else log.error)(verdict.message)
    return verdict


def check_al_gate(stats: SpecStats, reference_al: float, tolerances: GateTolerances, subject: str) -> Verdict:
    """M1: achieved AL against ``reference - max(abs_tol, rel_tol x reference)``."""
    return _log(al_gate(stats, reference_al, tolerances, subject=subject))


def check_accuracy_gate(
    handle: ServerHandle,
    model: ModelSpec,
    thinking: ThinkingMode,
    settings: Gsm8kSettings,
    synthetic: bool,
) -> tuple[Verdict, EvalResult]:
    """M1: GSM8K strict-match and flexible-extract against the model's threshold."""
    request = Gsm8kRequest(
        base_url=handle.base_url,
        model=handle.model,
        prompt=PromptConfig(num_shots=settings.shots, seed=settings.seed, max_tokens=settings.max_tokens),
        limit=settings.limit,
        concurrency=settings.concurrency,
        temperature=0.0,  # the common harness's setup: greedy
        chat_template_kwargs=model.chat_template_kwargs(thinking) or None,
        synthetic=synthetic,
        api_key=handle_api_key(handle),
    )
    result = run_stoppable(evaluate_gsm8k(request))
    threshold = (
        settings.threshold
        if settings.threshold is not None
        else load_thresholds(settings.thresholds_file).for_model(model.id)
    )
    return _log(accuracy_gate(result, threshold)), result


def audit_synthetic(
    stats: SpecStats, distribution: AcceptanceDistribution, abs_tol: float, subject: str
) -> Verdict:
    """M2: achieved AL against the synthetic target, within the scheme's expected spread."""
    return _log(audit(stats, distribution, abs_tol=abs_tol, subject=subject))
