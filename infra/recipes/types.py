"""Small value types shared by the recipes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class SimSource:
    """How the simulator receives a framework's speculative config and knobs, in that framework's way.

    ``args`` are command-line arguments (vLLM's ``--speculative-config``), ``env`` environment
    variables (SGLang's and TensorRT-LLM's knobs), ``synthetic`` the rendered knobs for provenance.
    """

    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    synthetic: Mapping[str, object] | None = None
