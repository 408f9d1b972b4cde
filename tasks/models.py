"""Model preparation task: a thin wrapper over :func:`alflow.models.prepare_model` (idempotent, so it may retry)."""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from alflow.models import PreparedModel
from alflow.models import prepare_model as _prepare
from alflow_tasks.retry import retry_transient


@task(
    name="prepare_model",
    retries=1,
    retry_delay_seconds=10,
    retry_condition_fn=retry_transient,
    cache_policy=NO_CACHE,
)
def prepare_model(name: str, python: str | None = None) -> PreparedModel:
    """Prepare (or verify) the small real model ``name`` in the user cache; returns where it is and its manifest."""
    result = _prepare(name, python=python)
    get_run_logger().info(
        "model %s %s at %s (%s)",
        name,
        "verified" if result.reused else "prepared",
        result.path,
        result.manifest.source_line(),
    )
    return result
