"""Small value types shared by the recipes, and the plain metric families the simulator's emitters yield."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal

from prometheus_client.metrics_core import Metric

from alflow.acceptance.runtime_k import RuntimeKKnob
from alflow.frameworks.versions import Capability
from alflow.sim.dialects import counter_family, gauge_family, histogram_family
from alflow.sim.stats import Histogram

FamilyRow = (
    tuple[Literal["counter", "gauge"], str, str, float] | tuple[Literal["histogram"], str, str, Histogram]
)
"""One metric family of one sample: its kind, name, help text and value."""


def plain_families(
    rows: Iterable[FamilyRow | Metric], labels: dict[str, str], created: float | None
) -> Iterator[Metric]:
    """The family of each row, with ``labels`` (counters with their ``_created`` time ``created``); a family as is."""
    for row in rows:
        if isinstance(row, Metric):
            yield row
        elif row[0] == "histogram":
            yield histogram_family(row[1], row[2], labels, row[3])
        elif row[0] == "gauge":
            yield gauge_family(row[1], row[2], labels, row[3])
        else:
            yield counter_family(row[1], row[2], labels, row[3], created)


@dataclass(frozen=True)
class SimSource:
    """How the simulator receives a framework's speculative config and knobs, in that framework's way.

    ``args`` are command-line arguments (vLLM's ``--speculative-config``), ``env`` environment
    variables (SGLang's and TensorRT-LLM's knobs), ``synthetic`` the rendered knobs for provenance,
    ``requirements`` and ``version_paths`` the framework's release gates and where it says its version.
    """

    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    synthetic: Mapping[str, object] | None = None
    requirements: tuple[Capability, ...] = ()
    """What the configuration needs of the framework's release (checked against the live server's version)."""
    version_paths: tuple[str, ...] = ("/version",)
    """Where the framework says its version."""
    runtime_k: tuple[RuntimeKKnob, ...] = ()
    """The framework's runtime-varying-K knobs in the configuration (recorded; the recipe refuses them with
    synthetic acceptance)."""
