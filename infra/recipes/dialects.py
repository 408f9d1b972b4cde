"""The real frameworks' recipes seen as dialects: endpoints and how knobs reach a server.

Used by the simulator recipe (which speaks one of these dialects) and by the external runner (which
needs a dialect's metrics path). Keyed by dialect name.
"""

from __future__ import annotations

from typing import Protocol

from alflow.config import ServerConfig
from infra.recipes.sglang import SglangRecipe
from infra.recipes.trtllm import TrtllmRecipe
from infra.recipes.types import SimSource
from infra.recipes.vllm import VllmRecipe


class DialectSource(Protocol):
    """A framework recipe seen from the simulator: endpoints and how knobs reach the server."""

    @property
    def health_path(self) -> str:
        """Health endpoint path."""
        ...

    @property
    def metrics_path(self) -> str:
        """Prometheus metrics path."""
        ...

    def sim_source(self, config: ServerConfig) -> SimSource:
        """Arguments and environment that carry the speculative config and knobs."""
        ...


DIALECTS: dict[str, DialectSource] = {
    "vllm": VllmRecipe(),
    "sglang": SglangRecipe(),
    "trtllm": TrtllmRecipe(),
}
"""The framework recipes by dialect name."""
