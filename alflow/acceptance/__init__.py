"""Acceptance length: statistics, synthetic-acceptance schemes and knobs, the reference table."""
