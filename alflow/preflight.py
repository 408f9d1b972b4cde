"""Pre-flight: a short burst before a sweep proves the server runs the configuration asked for.

A synthetic knob that did not take effect (an image too old to read it, TensorRT-LLM's two-model
path or integer parsing, an SGLang algorithm that ignores it) is otherwise found only by the audit
after the whole sweep has spent its GPU hours. The pre-flight sends a few short requests with
fixed output lengths, reads the server's spec-decode counters over exactly that burst, and checks:

- speculation ran: steps with drafts were observed, and K matches where the server says it
  (per-position counters, TensorRT-LLM's ``trtllm_speculative_config_info{spec_num_tokens}``);
- the speculative path is on where the server reports one (``spec_enabled``);
- synthetic acceptance: the achieved AL is within the scheme's expected spread for the burst's
  steps (:func:`alflow.gates.audit_synthetic`: ``max(abs_tol, z * std / sqrt(n))`` and, for
  per-request schemes, the accept-length histogram's fit).

A failure names the likely causes the framework's recipe knows (:attr:`Expectation.hints`). No
Prefect here; :mod:`alflow_tasks.preflight` runs it in a flow.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import polars as pl

from alflow.acceptance.stats import SpecStats
from alflow.acceptance.synthetic import AcceptanceDistribution
from alflow.config import RandomWorkload
from alflow.errors import AlflowError
from alflow.gates import audit_synthetic
from alflow.loadgen.endpoints import Sampling
from alflow.loadgen.spec import LoadSpec, Target
from alflow.measure import measure, window_stats
from alflow.metrics.dialects import SpeculativeInfo
from alflow.metrics.readers import get_dialect
from alflow.workloads import random_workload_sessions

PREFLIGHT_REQUESTS = 16
PREFLIGHT_CONCURRENCY = 8
PREFLIGHT_OUTPUT_TOKENS = 96
REAL_PREFLIGHT_REQUESTS = 4
REAL_PREFLIGHT_OUTPUT_TOKENS = 32
PREFLIGHT_TIMEOUT_S = 60.0
"""A burst request's timeout (and stall timeout), unless the run's own are shorter."""
"""Before M0/M1 (real acceptance) the burst only has to show speculation running with K: smaller."""
PREFLIGHT_ABS_TOL = 0.05
"""The smallest allowed deviation of a pre-flight's AL from the expected one (a burst is short)."""


class PreflightError(AlflowError):
    """The server does not run the configuration asked for (the message names the likely causes)."""


@dataclass(frozen=True)
class Expectation:
    """What the server should show: K, the synthetic distribution (None: real acceptance), and hints."""

    k: int
    distribution: AcceptanceDistribution | None = None
    hints: tuple[str, ...] = ()
    """Likely causes, from the framework's recipe, when the knob did not take effect."""
    drafts_optional: bool = False
    """Real acceptance with a drafter that may propose nothing on random prompts (n-gram): no steps is no failure."""
    spec_method: str | None = None
    """The speculative method as the server names it where it reports one (TensorRT-LLM's ``decoding_type``)."""


@dataclass(frozen=True)
class PreflightResult:
    """What the burst showed and the verdict."""

    passed: bool
    message: str
    al: float | None
    expected_al: float | None
    allowed: float | None
    steps: int
    requests: int
    duration_s: float
    speculative_info: SpeculativeInfo | None = None


def judge(
    stats: SpecStats | None,
    error: str | None,
    info: SpeculativeInfo | None,
    expect: Expectation,
    subject: str,
) -> tuple[bool, str, float | None, float | None]:
    """The verdict on a burst: (passed, message, expected AL, allowed deviation). Pure: no I/O."""
    problems: list[str] = []
    expected: float | None = None
    allowed: float | None = None
    if info is not None:
        if info.enabled is False:
            problems.append(f"the server reports speculation off ({info})")
        if (
            info.method is not None
            and expect.spec_method is not None
            and info.method.lower() != expect.spec_method.lower()
        ):
            problems.append(
                f"the server runs speculative method {info.method!r}, not {expect.spec_method!r} ({info})"
            )
        if info.num_tokens is not None and info.num_tokens != expect.k:
            problems.append(f"the server drafts {info.num_tokens} tokens per step, not K={expect.k} ({info})")
    if stats is None or not stats.observed:
        reason = error or (stats.note if stats else "no statistics")
        if stats is not None and expect.drafts_optional and expect.distribution is None:
            message = f"pre-flight passed for {subject}: no drafts on random prompts (n-gram: {reason})"
            return True, message, None, None
        problems.append(f"no speculative steps observed ({reason})")
    else:
        positions = stats.accepted_per_position
        if positions is not None and len(positions) != expect.k:
            problems.append(
                f"the server's per-position counters have {len(positions)} positions, not K={expect.k}"
            )
        elif stats.k is not None and stats.k != expect.k:
            problems.append(f"the counters show K={stats.k}, not K={expect.k}")
        if expect.distribution is not None:
            verdict = audit_synthetic(stats, expect.distribution, abs_tol=PREFLIGHT_ABS_TOL, subject=subject)
            details = verdict.details
            expected = getattr(details, "expected_al", None)
            allowed = getattr(details, "allowed", None)
            if not verdict.passed:
                problems.append(verdict.message.split(": ", 1)[-1])
    al = None if stats is None else stats.al
    if problems:
        causes = "; ".join(expect.hints) if expect.hints else "check the server log"
        message = f"pre-flight FAILED for {subject}: " + "; ".join(problems) + f". Likely causes: {causes}"
        return False, message, expected, allowed
    what = "synthetic AL" if expect.distribution is not None else "AL (real acceptance)"
    steps = 0 if stats is None else stats.num_drafts
    al_text = "n/a" if al is None else f"{al:.4f}"
    message = f"pre-flight passed for {subject}: {what} {al_text} over {steps} steps, K={expect.k}"
    if expected is not None and allowed is not None:
        message += f" (expected {expected:.4f} +/-{allowed:.4f})"
    return True, message, expected, allowed


async def run_preflight(
    base_url: str,
    model: str,
    metrics_urls: tuple[str, ...],
    dialect: str,
    expect: Expectation,
    *,
    subject: str,
    timeout_s: float = PREFLIGHT_TIMEOUT_S,
    api_key: str | None = None,
) -> PreflightResult:
    """Send the burst (random prompts, fixed output length, ``ignore_eos``) and judge it.

    The window is exactly the burst (baseline scrape before it, final after every request finished),
    so request-level counters (SGLang, TensorRT-LLM's per-position ones) cover it in full. Each
    request is bounded by ``timeout_s``, and so is a stalled stream. ``api_key`` (never stored) goes with
    every request as ``Authorization: Bearer``; the scrapes go without it.
    """
    started = time.monotonic()
    requests, concurrency, output_tokens = burst(expect)
    # greedy, a fixed output length, ignore_eos: no run depends on the burst's text
    sampling = Sampling(max_tokens=output_tokens, temperature=0.0, min_tokens=output_tokens, ignore_eos=True)
    target = Target(base_url, model, "completions", sampling, api_key=api_key)
    workload = RandomWorkload(isl=64, osl=output_tokens, seed=7)
    sessions = random_workload_sessions(workload, requests, framework=dialect)
    spec = LoadSpec(
        concurrency=concurrency,
        num_prompts=requests,
        warmup=0,
        timeout_s=timeout_s,
        stall_timeout_s=timeout_s,
        keep_text=False,
    )
    m = await measure(
        sessions,
        target,
        spec,
        metrics_url=metrics_urls,
        dialect=dialect,
        k=expect.k,
        compute_stats=False,
    )
    stats: SpecStats | None = None
    error = m.aborted or m.stats_error
    failed = m.records.filter(pl.col("error").is_not_null())
    if failed.height:
        first = str(failed["error"][0])
        error = f"{error}; " if error else ""
        error += f"{failed.height} of {m.records.height} requests failed, the first with: {first[:300]}"
    if m.aborted is None and m.dialect is not None and m.baseline is not None and m.final is not None:
        stats, error = window_stats(m.dialect, m.baseline, m.final, m.series, expect.k, records=m.records)
    info = None if m.final is None else get_dialect(dialect).speculative_info(m.final)
    passed, message, expected, allowed = judge(stats, error, info, expect, subject)
    return PreflightResult(
        passed=passed,
        message=message,
        al=None if stats is None else stats.al,
        expected_al=expected,
        allowed=allowed,
        steps=0 if stats is None else stats.num_drafts,
        requests=m.records.height,
        duration_s=time.monotonic() - started,
        speculative_info=info,
    )


def burst(expect: Expectation) -> tuple[int, int, int]:
    """(requests, concurrency, output tokens): 16 x 96 tokens to judge a synthetic AL, 4 x 32 to see K run."""
    if expect.distribution is not None:
        return PREFLIGHT_REQUESTS, PREFLIGHT_CONCURRENCY, PREFLIGHT_OUTPUT_TOKENS
    return REAL_PREFLIGHT_REQUESTS, REAL_PREFLIGHT_REQUESTS, REAL_PREFLIGHT_OUTPUT_TOKENS
