"""The demo: M0 -> M1 -> M2 on the built-in simulated engine, in a few minutes on a laptop.

- M0 calibrates a simulated model for K = 1..3 on the bundled demo prompts (coding category);
- M1 gates two simulated "frameworks" against that reference: one healthy (vLLM dialect) that
  passes, one with a degraded speculative implementation (SGLang dialect, acceptance quality 0.5)
  that must fail the AL gate;
- M2 benchmarks K = 3 with synthetic acceptance at the reference AL over a small concurrency sweep,
  in real time on the H200/70B timing profile, and audits the achieved AL.

Everything it produces is labelled simulated.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger

from alflow.config import (
    BenchmarkParams,
    CalibrateParams,
    DemoParams,
    GateParams,
    Gsm8kSettings,
    LoadConfig,
    ModelSpec,
    RandomWorkload,
    SamplingParams,
    ServerConfig,
    ServerDialect,
    ServerPlacement,
    SpeedBenchWorkload,
)
from alflow.evals.run import bundled_gsm8k
from flows.benchmark import benchmark
from flows.calibrate import calibrate
from flows.gate import gate


def _sim(*extra: str) -> tuple[str, ...]:
    return ("--answer-key", str(bundled_gsm8k("test")), "--answer-accuracy", "0.95", "--seed", "7", *extra)


@flow(name="demo")
def demo(params: DemoParams | None = None) -> dict[str, Any]:
    """M0 -> M1 (one pass, one fail) -> M2 on the simulated engine; returns where everything is."""
    p = params or DemoParams()
    log = get_run_logger()
    root = Path(p.results_root)
    reference = str(root / "reference-sim.yaml")
    placement = ServerPlacement(results_root=str(root))
    model = ModelSpec(
        id="demo-llama-70b", sampling_thinking_off=SamplingParams(temperature=0.0, max_tokens=512)
    )
    prompts = SpeedBenchWorkload(category="coding", max_tokens=512)
    fast = _sim("--time-scale", "0")

    m0 = calibrate(
        CalibrateParams(
            models=(model,),
            ks=p.ks,
            server=ServerConfig(framework="sim", model=model.id, extra_args=fast),
            placement=placement,
            workload=prompts,
            load=LoadConfig(concurrency=8),
            reference_path=reference,
        )
    )
    gates: dict[str, Any] = {}
    frameworks: tuple[tuple[str, ServerDialect, str], ...] = (
        ("healthy-vllm", "vllm", "1.0"),
        ("degraded-sglang", "sglang", "0.5"),
    )
    for name, dialect, quality in frameworks:
        state = gate(
            GateParams(
                model=model,
                k=p.benchmark_k,
                server=ServerConfig(
                    framework="sim",
                    model=model.id,
                    sim_dialect=dialect,
                    extra_args=(*fast, "--acceptance-quality", quality),
                ),
                placement=placement,
                reference_path=reference,
                workload=prompts,
                load=LoadConfig(concurrency=8),
                gsm8k=Gsm8kSettings(limit=p.gsm8k_limit),
            ),
            return_state=True,
        )
        gates[name] = {"passed": state.is_completed(), "message": str(state.message or "")}
        log.info(
            "M1 %s: %s", name, "passed" if state.is_completed() else f"FAILED as expected: {state.message}"
        )
    m2 = benchmark(
        BenchmarkParams(
            model=model,
            k=p.benchmark_k,
            server=ServerConfig(
                framework="sim", model=model.id, extra_args=_sim("--profile", "h200-llama70b")
            ),
            placement=placement,
            reference_path=reference,
            workload=RandomWorkload(isl=512, osl=128),
            concurrencies=p.concurrencies,
        )
    )
    return {"m0": m0, "m1": gates, "m2": m2, "reference_path": reference, "results_root": str(root)}
