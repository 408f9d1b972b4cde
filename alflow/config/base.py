"""The base of every configuration model (:class:`StrictModel`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """Base of every config model: frozen, unknown fields rejected, defaults validated.

    Validation errors never echo the input (``hide_input_in_errors``): a refused value may be a secret,
    and Prefect stores the text of a failed parameter validation. No NaN or infinity anywhere; config
    files are validated in strict mode as well (:func:`alflow.yamlfile.load_yaml_model`).
    """

    model_config = ConfigDict(
        frozen=True, extra="forbid", validate_default=True, hide_input_in_errors=True, allow_inf_nan=False
    )
