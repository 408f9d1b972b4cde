"""How alflow's flows run elsewhere: prefect.yaml at the root, and serve.py (no worker needed)."""
