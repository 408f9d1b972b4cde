"""Small stored runs (M0, M1, M2) written with RunWriter for the report tests; deterministic numbers."""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl

from alflow.acceptance.synthetic import distribution
from alflow.gates import AUDIT_ABS_TOL, AUDIT_Z
from alflow.results.store import RunWriter

EVIL = '<script>alert("x")</script>'
MS = 1_000_000
STARTED = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def _entry(model: str, thinking: str, k: int, al: float, steps: int) -> dict[str, Any]:
    """An entry as the M0 flow stores it (``ReferenceEntry.model_dump(mode="json", exclude_none=True)``)."""
    accepted = round((al - 1) * steps)
    rates = [min(1.0, max(0.0, (al - 1) - i * 0.2)) for i in range(k)]
    total = sum(rates)
    rates = [r * (al - 1) / total for r in rates] if total else rates
    entry: dict[str, Any] = {
        "model": model,
        "method": "mtp",
        "thinking": thinking,
        "k": k,
        "al": 1 + accepted / steps,
        "per_position_rates": rates,
        "num_drafts": steps,
        "accepted_tokens": accepted,
        "ci_low": 1 + accepted / steps - 0.05,
        "ci_high": 1 + accepted / steps + 0.05,
        "provenance": {
            "framework": "vllm",
            "model_revision": "r1",
            "dataset": "nvidia/SPEED-Bench",
            "dataset_hash": "0" * 64,
            "sampling": {"temperature": 0.0, "max_tokens": 512},
            "prompt_count": 80,
            "date": "2026-11-30T05:00:00Z",
            "code_version": "alflow test",
        },
    }
    return entry


def write_m0(
    root: Path,
    *,
    model: str = "org/model-a",
    simulated: bool = False,
    scrapes: Mapping[str, Any] | None = None,
) -> str:
    """An M0 run: thinking on/off for K=1..3 (coding), and a diff against the previous table."""
    entries = [
        _entry(model, thinking, k, al, 1000)
        for thinking, als in (("on", (1.8, 2.4, 2.8)), ("off", (1.7, 2.2, 2.5)))
        for k, al in zip((1, 2, 3), als, strict=True)
    ]
    entries.append({**_entry(model, "on", 4, 3.0, 500), "provenance": {"framework": "vllm"}})  # unreadable
    diff = {
        "changed": True,
        "table_changes": [],
        "rows": [
            {
                "model": model,
                "method": "mtp",
                "thinking": "on",
                "k": 1,
                "status": "changed",
                "old_al": 1.75,
                "new_al": 1.8,
                "delta": 0.05,
                "rel_delta": 0.05 / 1.75,
                "provenance_changes": ["image: 'a' -> 'b'"],
            },
            {
                "model": model,
                "method": "mtp",
                "thinking": "off",
                "k": 3,
                "status": "added",
                "old_al": None,
                "new_al": 2.5,
                "delta": None,
                "rel_delta": None,
                "provenance_changes": [],
            },
        ],
    }
    with RunWriter(
        root,
        "m0",
        run_id="m0run0000001",
        config={
            "models": [{"id": model}],
            "ks": [1, 2, 3],
            "workload": {"kind": "speed-bench", "category": "coding"},
            "server": {"framework": "vllm", "model": model},
        },
        provenance={"code_version": "alflow test", "host": {"host": "h", "gpus": [{"name": "NVIDIA H200"}]}},
        simulated=simulated,
        started=STARTED,
    ) as w:
        if scrapes is not None:
            w.write_json("scrapes", dict(scrapes))
        w.write_summary(
            {
                "flow": "m0",
                "reference_path": "references/x.yaml",
                "entries": entries,
                "cached_points": [f"{model} K=1"],
                "diff": diff,
            }
        )
    return w.dir


def write_m1(
    root: Path,
    *,
    model: str = "org/model-a",
    passed: bool = True,
    al: float = 3.1,
    category: str = "coding",
    run_id: str = "m1run0000001",
) -> str:
    """An M1 run: AL verdict with CI and threshold, GSM8K verdict and scores, one spec_stats row."""
    threshold = 2.95
    verdicts = [
        {
            "gate": "al",
            "passed": passed,
            "message": f"AL gate {'passed' if passed else 'FAILED'} for {model}",
            "threshold": threshold,
            "reference_al": 3.05,
            "rule": "reference 3.05 - max(0.05, 0.03 x 3.05)",
            "al": al,
            "ci": {"low": al - 0.04, "high": al + 0.04, "level": 0.95, "method": "histogram-iid"},
            "compared": al + 0.04,
        },
        {
            "gate": "gsm8k-accuracy",
            "passed": True,
            "message": f"GSM8K accuracy gate passed for {model}",
            "threshold": 0.9,
            "failing": [],
            "subset": True,
            "scores": {"strict-match": 0.93, "flexible-extract": 0.94},
        },
    ]
    gsm8k = {
        "scores": {
            "strict-match": {
                "name": "strict-match",
                "accuracy": 0.93,
                "correct": 186,
                "total": 200,
                "ci_low": 0.88,
                "ci_high": 0.96,
            },
            "flexible-extract": {
                "name": "flexible-extract",
                "accuracy": 0.94,
                "correct": 188,
                "total": 200,
                "ci_low": 0.89,
                "ci_high": 0.97,
            },
        },
        "notes": ["seeded subset: 200 of 1319 questions (seed 1234)"],
        "failed_requests": 0,
    }
    with RunWriter(
        root,
        "m1",
        run_id=run_id,
        config={
            "model": {"id": model},
            "method": "mtp",
            "k": 3,
            "thinking": "off",
            "server": {"framework": "sglang", "image": "lmsysorg/sglang:v0.5"},
            "workload": {"category": category},
        },
        provenance={"code_version": "alflow test"},
        started=STARTED,
    ) as w:
        w.write_table(
            "spec_stats",
            pl.DataFrame(
                [
                    {
                        "num_drafts": 10,
                        "draft_tokens": 30,
                        "accepted_tokens": round((al - 1) * 10),
                        "k": 3,
                        "al": 1 + round((al - 1) * 10) / 10,
                        "acceptance_rate": 0.7,
                        "per_position_rates": [0.9, 0.7, 0.5],
                        "reference_al": 3.05,
                    }
                ]
            ),
        )
        w.write_summary(
            {
                "flow": "m1",
                "subject": f"sglang {model} mtp K=3",
                "passed": passed,
                "verdicts": verdicts,
                "client": {"completed": 10, "failed": 0},
                "gsm8k": gsm8k,
            }
        )
    return w.dir


def _request(
    rid: int,
    conc: int,
    ttft_ms: int,
    e2el_ms: int,
    out: int,
    *,
    warmup: bool = False,
    error: str | None = None,
) -> dict[str, Any]:
    mid = (ttft_ms + e2el_ms) // 2
    return {
        "request_id": rid,
        "warmup": warmup,
        "start_ns": 0,
        "first_token_ns": ttft_ms * MS,
        "end_ns": e2el_ms * MS,
        "chunk_ns": [ttft_ms * MS, mid * MS, e2el_ms * MS],
        "input_tokens": 100,
        "output_tokens": out,
        "error": error,
        "concurrency": conc,
    }


def write_m2(
    root: Path,
    *,
    model: str = "org/model-a",
    simulated: bool = True,
    framework: str = "vllm",
    run_id: str = "m2run0000001",
    valid: bool = True,
    shape: Mapping[str, Any] | None = None,
) -> str:
    """An M2 run at concurrency 4 (golden numbers) and 8, with request records and the audit's figures.

    ``shape`` adds the shape test's fields (``fit_p_value``, ``histogram_observed``, ...) to the first point.
    """
    dist = distribution("vllm", 3, al=2.5)

    def allowed(steps: int) -> float:  # as alflow.gates.audit_synthetic stores it
        return max(AUDIT_ABS_TOL, AUDIT_Z * dist.std / math.sqrt(steps))

    points = [
        {
            "concurrency": 4,
            "k": 3,
            "framework": framework,
            "target_al": 2.5,
            "achieved_al": 2.51,
            "valid": True,
            "audit": "synthetic audit passed for x: achieved AL 2.5100, target 2.5000 (+/-0.0329, 2500 steps)",
            "num_drafts": 2500,
            "expected_al": dist.mean,
            "allowed_deviation": allowed(2500),
            "nodes": 1,
            "partial": False,
            "completed": 2,
            "failed": 1,
            "output_throughput": 100.0,
            "output_throughput_per_gpu": 100.0,
            "total_token_throughput_per_gpu": 300.0,
            "median_interactivity_tokens_per_s": 66.66666666666667,
            "median_tpot_ms": 15.0,
            "median_ttft_ms": 200.0,
            "p99_ttft_ms": 298.0,
            "median_itl_ms": 750.0,
            "tokens_per_chunk": 33.7,
            "duration_s": 4.0,
        },
        {
            "concurrency": 8,
            "k": 3,
            "framework": framework,
            "target_al": 2.5,
            "achieved_al": 2.4 if not valid else 2.49,
            "valid": valid,
            "audit": f"synthetic audit {'passed' if valid else 'FAILED'} for x (+/-0.0200, 9000 steps)",
            "num_drafts": 9000,
            "expected_al": dist.mean,
            "allowed_deviation": allowed(9000),
            "nodes": 1,
            "partial": False,
            "completed": 2,
            "failed": 0,
            "output_throughput": 180.0,
            "output_throughput_per_gpu": 180.0,
            "total_token_throughput_per_gpu": 500.0,
            "median_interactivity_tokens_per_s": 50.0,
            "median_tpot_ms": 20.0,
            "median_ttft_ms": 400.0,
            "p99_ttft_ms": 500.0,
            "median_itl_ms": 800.0,
            "tokens_per_chunk": 40.0,
            "duration_s": 4.0,
        },
    ]
    if shape is not None:
        points[0] = {**points[0], **shape}
    requests = [
        _request(0, 4, 50, 90, 5, warmup=True),
        _request(1, 4, 100, 1100, 101),
        _request(2, 4, 300, 2300, 101),
        _request(3, 4, 10, 20, 3, error="HTTP 500"),
        _request(4, 8, 300, 2300, 101),
        _request(5, 8, 500, 3000, 101),
    ]
    with RunWriter(
        root,
        "m2",
        run_id=run_id,
        config={
            "model": {"id": model},
            "method": "mtp",
            "k": 3,
            "audit_abs_tol": 0.02,
            "server": {"framework": framework, "parallelism": {"tp": 1, "pp": 1, "dp": 1, "ep": 1}},
            "workload": {"kind": "random", "isl": 1024, "osl": 1024},
            "concurrencies": [4, 8],
        },
        provenance={
            "code_version": "alflow test",
            "host": {"host": "h", "gpus": [{"name": "NVIDIA H200"}]},
            "server": {
                "base_url": "http://127.0.0.1:8000",
                "image": "vllm/vllm-openai:v0.11.0",
                "image_digest": "sha256:abc",
                "provenance": {"framework": framework},
            },
            "scheme": "vllm",
        },
        simulated=simulated,
        started=STARTED,
    ) as w:
        w.write_table("requests", pl.DataFrame(requests))
        w.write_table("spec_stats", pl.DataFrame(points))
        w.write_summary(
            {
                "flow": "m2",
                "target_al": 2.5,
                "scheme": "vllm",
                "points": points,
                "failures": [] if valid else ["synthetic audit FAILED for x"],
            }
        )
    return w.dir
