"""Prefect flows: M0 calibration, M1 gate, M2 benchmark, the K sweep, and the demo."""
