"""Flow helpers that need no Prefect run: the sweep's best-K summary, `alflow run` config errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from flows.sweep import best_k

ALFLOW = str(Path(sys.executable).parent / "alflow")


def test_best_k_by_throughput_and_by_interactivity() -> None:
    points = [
        {
            "k": 1,
            "concurrency": 4,
            "valid": True,
            "output_throughput_per_gpu": 100.0,
            "median_interactivity_tokens_per_s": 90.0,
        },
        {
            "k": 3,
            "concurrency": 4,
            "valid": True,
            "output_throughput_per_gpu": 150.0,
            "median_interactivity_tokens_per_s": 80.0,
        },
        {
            "k": 5,
            "concurrency": 4,
            "valid": False,
            "output_throughput_per_gpu": 999.0,
            "median_interactivity_tokens_per_s": 999.0,
        },
        {
            "k": 1,
            "concurrency": 64,
            "valid": True,
            "output_throughput_per_gpu": 900.0,
            "median_interactivity_tokens_per_s": 20.0,
        },
    ]
    best = best_k(points)
    assert best[4]["best_k_throughput"] == 3
    assert best[4]["best_k_interactivity"] == 1
    assert best[64]["best_k_throughput"] == 1


def test_alflow_run_names_the_bad_field(tmp_path: Path) -> None:
    config = tmp_path / "m2.yaml"
    config.write_text(
        "model: {id: m}\nk: 3\nserver: {framework: sim, model: m}\ntarget_al: 9.5\nconcurrencies: [0]\n"
    )
    out = subprocess.run(
        [ALFLOW, "run", "m2", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 2
    assert str(config) in out.stderr
    assert "concurrencies" in out.stderr or "target_al" in out.stderr
    missing = subprocess.run(
        [ALFLOW, "run", "m9", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert missing.returncode == 2
    assert "unknown flow 'm9'; known: m0, m1, m2, sweep" in missing.stderr
