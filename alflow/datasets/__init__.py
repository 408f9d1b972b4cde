"""Workloads: SPEED-Bench, GSM8K and random-token prompts turned into request sessions."""

from alflow.datasets.types import Session, Turn

__all__ = ["Session", "Turn"]
