"""User configuration: pydantic models of everything a user of alflow configures.

Every model is frozen and forbids unknown fields, and every field has a description (it becomes the
Prefect UI form and the ``--help`` of the command line). Later modules extend this file: it is the
one home of user configuration.
"""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Annotated, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from alflow.acceptance.synthetic import K_MAX, K_MIN, SCHEMES, SyntheticTarget, get_scheme
from alflow.datasets.random_tokens import DEFAULT_VOCAB_SIZE
from alflow.fsutil import require_local_path
from alflow.loadgen.runner import DEFAULT_STALL_TIMEOUT_S
from alflow.redact import is_secret_flag, is_secret_name


class StrictModel(BaseModel):
    """Base of every config model: frozen, unknown fields rejected, defaults validated.

    Validation errors never echo the input (``hide_input_in_errors``): a refused value may be a secret,
    and Prefect stores the text of a failed parameter validation. No NaN or infinity anywhere; config
    files are validated in strict mode as well (:func:`alflow.yamlfile.load_yaml_model`).
    """

    model_config = ConfigDict(
        frozen=True, extra="forbid", validate_default=True, hide_input_in_errors=True, allow_inf_nan=False
    )


class SpecMethod(StrEnum):
    """Speculative decoding method."""

    MTP = "mtp"
    EAGLE3 = "eagle3"
    DRAFT_MODEL = "draft_model"
    NGRAM = "ngram"


class ThinkingMode(StrEnum):
    """Whether the model reasons before answering (toggled per request via the chat template)."""

    ON = "on"
    OFF = "off"


NumSpecTokens = Annotated[
    int, Field(ge=K_MIN, le=K_MAX, description="Number of speculative tokens K (1..16).")
]


class SamplingParams(StrictModel):
    """Sampling parameters sent with each request (None: the server's default)."""

    temperature: float = Field(0.0, ge=0.0, le=10.0, description="Sampling temperature; 0 is greedy.")
    top_p: float | None = Field(None, gt=0.0, le=1.0, description="Nucleus sampling mass.")
    top_k: int | None = Field(None, ge=-1, description="Top-k sampling; -1 or None disables it.")
    min_p: float | None = Field(
        None, ge=0.0, le=1.0, description="Minimum probability relative to the top token."
    )
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0, description="OpenAI presence penalty.")
    repetition_penalty: float | None = Field(None, gt=0.0, description="Multiplicative repetition penalty.")
    max_tokens: int = Field(4096, ge=1, description="Output token cap per request (always sent).")
    seed: int | None = Field(None, description="Per-request seed for reproducible sampling, where supported.")

    def request_fields(self) -> dict[str, float | int]:
        """The fields to put in an OpenAI-compatible request body (unset ones omitted)."""
        return {k: v for k, v in self.model_dump().items() if v is not None}


class ThinkingToggle(StrEnum):
    """How a model's chat template switches reasoning on and off."""

    ENABLE_THINKING = "enable_thinking"
    THINKING = "thinking"
    NONE = "none"


class ModelSpec(StrictModel):
    """A model under test and its provider-recommended sampling per thinking mode."""

    id: str = Field(min_length=1, description="Model id as served (e.g. a Hugging Face repo id).")
    revision: str = Field(
        "main", min_length=1, description="Model revision (commit hash for auditable runs)."
    )
    reasoning: bool = Field(False, description="Whether the model reasons (supports thinking on and off).")
    thinking_toggle: ThinkingToggle | None = Field(
        None,
        description=(
            "Chat-template switch for thinking: 'enable_thinking' (Qwen3 style, on by default), "
            "'thinking' (DeepSeek-V3.1 style, off by default) or 'none'; default: 'enable_thinking' for a "
            "reasoning model, 'none' otherwise."
        ),
    )
    sampling_thinking_on: SamplingParams = Field(
        default=SamplingParams(), description="Provider-recommended sampling with thinking on."
    )
    sampling_thinking_off: SamplingParams = Field(
        default=SamplingParams(), description="Provider-recommended sampling with thinking off."
    )

    def sampling(self, thinking: ThinkingMode) -> SamplingParams:
        """The recommended sampling for a thinking mode."""
        return self.sampling_thinking_on if thinking is ThinkingMode.ON else self.sampling_thinking_off

    @property
    def toggle(self) -> ThinkingToggle:
        """The thinking switch in effect (the default depends on ``reasoning``)."""
        if self.thinking_toggle is not None:
            return self.thinking_toggle
        return ThinkingToggle.ENABLE_THINKING if self.reasoning else ThinkingToggle.NONE

    def chat_template_kwargs(self, thinking: ThinkingMode) -> dict[str, bool]:
        """The ``chat_template_kwargs`` that select ``thinking`` for this model."""
        if self.toggle is ThinkingToggle.NONE:
            return {}
        return {self.toggle.value: thinking is ThinkingMode.ON}

    @model_validator(mode="after")
    def _toggle_needs_reasoning(self) -> Self:
        if not self.reasoning and self.toggle is not ThinkingToggle.NONE:
            raise ValueError(
                f"thinking_toggle={self.toggle.value!r} needs reasoning=true (a non-reasoning model has no thinking mode)"
            )
        return self


class SpeculativeConfig(StrictModel):
    """The speculative decoding method and its number of draft tokens."""

    method: SpecMethod = Field(description="Speculative method: mtp, eagle3, draft_model or ngram.")
    k: NumSpecTokens
    draft_model: str | None = Field(
        None, description="Drafter model id (required for draft_model and eagle3; unused for mtp and ngram)."
    )
    prompt_lookup_min: int | None = Field(None, ge=1, description="n-gram: minimum lookup window.")
    prompt_lookup_max: int | None = Field(None, ge=1, description="n-gram: maximum lookup window.")

    @model_validator(mode="after")
    def _check_method_fields(self) -> Self:
        if self.method in (SpecMethod.DRAFT_MODEL, SpecMethod.EAGLE3) and not self.draft_model:
            raise ValueError(f"method {self.method.value!r} needs draft_model (the drafter's model id)")
        if self.method is not SpecMethod.NGRAM and (self.prompt_lookup_min or self.prompt_lookup_max):
            raise ValueError("prompt_lookup_min/prompt_lookup_max apply only to method 'ngram'")
        lo, hi = self.prompt_lookup_min, self.prompt_lookup_max
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"prompt_lookup_min={lo} is larger than prompt_lookup_max={hi}")
        return self


class SyntheticAcceptance(StrictModel):
    """A synthetic-acceptance request: a target AL or explicit rates, and the scheme."""

    target_al: float | None = Field(
        None, description="Target acceptance length L, bonus token included (1 <= L <= K+1)."
    )
    rates: tuple[float, ...] | None = Field(
        None, description="Explicit unconditional per-position rates p_1..p_K (non-increasing, in [0, 1])."
    )
    scheme: str | None = Field(
        None,
        description=f"Scheme ({', '.join(SCHEMES)}); None: the framework's own default.",
    )

    @field_validator("scheme")
    @classmethod
    def _known_scheme(cls, value: str | None) -> str | None:
        if value is not None:
            get_scheme(value)
        return value

    @model_validator(mode="after")
    def _one_target(self) -> Self:
        if (self.target_al is None) == (self.rates is None):
            raise ValueError("give exactly one of target_al or rates")
        if self.target_al is not None and (not math.isfinite(self.target_al) or self.target_al < 1.0):
            raise ValueError(f"target_al={self.target_al!r} must be a finite number >= 1")
        return self

    def target(self, k: int) -> SyntheticTarget:
        """Validate against K and return the target (raises a clear error when out of range)."""
        return SyntheticTarget.of(k, al=self.target_al, rates=self.rates)


class GateTolerances(StrictModel):
    """How far below the reference AL a framework under test may fall (M1).

    Threshold ``= reference - max(abs_tol, rel_tol * reference)``.
    """

    abs_tol: float = Field(0.05, ge=0.0, description="Absolute AL tolerance below the reference.")
    rel_tol: float = Field(
        0.03, ge=0.0, lt=1.0, description="Relative AL tolerance (fraction of the reference)."
    )
    use_ci: Literal["point", "upper"] = Field(
        "upper",
        description=(
            "Compare the threshold with the AL point estimate ('point') or with the upper bound of its "
            "confidence interval ('upper': fail only when the AL is confidently below the threshold)."
        ),
    )
    confidence: float = Field(0.95, gt=0.5, lt=1.0, description="Confidence level of the AL interval.")
    accuracy_threshold: float = Field(
        0.90, ge=0.0, le=1.0, description="Default GSM8K accuracy both scores must reach."
    )

    def al_threshold(self, reference_al: float) -> float:
        """``reference - max(abs_tol, rel_tol * reference)``, never below 1."""
        return max(1.0, reference_al - max(self.abs_tol, self.rel_tol * reference_al))


# --- Server lifecycle (issue 5): what to start, and where it runs -------------------------------------

ServerFramework = Literal["vllm", "sglang", "trtllm", "sim", "tiny"]
ENGINE_NOTES: dict[str, str] = {
    "sim": "SIMULATED: numbers come from alflow's simulated engine, not a real GPU server.",
    "tiny": (
        "TINY CPU ENGINE: real measurements of a small model (alflow tiny serve: n-gram drafting on CPU), "
        "not of a GPU serving framework; compare them only with other tiny-engine runs."
    ),
}
"""The label each built-in engine's numbers carry in reports (frameworks not listed: none)."""
ServerDialect = Literal["vllm", "sglang", "trtllm"]


class Parallelism(StrictModel):
    """How the served model is split over GPUs (sizes of 1 mean "off")."""

    tp: int = Field(1, ge=1, description="Tensor-parallel size.")
    pp: int = Field(1, ge=1, description="Pipeline-parallel size.")
    dp: int = Field(
        1, ge=1, description="Data-parallel size (attention data parallel where the framework has it)."
    )
    ep: int = Field(
        1,
        ge=1,
        description="Expert-parallel size; 1 is off (vLLM: must equal TP x DP, its expert-parallel size).",
    )


def parallel_gpus(framework: str, parallelism: Parallelism, extra_args: tuple[str, ...] = ()) -> int:
    """GPUs one server instance occupies for ``parallelism`` under ``framework``'s rules.

    ``tp x pp x dp`` (vLLM: data-parallel ranks are extra GPUs; expert parallelism reuses them), except
    where data parallelism is *attention* DP over the TP ranks, which adds none: TensorRT-LLM
    (``enable_attention_dp``, dp = tp) and SGLang with ``--enable-dp-attention`` in ``extra_args``.
    For the simulator, pass its dialect.
    """
    par = parallelism
    attention_dp = framework == "trtllm" or (framework == "sglang" and "--enable-dp-attention" in extra_args)
    return par.tp * par.pp * (1 if attention_dp else par.dp)


class DisaggregatedRole(StrictModel):
    """One role (prefill or decode) of a disaggregated server: how many instances, on how many nodes each."""

    nodes: int = Field(1, ge=1, description="Nodes one instance of this role spans.")
    replicas: int = Field(
        1,
        ge=1,
        description="Instances of this role, each on its own nodes (instance i listens on the role's port + i).",
    )
    parallelism: Parallelism = Field(
        default=Parallelism(), description="How one instance of this role is split over its GPUs."
    )

    @property
    def total_nodes(self) -> int:
        """Nodes of every instance of this role together."""
        return self.nodes * self.replicas


class Disaggregation(StrictModel):
    """Prefill and decode on separate nodes behind a router (SGLang PD disaggregation, DOMAIN.md section 8).

    Nodes are laid out prefill instances first, then decode instances; the router runs on the first
    node and is the server's endpoint (``ServerConfig.port``). Spec-decode counters are read from every
    decode instance's metrics endpoint.
    """

    prefill: DisaggregatedRole = Field(description="The prefill instances.")
    decode: DisaggregatedRole = Field(
        description="The decode instances (their metrics are scraped and summed)."
    )
    transfer_backend: Literal["mooncake", "nixl"] = Field(
        "mooncake",
        description="KV-cache transfer engine between prefill and decode (--disaggregation-transfer-backend).",
    )
    prefill_port: int = Field(
        30000, ge=1, le=65535, description="HTTP port of prefill instance 0 (instance i: + i)."
    )
    decode_port: int = Field(
        31000, ge=1, le=65535, description="HTTP port of decode instance 0 (instance i: + i)."
    )
    bootstrap_port: int = Field(
        8998,
        ge=1,
        le=65535,
        description="KV bootstrap port of prefill instance 0 (instance i: + i); the router is told each one.",
    )
    router_args: tuple[str, ...] = Field(
        (), description="Extra arguments for the router (e.g. '--policy', 'round_robin'), appended verbatim."
    )

    @property
    def total_nodes(self) -> int:
        """Nodes of the whole disaggregated server."""
        return self.prefill.total_nodes + self.decode.total_nodes

    @model_validator(mode="after")
    def _ports_apart(self) -> Self:
        ranges = {
            "prefill": range(self.prefill_port, self.prefill_port + self.prefill.replicas),
            "decode": range(self.decode_port, self.decode_port + self.decode.replicas),
            "bootstrap": range(self.bootstrap_port, self.bootstrap_port + self.prefill.replicas),
        }
        names = list(ranges)
        for i, a in enumerate(names):
            for b in names[i + 1 :]:
                if set(ranges[a]) & set(ranges[b]):
                    raise ValueError(
                        f"{a} ports {list(ranges[a])} and {b} ports {list(ranges[b])} overlap: move one of them"
                    )
        return self


class ServerConfig(StrictModel):
    """One serving-engine configuration: framework, model, image, parallelism, speculation, knobs."""

    framework: ServerFramework = Field(
        description=(
            "Serving framework: vllm, sglang, trtllm, sim (the simulator) or tiny (alflow's small real CPU "
            "engine, n-gram drafting only)."
        )
    )
    model: str = Field(
        min_length=1, description="Model id to serve (Hugging Face repo id or a path in the container)."
    )
    revision: str | None = Field(None, description="Model revision to load (None: the framework's default).")
    model_path: str | None = Field(
        None,
        min_length=1,
        description=(
            "Where the weights are (a local folder or hub id); model is then only the name the server answers "
            "to (vLLM --served-model-name). None: load model."
        ),
    )
    image: str | None = Field(
        None,
        description=(
            "Container image with tag (e.g. 'vllm/vllm-openai:v0.11.0'); needed by the docker runner; the tag is "
            "checked for features that depend on the version. None: the recipe's default image."
        ),
    )
    parallelism: Parallelism = Field(
        default=Parallelism(), description="Tensor/pipeline/data/expert parallel sizes."
    )
    nodes: int = Field(
        1,
        ge=1,
        description=(
            "Nodes one server spans (tensor/expert/pipeline parallel across hosts); more than 1 needs a "
            "multi-node runner (slurm)."
        ),
    )
    dist_init_port: int | None = Field(
        None,
        ge=1,
        le=65535,
        description=(
            "Multi-node rendezvous port on the head node (SGLang --dist-init-addr HEAD:PORT, vLLM --master-port); "
            "None: SGLang 5000, vLLM its own default (29501)."
        ),
    )
    disaggregation: Disaggregation | None = Field(
        None,
        description=(
            "Prefill and decode instances on separate nodes behind a router (SGLang only); nodes must then be "
            "the total of both roles, and parallelism is set per role. None: one server."
        ),
    )
    speculative: SpeculativeConfig | None = Field(
        None, description="Speculative decoding method and K; None: off."
    )
    synthetic: SyntheticAcceptance | None = Field(
        None,
        description="Synthetic acceptance (forced accept lengths); None: real acceptance. Needs speculative.",
    )
    two_model: bool | None = Field(
        None,
        description=(
            "TensorRT-LLM only: run EAGLE3 as two models (separate drafter engine); None: the method's default "
            "(one model for mtp and eagle3, two for draft_model and ngram)."
        ),
    )
    sim_dialect: ServerDialect = Field(
        "vllm",
        description="framework=sim only: which framework's API, knobs and metrics the simulator speaks.",
    )
    max_model_len: int | None = Field(
        None, ge=16, description="Maximum sequence length (None: the model's own)."
    )
    enable_prefix_caching: bool = Field(
        False, description="Prefix caching; off by default so repeated prompts do not inflate the speed."
    )
    host: str | None = Field(
        None,
        min_length=1,
        description=(
            "Address the server binds to. None: the runner's choice: loopback (127.0.0.1) for a local process "
            "or a container on the host network; all addresses (0.0.0.0) only where the server must be reached "
            "from another host or namespace (Slurm nodes, a bridge-networked container)."
        ),
    )
    port: int = Field(0, ge=0, le=65535, description="Port the server listens on; 0 picks a free port.")
    readiness_timeout_s: float = Field(
        1800.0,
        gt=0.0,
        description="How long to wait for the health endpoint before giving up (model loading).",
    )
    extra_args: tuple[str, ...] = Field((), description="Extra command-line arguments appended verbatim.")
    extra_env: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "Extra environment variables of the server (values are stored in manifests and reports). Secrets "
            "(HF_TOKEN, *_KEY, *_TOKEN, *SECRET*, *PASSWORD*) are refused here: list their names in the runner's "
            "secrets and the value is read from the environment (or a Prefect Secret block) at start."
        ),
    )
    label: str | None = Field(
        None,
        max_length=300,
        description=(
            "A label every report and table puts on this server's numbers (e.g. 'real vLLM, CPU build, a 135M "
            "model on CPU'); the built-in engines (sim, tiny) carry their own."
        ),
    )

    def __hash__(self) -> int:
        """Hash of the JSON form (``extra_env`` is a dict, which plain field hashing cannot take)."""
        return hash(self.model_dump_json())

    @field_validator("extra_args")
    @classmethod
    def _no_secret_args(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for arg in value:
            flag = arg.split("=", 1)[0]
            if is_secret_flag(flag):
                raise ValueError(
                    f"extra_args passes {flag}, which takes a secret: its value would be stored in clear in "
                    "manifest.json, the reports and Prefect's database. Give the server the secret through its "
                    f"environment instead (e.g. vLLM reads VLLM_API_KEY for --api-key and HF_TOKEN for --hf-token): "
                    "list the variable's name in the runner's secrets and drop the flag"
                )
        return value

    @field_validator("extra_env")
    @classmethod
    def _no_secret_values(cls, value: dict[str, str]) -> dict[str, str]:
        secret = sorted(name for name in value if is_secret_name(name))
        if secret:
            names = ", ".join(secret)
            raise ValueError(
                f"extra_env sets {names}, which looks like a secret: a literal value here would be stored in clear "
                "in manifest.json, the reports and Prefect's database. Pass it by name instead: add "
                f"{names} to the runner's secrets (placement.runner.secrets; the value is read from the "
                "environment of the process that starts the server, or from a Prefect Secret block of that "
                "name in lowercase with dashes) and remove it from extra_env"
            )
        return value

    @property
    def simulated(self) -> bool:
        """True when the server is alflow's simulated engine: its numbers must be labelled simulated."""
        return self.framework == "sim"

    @property
    def engine_note(self) -> str | None:
        """The label reports put on this server's numbers (simulated, tiny CPU engine, the config's label)."""
        notes = [n for n in (ENGINE_NOTES.get(self.framework), self.label) if n]
        return " ".join(notes) or None

    @model_validator(mode="after")
    def _synthetic_needs_speculation(self) -> Self:
        if self.synthetic is not None and self.speculative is None:
            raise ValueError(
                "synthetic acceptance needs speculative decoding (set speculative: method and k)"
            )
        if self.synthetic is not None and self.speculative is not None:
            self.synthetic.target(self.speculative.k)  # target AL in [1, K+1], rates of length K
        if self.model_path is not None and self.framework != "vllm":
            raise ValueError(
                f"model_path (weights apart from the served name) is rendered for vLLM only, not {self.framework!r}: "
                "set model to the weights' path or id"
            )
        if self.two_model is not None and self.framework not in ("trtllm", "sim"):
            raise ValueError(f"two_model applies to TensorRT-LLM only, not {self.framework!r}")
        return self

    @model_validator(mode="after")
    def _disaggregation_layout(self) -> Self:
        dis = self.disaggregation
        if dis is None:
            return self
        if self.framework != "sglang":
            why = {
                "vllm": (
                    "vLLM's disaggregated prefill is experimental and needs a KV connector plus a proxy from its "
                    "examples, not a packaged router"
                ),
                "trtllm": "TensorRT-LLM's disaggregated serving (trtllm-serve disaggregated) is not wired into alflow",
                "sim": "the simulator has no disaggregated mode",
            }[self.framework]
            raise ValueError(
                f"disaggregation is supported for framework 'sglang' only: {why}. Start such a server yourself and "
                "attach with the external runner (metrics_urls: the decode instances)"
            )
        if self.parallelism != Parallelism():
            raise ValueError(
                "with disaggregation, parallelism is set per role (disaggregation.prefill.parallelism, "
                "disaggregation.decode.parallelism); leave the top-level parallelism unset"
            )
        if self.nodes != dis.total_nodes:
            raise ValueError(
                f"nodes={self.nodes} but the disaggregated layout uses {dis.total_nodes} node(s) (prefill "
                f"{dis.prefill.replicas} x {dis.prefill.nodes}, decode {dis.decode.replicas} x {dis.decode.nodes}): "
                f"set nodes: {dis.total_nodes}"
            )
        return self

    @property
    def gpu_framework(self) -> str:
        """Whose GPU-counting rules apply: the framework, or the dialect the simulator speaks."""
        return self.sim_dialect if self.simulated else self.framework

    def role_gpus(self, role: DisaggregatedRole) -> int:
        """GPUs of one instance of a disaggregated role."""
        return parallel_gpus(self.gpu_framework, role.parallelism, self.extra_args)

    @property
    def total_gpus(self) -> int:
        """GPUs the whole server occupies (every instance of both roles when disaggregated)."""
        dis = self.disaggregation
        if dis is None:
            return parallel_gpus(self.gpu_framework, self.parallelism, self.extra_args)
        return (
            self.role_gpus(dis.prefill) * dis.prefill.replicas
            + self.role_gpus(dis.decode) * dis.decode.replicas
        )


class ProcessOptions(StrictModel):
    """Runner 'process': the server is a local child process (used for the simulator)."""

    kind: Literal["process"] = Field("process", description="Runner kind.")
    log_dir: str | None = Field(
        None, description="Directory for the server log and files (None: a temporary one)."
    )
    stop_timeout_s: float = Field(10.0, gt=0.0, description="Seconds between SIGTERM and SIGKILL.")
    secrets: tuple[str, ...] = Field(
        ("HF_TOKEN",),
        description="Names of secret environment variables passed through (values never stored).",
    )
    framework_env: str | None = Field(
        None,
        description=(
            "A virtual environment or install prefix holding the framework (e.g. .venv-vllm): its bin/ goes first "
            "on PATH and VIRTUAL_ENV is set, so the recipe's argv (vllm serve ...) runs the framework installed "
            "there, with the same argv and environment as in a container. None: alflow's own PATH."
        ),
    )
    executable: str | None = Field(
        None,
        description="A path that replaces the recipe's program (argv[0]), e.g. a site module's vllm executable.",
    )


class DockerOptions(StrictModel):
    """Runner 'docker': the server runs in a container started through the Docker engine API."""

    kind: Literal["docker"] = Field("docker", description="Runner kind.")
    gpus: Literal["all", "none"] | tuple[str, ...] = Field(
        "all", description="GPUs for the container: 'all', 'none', or a list of GPU ids or UUIDs."
    )
    ipc_mode: Literal["host"] | None = Field(
        "host",
        description="'host' shares the host's IPC namespace (large shared memory); None: use shm_size.",
    )
    shm_size: str | None = Field(None, description="Shared memory size when ipc_mode is None (e.g. '32g').")
    network: Literal["host", "bridge"] = Field(
        "host", description="'host': the container uses the host's network; 'bridge': the port is mapped."
    )
    model_cache: str | None = Field(
        "~/.cache/huggingface",
        description="Host directory (absolute or ~) or named volume holding downloaded models; None: no cache mount.",
    )
    model_cache_target: str = Field(
        "/root/.cache/huggingface", description="Where the model cache is mounted in the container."
    )
    volumes: tuple[str, ...] = Field(
        (), description="Extra bind mounts, docker style 'HOST:CONTAINER[:ro|rw]'."
    )
    pull: Literal["always", "missing", "never"] = Field(
        "missing", description="Pull the image always, only when missing locally, or never."
    )
    secrets: tuple[str, ...] = Field(
        ("HF_TOKEN",),
        description="Names of secret environment variables passed into the container (values never logged or stored).",
    )
    labels: dict[str, str] = Field(default_factory=dict, description="Extra container labels.")
    stop_timeout_s: float = Field(
        30.0, gt=0.0, description="Seconds the container gets to stop before it is killed."
    )
    log_dir: str | None = Field(
        None,
        description="Directory where the container's whole log is saved before it is removed (None: not saved).",
    )

    def __hash__(self) -> int:
        """Hash of the JSON form (``labels`` is a dict, which plain field hashing cannot take)."""
        return hash(self.model_dump_json())

    @model_validator(mode="after")
    def _shared_memory(self) -> Self:
        if self.ipc_mode == "host" and self.shm_size is not None:
            raise ValueError(
                "give ipc_mode='host' or shm_size, not both (shm_size has no effect with a host IPC)"
            )
        if isinstance(self.gpus, tuple) and not self.gpus:
            raise ValueError("gpus is an empty list: use 'none' for no GPUs")
        return self


class ExternalServer(StrictModel):
    """Runner 'external': a server someone else started; alflow attaches and never stops it."""

    kind: Literal["external"] = Field("external", description="Runner kind.")
    base_url: str = Field(min_length=1, description="Base URL of the server, e.g. 'http://10.0.0.5:8000'.")
    metrics_url: str | None = Field(
        None, description="Full metrics URL (None: base URL + the dialect's metrics path)."
    )
    metrics_urls: tuple[str, ...] = Field(
        (),
        description=(
            "Every metrics URL of a multi-endpoint server (data-parallel replicas, disaggregated decode "
            "workers): counters are summed over them. Empty: metrics_url alone."
        ),
    )
    dialect: ServerDialect = Field(description="Which framework's API and metrics the server speaks.")
    health_path: str = Field("/health", description="Health endpoint path.")

    @model_validator(mode="after")
    def _one_metrics_source(self) -> Self:
        if self.metrics_url is not None and self.metrics_urls and self.metrics_url not in self.metrics_urls:
            raise ValueError(
                f"metrics_url {self.metrics_url!r} is not among metrics_urls {list(self.metrics_urls)}: "
                "give metrics_urls alone (the first one is the primary)"
            )
        for url in self.metrics_urls:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"metrics_urls entry {url!r} is not an http(s) URL")
        return self


class SlurmOptions(StrictModel):
    """Runner 'slurm': the server runs as a Slurm batch job (one or more nodes), submitted with sbatch.

    Values that end up on ``#SBATCH`` lines must be plain tokens (no spaces or quotes): the runner
    refuses anything that would need shell quoting there.
    """

    kind: Literal["slurm"] = Field("slurm", description="Runner kind.")
    nodes: int | None = Field(
        None,
        ge=1,
        description=(
            "Number of nodes for the job (--nodes); the first one is the head. None: the server config's "
            "nodes, which is authoritative (a different value here is an error)."
        ),
    )
    gpus_per_node: int | None = Field(
        None,
        ge=0,
        description=(
            "GPUs per node (--gpus-per-node); None: what the server's parallelism uses per node (no GPU "
            "request for the simulator)."
        ),
    )
    partition: str | None = Field(
        None, description="Slurm partition (--partition); None: the cluster's default."
    )
    account: str | None = Field(
        None, description="Slurm account to charge (--account); None: the user's default."
    )
    time_limit: str = Field(
        "02:00:00", min_length=1, description="Job time limit (--time), e.g. '02:00:00' or '1-00:00:00'."
    )
    job_name: str | None = Field(None, description="Job name (--job-name); None: 'alflow-<framework>'.")
    log_dir: str | None = Field(
        None,
        description=(
            "Directory for the job script, launch files and job log; it must be visible from the compute nodes "
            "(a shared file system). None: a temporary directory (single-host clusters only)."
        ),
    )
    container_image: str | None = Field(
        None,
        description="Run the server in this container image through pyxis/enroot (--container-image); None: bare command.",
    )
    container_mounts: tuple[str, ...] = Field(
        (),
        description="Extra pyxis mounts 'SRC:DST[:FLAGS]' (the job directory is always mounted at the same path).",
    )
    modules: tuple[str, ...] = Field(
        (), description="Environment modules loaded before the server starts ('module load NAME' each)."
    )
    extra_sbatch_args: tuple[str, ...] = Field(
        (), description="Extra sbatch options written as '#SBATCH' lines verbatim, e.g. '--exclusive'."
    )
    secrets: tuple[str, ...] = Field(
        ("HF_TOKEN",),
        description="Names of secret environment variables passed to the job through sbatch's environment (never in the script).",
    )
    queue_timeout_s: float = Field(
        3600.0, gt=0.0, description="How long start waits for the job to leave the queue and get its nodes."
    )
    poll_interval_s: float = Field(
        1.0, gt=0.0, description="Seconds between job-state queries (scontrol) while waiting."
    )
    stop_timeout_s: float = Field(
        30.0, gt=0.0, description="How long stop waits for the cancelled job to leave the running states."
    )
    command_timeout_s: float = Field(
        30.0, gt=0.0, description="Timeout of each Slurm client command (sbatch, scontrol, scancel)."
    )


RunnerOptions = Annotated[
    ProcessOptions | DockerOptions | ExternalServer | SlurmOptions, Field(discriminator="kind")
]
"""Where a server runs: the ``kind`` field chooses the runner."""


# --------------------------------------------------------------------------------------------
# Workloads, load shapes and flow parameters (the Prefect UI's custom-run forms)


class LoadConfig(StrictModel):
    """How requests are offered at one point."""

    concurrency: int = Field(1, ge=1, description="Requests (sessions) in flight at once.")
    num_prompts: int | None = Field(None, ge=1, description="Measured requests (None: every prompt once).")
    warmup: int = Field(0, ge=0, description="Warm-up requests sent before the measured window.")
    request_rate: float | None = Field(None, gt=0.0, description="Requests per second (None: unlimited).")
    timeout_s: float = Field(
        600.0, gt=0.0, allow_inf_nan=False, description="Per-request timeout in seconds."
    )
    stall_timeout_s: float | None = Field(
        DEFAULT_STALL_TIMEOUT_S,
        gt=0.0,
        allow_inf_nan=False,
        description=(
            "Abort the point when the server sends nothing on any open stream for this many seconds (a hung "
            "server fails within it); None: off."
        ),
    )


class SpeedBenchWorkload(StrictModel):
    """SPEED-Bench prompts from a prepared JSONL split (real acceptance: M0 and M1)."""

    kind: Literal["speed-bench"] = Field("speed-bench", description="Workload kind.")
    path: str | None = Field(
        None,
        description=(
            "Prepared SPEED-Bench JSONL (e.g. qualitative.jsonl). None: alflow's bundled demo prompts, "
            "which are NOT SPEED-Bench and are labelled as such in every result."
        ),
    )
    category: str = Field("coding", min_length=1, description="Category to run (coding for M0/M1).")
    limit: int | None = Field(None, ge=1, description="Use only the first N prompts of the category.")
    max_tokens: int = Field(4096, ge=1, description="Output cap per turn.")


class RandomWorkload(StrictModel):
    """Random-token prompts with fixed input and output lengths (M2, synthetic acceptance)."""

    kind: Literal["random"] = Field("random", description="Workload kind.")
    isl: int = Field(1024, ge=1, description="Input sequence length in tokens (upper end).")
    osl: int = Field(1024, ge=1, description="Output sequence length in tokens (fixed with ignore_eos).")
    range_ratio: float = Field(0.8, gt=0.0, le=1.0, description="Input lengths are drawn in [ISL x r, ISL].")
    seed: int = Field(0, description="Seed of the prompts.")
    vocab_size: int = Field(
        DEFAULT_VOCAB_SIZE,
        ge=200,
        description=(
            "Token ids are drawn in [100, vocab_size): keep it at or below the served model's vocabulary "
            "(20,000 fits every common model and the simulator)."
        ),
    )
    endpoint: Literal["chat", "completions"] = Field(
        "chat", description="chat: decoded text in the chat template; completions: token ids."
    )


class Gsm8kSettings(StrictModel):
    """The GSM8K accuracy gate of M1."""

    enabled: bool = Field(True, description="Run the GSM8K accuracy gate after the AL gate.")
    limit: int | None = Field(None, ge=1, description="Seeded subset of N questions (None: all 1,319).")
    shots: int = Field(5, ge=0, description="Few-shot examples per question.")
    seed: int = Field(1234, description="Seed of the subset and the few-shot draws.")
    concurrency: int = Field(64, ge=1, description="Requests in flight.")
    max_tokens: int = Field(512, ge=1, description="Output cap per reply.")
    threshold: float | None = Field(
        None,
        ge=0.0,
        le=1.0,
        description="Accuracy both scores must reach (None: the thresholds file or 0.90).",
    )
    thresholds_file: str | None = Field(None, description="YAML of per-model thresholds.")


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
    results_root: str = Field("results", description="Run store root: a local path or an s3:// / gs:// URL.")


REMOTE_REFERENCES = (
    "reference tables are local files (M0 merges its entries under a lock file so concurrent runs "
    "lose none; an object store has no such lock): give a local path and commit the table"
)
"""Why a reference table may not be a URL (the single-writer rule, README "Reference tables")."""


def _ks() -> tuple[int, ...]:
    return (1, 2, 3, 4, 5, 6, 7)


class CalibrateParams(StrictModel):
    """M0: reference AL for models x thinking modes x K on SPEED-Bench coding, synthetic off."""

    models: tuple[ModelSpec, ...] = Field(min_length=1, description="Models to calibrate.")
    method: SpecMethod = Field(SpecMethod.MTP, description="Speculative method.")
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
    workload: SpeedBenchWorkload = Field(default=SpeedBenchWorkload(), description="Prompts.")
    load: LoadConfig = Field(
        default=LoadConfig(), description="Load per point (reference runs: concurrency 1)."
    )
    reference_path: str = Field(
        "references/speed-bench-coding.yaml",
        description="Reference table to write (merged with what it holds).",
    )
    cache_days: float = Field(
        30.0, ge=0.0, description="Reuse a measured point for this many days (0: never)."
    )
    refresh_cache: bool = Field(False, description="Measure every point again even when cached.")

    @model_validator(mode="after")
    def _check(self) -> Self:
        for k in self.ks:
            if not K_MIN <= k <= K_MAX:
                raise ValueError(f"K={k} in ks is outside [{K_MIN}, {K_MAX}]")
        if self.server.synthetic is not None:
            raise ValueError("M0 measures real acceptance: the server template must not set synthetic")
        return self

    @field_validator("reference_path")
    @classmethod
    def _local_reference(cls, value: str) -> str:
        require_local_path(value, what="", why=REMOTE_REFERENCES)
        return value


class GateParams(StrictModel):
    """M1: AL of the framework under test against the reference, then GSM8K accuracy."""

    model: ModelSpec = Field(description="Model under test.")
    method: SpecMethod = Field(SpecMethod.MTP, description="Speculative method.")
    draft_model: str | None = Field(None, description="Drafter model id (eagle3, draft_model).")
    k: int = Field(3, ge=K_MIN, le=K_MAX, description="Number of speculative tokens K.")
    thinking: ThinkingMode = Field(ThinkingMode.OFF, description="Thinking mode of the requests.")
    server: ServerConfig = Field(description="The framework/image/config under test (synthetic must be off).")
    placement: ServerPlacement = Field(default=ServerPlacement(), description="Runner and GPU host.")
    reference_path: str = Field(description="Reference table (YAML) holding the reference AL.")
    reference_model: str | None = Field(
        None, description="Model name in the reference table (None: model.id)."
    )
    tolerances: GateTolerances = Field(default=GateTolerances(), description="AL gate tolerances.")
    workload: SpeedBenchWorkload = Field(default=SpeedBenchWorkload(), description="Prompts.")
    load: LoadConfig = Field(default=LoadConfig(), description="Load of the AL measurement.")
    gsm8k: Gsm8kSettings = Field(default=Gsm8kSettings(), description="The accuracy gate.")

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.server.synthetic is not None:
            raise ValueError("M1 measures real acceptance and accuracy: the server must not set synthetic")
        return self


class BenchmarkParams(StrictModel):
    """M2: synthetic acceptance at the reference AL, random prompts, a concurrency sweep, the audit."""

    model: ModelSpec = Field(description="Model under test.")
    method: SpecMethod = Field(SpecMethod.MTP, description="Speculative method.")
    draft_model: str | None = Field(None, description="Drafter model id (eagle3, draft_model).")
    k: int = Field(3, ge=K_MIN, le=K_MAX, description="Number of speculative tokens K.")
    thinking: ThinkingMode = Field(
        ThinkingMode.OFF, description="Thinking mode whose reference AL is the target."
    )
    server: ServerConfig = Field(description="Server configuration; the synthetic knobs are set by the flow.")
    placement: ServerPlacement = Field(default=ServerPlacement(), description="Runner and GPU host.")
    reference_path: str | None = Field(None, description="Reference table for the target AL.")
    reference_model: str | None = Field(
        None, description="Model name in the reference table (None: model.id)."
    )
    target_al: float | None = Field(
        None, ge=1.0, description="Explicit target AL (instead of the reference)."
    )
    scheme: str | None = Field(None, description="Synthetic scheme override (None: the framework's own).")
    workload: RandomWorkload = Field(default=RandomWorkload(), description="Random-token prompts.")
    concurrencies: tuple[int, ...] = Field(
        (4, 8, 16, 32, 64, 128), min_length=1, description="Concurrency sweep."
    )
    prompts_per_concurrency: int = Field(10, ge=1, description="Measured prompts = this x concurrency.")
    warmup_per_concurrency: int = Field(2, ge=0, description="Warm-up requests = this x concurrency.")
    request_timeout_s: float = Field(
        600.0, gt=0.0, allow_inf_nan=False, description="Per-request timeout in seconds."
    )
    stall_timeout_s: float | None = Field(
        DEFAULT_STALL_TIMEOUT_S,
        gt=0.0,
        allow_inf_nan=False,
        description="Fail a point when the server sends nothing on any open stream for this long; None: off.",
    )
    audit_abs_tol: float = Field(
        0.02, ge=0.0, description="Smallest allowed |achieved - target| AL deviation."
    )
    fail_on_invalid: bool = Field(True, description="Fail the run when a point fails the synthetic audit.")

    @model_validator(mode="after")
    def _check(self) -> Self:
        if (self.reference_path is None) == (self.target_al is None):
            raise ValueError("give exactly one of reference_path (target = reference AL) or target_al")
        if any(c < 1 for c in self.concurrencies):
            raise ValueError(f"concurrencies {self.concurrencies} must all be >= 1")
        if self.scheme is not None:
            get_scheme(self.scheme)
        if self.target_al is not None:
            SyntheticTarget.of(self.k, al=self.target_al)  # 1 <= target_al <= K+1
        return self


class SweepParams(StrictModel):
    """For each K: M1 then M2 at that K's reference AL; a summary across K."""

    ks: tuple[int, ...] = Field(default_factory=_ks, description="Numbers of speculative tokens K.")
    gate: GateParams = Field(description="M1 template (k is set per K).")
    benchmark: BenchmarkParams = Field(description="M2 template (k and target are set per K).")
    stop_on_gate_failure: bool = Field(True, description="Skip M2 at a K whose M1 gate failed.")

    @model_validator(mode="after")
    def _check(self) -> Self:
        if not self.ks:
            raise ValueError("ks is empty: give at least one K")
        for k in self.ks:
            if not K_MIN <= k <= K_MAX:
                raise ValueError(f"K={k} in ks is outside [{K_MIN}, {K_MAX}]")
            if self.benchmark.target_al is not None:
                SyntheticTarget.of(k, al=self.benchmark.target_al)  # the explicit target must fit every K
        return self


class DemoParams(StrictModel):
    """Where the demo writes, which engine it runs on and how big it is."""

    engine: Literal["sim", "tiny", "vllm"] = Field(
        "sim",
        description=(
            "sim: M0 -> M1 -> M2 on the simulated engine; tiny: M0 -> M1 on alflow's small real CPU engine "
            "(n-gram drafting on Gemma 3 270M; needs the alflow[tiny] extra); vllm: M0 -> M1 on a real vLLM "
            "(CPU build, SmolLM2-135M, n-gram drafting; needs scripts/setup.sh --vllm)."
        ),
    )
    results_root: str = Field("results/demo", description="Run store root of the demo.")
    ks: tuple[int, ...] = Field((1, 2, 3), description="K values calibrated in M0.")
    benchmark_k: int = Field(3, description="K of the M1 gate and the M2 benchmark.")
    concurrencies: tuple[int, ...] = Field((4, 8, 16), description="M2 concurrency sweep (sim only).")
    gsm8k_limit: int = Field(200, ge=1, description="GSM8K questions per M1 gate on the sim (seeded subset).")
    tiny_prompts: int = Field(
        6, ge=1, le=8, description="tiny: coding prompts of the bundled tiny set used in M0 and M1 (1..8)."
    )
    tiny_max_tokens: int = Field(64, ge=8, le=512, description="tiny: output cap per prompt in M0 and M1.")
    tiny_gsm8k_limit: int = Field(
        10, ge=1, description="tiny: GSM8K questions of the M1 accuracy gate (seeded subset)."
    )
    refresh_cache: bool = Field(
        False,
        description="sim: measure the M0 points again even when cached (the tiny demo never reuses them).",
    )
    tiny_threads: int | None = Field(
        1,
        ge=1,
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
        20, ge=1, description="vllm: GSM8K questions of the M1 accuracy gate (seeded subset)."
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
        return self


class CalibrationModel(StrictModel):
    """One model of the reference-AL workflow's catalogue (``references/models.yaml``)."""

    model: ModelSpec = Field(description="The model and its provider-recommended sampling.")
    method: SpecMethod = Field(SpecMethod.MTP, description="Speculative method used for its reference.")
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
