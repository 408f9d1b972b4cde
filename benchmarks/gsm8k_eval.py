"""Benchmark: the full GSM8K test set (1,319 questions, 5-shot) against the sim at --time-scale 0.

Target (issue 7): the whole run completes in under 60 s. Prints one table row per concurrency.

    .venv/bin/python benchmarks/gsm8k_eval.py [--concurrency 64 128 256]
"""

from __future__ import annotations

import argparse
import asyncio
import time

from alflow.evals.run import Gsm8kRequest, bundled_gsm8k, evaluate_gsm8k
from alflow.sim.process import SimProcess


async def one(base_url: str, concurrency: int) -> tuple[float, int, float, float]:
    started = time.perf_counter()
    result = await evaluate_gsm8k(Gsm8kRequest(base_url, "sim/llama-3.3-70b", concurrency=concurrency))
    took = time.perf_counter() - started
    return took, len(result.results), result.strict.accuracy, result.flexible.accuracy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[64, 128, 256])
    args = parser.parse_args()
    sim_args = ["--time-scale", "0", "--answer-key", str(bundled_gsm8k("test")), "--answer-accuracy", "0.9"]
    print(
        f"{'concurrency':>11} {'questions':>9} {'seconds':>8} {'questions/s':>11} {'strict':>7} {'flexible':>8} {'<60 s':>6}"
    )
    with SimProcess(sim_args) as sim:
        for c in args.concurrency:
            took, n, strict, flexible = asyncio.run(one(sim.base_url, c))
            ok = "yes" if took < 60 else "NO"
            print(f"{c:>11} {n:>9} {took:>8.2f} {n / took:>11.1f} {strict:>7.4f} {flexible:>8.4f} {ok:>6}")


if __name__ == "__main__":
    main()
