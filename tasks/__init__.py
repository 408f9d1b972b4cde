"""Prefect tasks: thin wrappers over alflow and infra with retries, caching and timeouts."""
