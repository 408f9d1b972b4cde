"""Per-model GSM8K accuracy thresholds: a YAML file with a default and per-model overrides.

File format::

    default: 0.90
    models:
      deepseek-ai/DeepSeek-R1: 0.94

A model missing from ``models`` gets ``default``. Both scores (strict-match and flexible-extract)
must reach the threshold for the accuracy gate to pass.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Final

from pydantic import Field

from alflow.config import StrictModel
from alflow.errors import InvalidInputError
from alflow.util.yamlfile import load_yaml_model

DEFAULT_THRESHOLD: Final = 0.90


class AccuracyThresholds(StrictModel):
    """GSM8K accuracy thresholds: a default and per-model values."""

    default: float = Field(DEFAULT_THRESHOLD, ge=0.0, le=1.0, description="Threshold for models not listed.")
    models: dict[str, float] = Field(
        default_factory=dict, description="Per-model thresholds, keyed by served model id."
    )

    def for_model(self, model: str) -> float:
        """The threshold for ``model`` (its own, else the default)."""
        value = self.models.get(model)
        return self.default if value is None else value


def tiny_thresholds_path() -> Path:
    """The bundled thresholds of the tiny CPU engine's model (``alflow demo --engine tiny``), with their basis."""
    return Path(str(resources.files("alflow.evals") / "data" / "thresholds-tiny.yaml"))


def vllm_cpu_thresholds_path() -> Path:
    """The bundled thresholds of the real-vLLM CPU demo's model (``alflow demo --engine vllm``), with their basis."""
    return Path(str(resources.files("alflow.evals") / "data" / "thresholds-vllm-cpu.yaml"))


def load_thresholds(path: str | os.PathLike[str] | None) -> AccuracyThresholds:
    """Read a thresholds YAML (None: the built-in default of 0.90); errors name the file and key."""
    if path is None:
        return AccuracyThresholds()
    p = Path(path)
    thresholds = load_yaml_model(p, AccuracyThresholds, what="thresholds file")
    for model, value in thresholds.models.items():
        if not 0.0 <= value <= 1.0:
            raise InvalidInputError(f"{p}: models.{model}: threshold {value} is outside [0, 1]")
    return thresholds
