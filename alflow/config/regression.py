"""How an M2 run is compared with its series' recent history (:mod:`alflow.methods.regression`)."""

from __future__ import annotations

from typing import Self

from pydantic import Field, model_validator

from alflow.config.base import StrictModel


class RegressionSettings(StrictModel):
    """The regression check after each M2 run: which history, which test, how big a change matters."""

    enabled: bool = Field(
        True,
        description=(
            "After the run stores its results, compare every point with the same series' last good runs in the "
            "same results root and store the verdicts (regression.json); a regressed point emits the Prefect "
            "event alflow.regression.detected. Never fails the run."
        ),
    )
    history_runs: int = Field(
        7,
        ge=1,
        le=100,
        description="History: the last N good runs of the same series (same framework, image "
        "repository, model, K, concurrency, thinking mode) before this one.",
    )
    min_history: int = Field(
        3,
        ge=1,
        le=100,
        description="Fewer good history runs than this: the point's verdict is 'not enough history'.",
    )
    threshold: float = Field(
        0.03,
        gt=0.0,
        le=1.0,
        description=(
            "Practical threshold on the relative change of a median (0.03 = 3%): a point is regressed or improved "
            "only when the change's whole interval is on one side of zero AND the change is at least this large."
        ),
    )
    resamples: int = Field(
        2000, ge=200, le=20_000, description="Bootstrap resamples of the interval of the relative change."
    )
    confidence: float = Field(
        0.95, gt=0.5, lt=1.0, description="Confidence level of the bootstrap interval (0.95: 2.5%..97.5%)."
    )
    seed: int = Field(0, ge=0, description="Seed of the bootstrap: the same data give the same interval.")

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.min_history > self.history_runs:
            raise ValueError(
                f"regression.min_history={self.min_history} is more than history_runs={self.history_runs}: "
                "no point could ever be compared"
            )
        return self
