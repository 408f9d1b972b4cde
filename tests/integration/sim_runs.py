"""A quick M2 against the sim under the session's Prefect harness, and the artifacts a flow run made.

Shared by the integration tests that look at what one small sim M2 run leaves behind (its report, its
artifacts' keys and texts, its report link).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from uuid import UUID

from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, ArtifactFilterType
from prefect.client.schemas.objects import Artifact

from alflow.config import BenchmarkParams, ModelSpec, RandomWorkload, ServerConfig, ServerPlacement
from alflow_flows.benchmark import benchmark


def quick_m2(
    model: ModelSpec,
    server: ServerConfig,
    results_root: Path,
    *,
    k: int,
    target_al: float,
    isl: int,
    osl: int,
) -> Any:
    """A completed sim M2 run's state: concurrency 2, two prompts, no warm-up (asserted complete)."""
    params = BenchmarkParams(
        model=model,
        k=k,
        server=server,
        placement=ServerPlacement(results_root=str(results_root)),
        target_al=target_al,
        workload=RandomWorkload(isl=isl, osl=osl),
        concurrencies=(2,),
        prompts_per_concurrency=2,
        warmup_per_concurrency=0,
    )
    state = benchmark(params=params, return_state=True)
    assert state.is_completed(), state.message
    return state


def flow_run_of(state: Any) -> UUID:
    """The flow run id behind a flow's returned state."""
    return UUID(str(state.state_details.flow_run_id))


def run_artifacts(state: Any, *, kind: str | None = None) -> list[Artifact]:
    """The artifacts the flow run of ``state`` made (only those of type ``kind`` when given)."""
    artifact_filter = ArtifactFilter(
        flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_of(state)]),
        type=None if kind is None else ArtifactFilterType(any_=[kind]),
    )
    with get_client(sync_client=True) as client:
        return client.read_artifacts(artifact_filter=artifact_filter)
