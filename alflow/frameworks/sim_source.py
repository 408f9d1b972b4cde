"""Small value types shared by the recipes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from alflow.acceptance.runtime_k import RuntimeKKnob
from alflow.frameworks.versions import Capability


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
