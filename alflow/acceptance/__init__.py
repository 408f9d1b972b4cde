"""Acceptance length: statistics, synthetic-acceptance schemes and knobs (pure math: imports nothing of alflow but its errors)."""
