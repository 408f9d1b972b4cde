"""Server metrics (Prometheus scraping, framework dialects) and client-side metrics."""
