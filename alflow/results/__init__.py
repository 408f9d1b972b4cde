"""Results: the run store (parquet + manifest) and provenance."""
