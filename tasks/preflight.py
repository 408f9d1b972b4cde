"""The pre-flight task: a short burst that proves the server runs the configuration asked for (never retried)."""

from __future__ import annotations

import asyncio

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from alflow.acceptance.synthetic import AcceptanceDistribution
from alflow.config import ServerConfig
from alflow.loadgen.runner import Target
from alflow.preflight import Expectation, PreflightResult, preflight_sampling, run_preflight
from infra.recipes import preflight_hints
from infra.runners import ServerHandle


@task(name="preflight", retries=0, cache_policy=NO_CACHE)
def preflight(
    handle: ServerHandle,
    server: ServerConfig,
    k: int,
    distribution: AcceptanceDistribution | None,
    *,
    subject: str,
    timeout_s: float = 60.0,
) -> PreflightResult:
    """Send the burst and judge it (:mod:`alflow.preflight`); the likely causes come from the recipe."""
    log = get_run_logger()
    expect = Expectation(k=k, distribution=distribution, hints=preflight_hints(server))
    target = Target(handle.base_url, handle.model, "completions", preflight_sampling(k))
    result = asyncio.run(
        run_preflight(
            target, handle.all_metrics_urls, handle.dialect, expect, subject=subject, timeout_s=timeout_s
        )
    )
    (log.info if result.passed else log.error)("%s (%.1f s)", result.message, result.duration_s)
    return result
