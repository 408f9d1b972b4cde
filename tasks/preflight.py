"""The pre-flight step: a short burst that proves the server runs the configuration asked for (never retried)."""

from __future__ import annotations

from prefect import get_run_logger

from alflow.acceptance.synthetic import AcceptanceDistribution
from alflow.config import ServerConfig, SpecMethod
from alflow.frameworks.recipes import preflight_hints, speculative_label
from alflow.preflight import Expectation, PreflightResult, run_preflight
from alflow.util.eventloop import run_stoppable
from alflow_infra.runners import ServerHandle
from alflow_infra.runners.base import handle_api_key


def preflight(
    handle: ServerHandle,
    server: ServerConfig,
    k: int,
    distribution: AcceptanceDistribution | None,
    subject: str,
    timeout_s: float,
) -> PreflightResult:
    """Send the burst and judge it (:mod:`alflow.preflight`); the likely causes come from the recipe.

    Synthetic acceptance (``distribution``): 16 requests of 96 tokens, the AL checked against the
    scheme. Real acceptance (M0, M1): 4 requests of 32 tokens, checking only that speculation runs with K.
    """
    log = get_run_logger()
    spec = server.speculative
    ngram = spec is not None and spec.method is SpecMethod.NGRAM
    expect = Expectation(
        k=k,
        distribution=distribution,
        hints=preflight_hints(server),
        drafts_optional=ngram and distribution is None,
        spec_method=speculative_label(server),
    )
    result = run_stoppable(
        run_preflight(
            handle.base_url,
            handle.model,
            handle.all_metrics_urls,
            handle.dialect,
            expect,
            subject=subject,
            timeout_s=timeout_s,
            api_key=handle_api_key(handle),
        )
    )
    (log.info if result.passed else log.error)("%s (%.1f s)", result.message, result.duration_s)
    return result
