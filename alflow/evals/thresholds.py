"""Per-model GSM8K accuracy thresholds: a YAML file with a default and per-model overrides.

File format::

    default: 0.90
    models:
      deepseek-ai/DeepSeek-R1: 0.94

A model missing from ``models`` gets ``default``. Both scores (strict-match and flexible-extract)
must reach the threshold for the accuracy gate to pass.
"""

from __future__ import annotations

import math
import os
from importlib import resources
from pathlib import Path
from typing import Final

from pydantic import Field, field_validator

from alflow.config import StrictModel
from alflow.errors import InvalidInputError
from alflow.util.yamlfile import load_yaml_model

DEFAULT_THRESHOLD: Final = 0.90
THRESHOLD_ALLOWED: Final = "a finite number in [0, 1]"
"""What a threshold may be, wherever it is given (the YAML's default and models, ``eval gsm8k --threshold``, the
flows' ``gsm8k.threshold``): NaN would pass every comparison's gate, -inf every score, and 5 could never pass."""


def threshold_problem(value: float) -> str | None:
    """None when ``value`` is :data:`THRESHOLD_ALLOWED`, else why not (``nan: must be a finite number in [0, 1]``)."""
    if isinstance(value, int | float) and math.isfinite(value) and 0.0 <= value <= 1.0:
        return None
    shown = f"{value:g}" if isinstance(value, float) else repr(value)  # -1e308 as -1e+308, not 309 digits
    return f"{shown}: must be {THRESHOLD_ALLOWED}"


def check_threshold(value: float, what: str) -> float:
    """``value`` unchanged, or :class:`InvalidInputError` naming ``what``, the value and what is allowed."""
    problem = threshold_problem(value)
    if problem is not None:
        raise InvalidInputError(f"{what} {problem}")
    return value


class AccuracyThresholds(StrictModel):
    """GSM8K accuracy thresholds: a default and per-model values."""

    default: float = Field(DEFAULT_THRESHOLD, description="Threshold for models not listed, in [0, 1].")
    models: dict[str, float] = Field(
        default_factory=dict, description="Per-model thresholds in [0, 1], keyed by served model id."
    )

    @field_validator("default")
    @classmethod
    def _default_allowed(cls, value: float) -> float:
        problem = threshold_problem(value)
        if problem is not None:
            raise ValueError(f"threshold {problem}")
        return value

    @field_validator("models")
    @classmethod
    def _models_allowed(cls, value: dict[str, float]) -> dict[str, float]:
        for model, threshold in value.items():
            problem = threshold_problem(threshold)
            if problem is not None:
                raise ValueError(f"{model}: threshold {problem}")
        return value

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
    return load_yaml_model(Path(path), AccuracyThresholds, what="thresholds file")
