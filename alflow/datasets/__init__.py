"""Workloads: SPEED-Bench, GSM8K and random-token prompts turned into request sessions."""
