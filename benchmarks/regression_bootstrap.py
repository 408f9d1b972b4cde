"""How long one point's regression check takes: the two-level bootstrap over per-request values.

Prints one row per (requests per run, history runs, resamples): the wall time of
:func:`alflow.methods.regression.compare_metrics` (TPOT and tokens/s per request together), best of 3.
Run: ``.venv/bin/python benchmarks/regression_bootstrap.py``.
"""

from __future__ import annotations

import random
import time

import polars as pl

from alflow.config import RegressionSettings
from alflow.methods.regression import compare_metrics


def _frame(rng: random.Random, n: int, scale: float = 1.0) -> pl.DataFrame:
    tpot = [scale * rng.lognormvariate(3.0, 0.2) for _ in range(n)]
    return pl.DataFrame({"tpot_ms": tpot, "tokens_per_s_per_request": [1000.0 / t for t in tpot]})


def main() -> None:
    """Time the check for a few sizes."""
    print(f"{'requests':>9} {'history':>8} {'resamples':>10} {'seconds':>8}  verdict (TPOT +5%)")
    for n, runs, resamples in (
        (1000, 7, 2000),
        (1000, 7, 1000),
        (300, 7, 2000),
        (1000, 3, 2000),
        (5000, 7, 2000),
    ):
        rng = random.Random(0)
        history = [_frame(rng, n) for _ in range(runs)]
        current = _frame(rng, n, 1.05)
        settings = RegressionSettings(resamples=resamples)
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            got = compare_metrics(current, history, settings)
            best = min(best, time.perf_counter() - start)
        print(f"{n:>9} {runs:>8} {resamples:>10} {best:>8.3f}  {got[0].outcome} {got[0].change:+.1%}")


if __name__ == "__main__":
    main()
