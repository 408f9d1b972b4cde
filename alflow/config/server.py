"""What to start: the serving engine's configuration (framework, model, image, parallelism, speculation, disaggregation)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Final, Literal, Self, Union

from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationInfo,
    field_validator,
    model_validator,
)

from alflow.config.base import (
    MAX_CONTEXT_TOKENS,
    MAX_NODES,
    MAX_PARALLEL,
    StrictModel,
    refuse_url_credentials_in_schema,
)
from alflow.config.speculative import (
    SpeculativeConfig,
    SyntheticAcceptance,
)
from alflow.loadgen.spec import MAX_SECONDS
from alflow.plugins import check_dialect, config_model_of, config_models, framework_names
from alflow.util.names import (
    check_env_names,
    check_host,
    check_identifier,
    check_image,
    control_characters,
    shown,
)
from alflow.util.redact import redact_urls_in_text
from alflow.util.secret_names import is_secret_flag, is_secret_key, is_secret_name

ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")
"""An environment variable's name as a runner's ``-e NAME=value`` gives it (``first-pass=/m/l`` is a LoRA, not one)."""
_USERINFO = re.compile(r"[^/@\s]+:[^/@\s]+@[^/]*/")
"""``user:password@host/`` at the start of an image reference (a digest's ``@sha256:`` comes after the last ``/``)."""
_BEARER = re.compile(r"\bbearer\s+\S|authorization\s*[=:]", re.IGNORECASE)


_URL_WITH_USER = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,31}://[^/\s@]+@")


_SECRET_FLAGS: Final = ("--api-key", "--hf-token", "--admin-api-key", "--ssl-keyfile-password", "--token")
"""Flags that take a secret in the frameworks' parsers (vLLM, SGLang): argparse takes an unambiguous prefix of one."""


def _abbreviates_secret_flag(flag: str) -> bool:
    """``--api-k`` or ``--hf-tok``: a prefix of a secret flag past its first word, which argparse expands."""
    return "-" in flag[2:] and any(f.startswith(flag) and f != flag for f in _SECRET_FLAGS)


def _json_secret(arg: str) -> str | None:
    """The first secret-named key (at any depth) of ``arg``'s JSON value, or of its value after ``=``; None: none.

    ``--kv-transfer-config '{"kv_connector_extra_config": {"aws_secret_access_key": ...}}'``, ``--hf-overrides``.
    """
    text = arg.split("=", 1)[1] if arg.startswith("--") and "=" in arg else arg
    if not text.lstrip().startswith(("{", "[")):
        return None
    try:
        return _secret_key(json.loads(text))
    except ValueError:
        return None


def _secret_key(data: object) -> str | None:
    if isinstance(data, dict):
        for k, v in data.items():
            found = k if isinstance(k, str) and is_secret_key(k) else _secret_key(v)
            if found:
                return found
    if isinstance(data, list):
        return next((found for v in data if (found := _secret_key(v))), None)
    return None


_HEADER: Final = re.compile(r"(?:^|(?<=[\s,;=]))([A-Za-z][A-Za-z0-9_.-]{0,63})[ \t]*:[ \t]*(?=[^\s/])")
"""An HTTP header written out, ``Name: value`` (``--header 'X-Api-Key: ...'``), at the start of a text or after a space,
``,``, ``;`` or ``=``: bounded name, linear. ``tcp://host:port`` is no header (``//`` follows its colon)."""


def _credential(text: str) -> bool:
    """Whether a server's argument or environment value carries a credential, in any form alflow knows.

    A header value (:func:`_bearer`), a secret-named header (``api-key: X``, ``x-goog-api-key: X``: the name judged as
    a request body's key is, :func:`~alflow.util.secret_names.is_secret_key`), a token, a URL's password, a secret
    ``NAME=value`` or ``"name": "value"`` (what redaction would change).
    """
    return (
        _bearer(text)
        or any(is_secret_key(m[1]) for m in _HEADER.finditer(text))
        or redact_urls_in_text(text) != text
    )


def _where(args: tuple[str, ...], index: int) -> str:
    """``extra_args[3]`` and the flag it belongs to (its own ``--flag=`` or the flag before it), never its value."""
    arg = args[index]
    if arg.startswith("-") and "=" in arg:
        return f"extra_args[{index}] (the value of {shown(arg.split('=', 1)[0])})"
    if index and args[index - 1].startswith("-"):
        return f"extra_args[{index}] (the value of {shown(args[index - 1].split('=', 1)[0])})"
    return f"extra_args[{index}]"


def _bearer(value: str) -> bool:
    """Whether an environment value carries a credential: a header (``authorization=Bearer ..``), a URL's user.

    A URL's user such as ``postgres://TOKEN@db/x``. Such as ``OTEL_EXPORTER_OTLP_HEADERS`` or ``DATABASE_URL``: stored in clear in the manifest otherwise.
    """
    return bool(_BEARER.search(value) or _URL_WITH_USER.search(value))


ServerFramework = str
"""A registered framework's name (:func:`alflow.plugins.framework_names`); each config variant pins its own."""
ServerDialect = Annotated[str, AfterValidator(check_dialect)]
"""A framework whose API and metrics a server speaks (:func:`alflow.plugins.dialect_names`)."""


class Parallelism(StrictModel):
    """How the served model is split over GPUs (sizes of 1 mean "off")."""

    tp: int = Field(1, ge=1, le=MAX_PARALLEL, description="Tensor-parallel size.")
    pp: int = Field(1, ge=1, le=MAX_PARALLEL, description="Pipeline-parallel size.")
    dp: int = Field(
        1,
        ge=1,
        le=MAX_PARALLEL,
        description="Data-parallel size (attention data parallel where the framework has it).",
    )
    ep: int = Field(
        1,
        ge=1,
        le=MAX_PARALLEL,
        description="Expert-parallel size; 1 is off (vLLM: must equal TP x DP, its expert-parallel size).",
    )


def dp_gpus(parallelism: Parallelism) -> int:
    """``tp x pp x dp``: data-parallel ranks are GPUs of their own (expert parallelism reuses them)."""
    return parallelism.tp * parallelism.pp * parallelism.dp


def attention_dp_gpus(parallelism: Parallelism) -> int:
    """``tp x pp``: data parallelism is attention DP over the TP ranks and adds no GPU."""
    return parallelism.tp * parallelism.pp


class DisaggregatedRole(StrictModel):
    """One role (prefill or decode) of a disaggregated server: how many instances, on how many nodes each."""

    nodes: int = Field(1, ge=1, le=MAX_NODES, description="Nodes one instance of this role spans.")
    replicas: int = Field(
        1,
        ge=1,
        le=MAX_NODES,
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


class ServerBase(StrictModel):
    """What every serving-engine configuration has: framework, model, image, parallelism, speculation, knobs.

    The framework's own fields live on its variant (:data:`ServerConfig` is the union, told apart by
    ``framework``): vLLM's ``model_path``, SGLang's ``disaggregation``, TensorRT-LLM's ``two_model``,
    the simulator's ``sim_dialect`` (and ``two_model``, for its TensorRT-LLM dialect). Generic code reads
    them through :meth:`weights_path`, :meth:`disaggregated` and :meth:`two_model_choice`, and counts
    GPUs with :meth:`instance_gpus`, whose rules are the framework's.
    """

    OWN_FIELDS: ClassVar[Mapping[str, str]] = {}
    """The fields this variant has that the base lacks, and what to tell a configuration of another framework that
    sets one (``{framework}`` is that framework): such a configuration is refused with it."""
    ENGINE_NOTE: ClassVar[str | None] = None
    """The label this framework's numbers carry in reports (simulated or CPU engines); None for a real GPU one."""

    model_config = ConfigDict(
        **{
            **StrictModel.model_config,
            "extra": "allow",
            "json_schema_extra": lambda schema, _cls: refuse_url_credentials_in_schema(
                schema, additional=False
            ),
        }
    )

    framework: ServerFramework = Field(
        description=(
            "Serving framework: a registered plugin's name (the built-in real ones, the simulator 'sim', alflow's "
            "small real CPU engine 'tiny', or an entry point's; alflow frameworks lists them)."
        )
    )
    model: str = Field(
        min_length=1, description="Model id to serve (Hugging Face repo id or a path in the container)."
    )
    revision: str | None = Field(None, description="Model revision to load (None: the framework's default).")
    image: str | None = Field(
        None,
        description=(
            "Container image with tag (e.g. 'vllm/vllm-openai:v0.11.0'), a reference as Docker reads it; needed by "
            "the docker runner; the tag is checked for features that depend on the version. None: the recipe's "
            "default image."
        ),
    )
    parallelism: Parallelism = Field(
        default=Parallelism(), description="Tensor/pipeline/data/expert parallel sizes."
    )
    nodes: int = Field(
        1,
        ge=1,
        le=MAX_NODES,
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
    speculative: SpeculativeConfig | None = Field(
        None, description="Speculative decoding method and K; None: off."
    )
    synthetic: SyntheticAcceptance | None = Field(
        None,
        description="Synthetic acceptance (forced accept lengths); None: real acceptance. Needs speculative.",
    )
    max_model_len: int | None = Field(
        None, ge=16, le=MAX_CONTEXT_TOKENS, description="Maximum sequence length (None: the model's own)."
    )
    enable_prefix_caching: bool = Field(
        False, description="Prefix caching; off by default so repeated prompts do not inflate the speed."
    )
    host: Annotated[str | None, AfterValidator(check_host)] = Field(
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
        le=MAX_SECONDS,
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

    @field_validator("model", "image", "extra_env")
    @classmethod
    def _names(cls, value: Any, info: ValidationInfo) -> Any:
        """The model's id and the image are identifiers (:func:`~alflow.util.names.check_identifier`); env names."""
        if info.field_name in ("model", "image"):
            if value is not None and _USERINFO.match(value):  # bob:pw@registry/...: stored in every manifest
                raise ValueError(
                    f"{info.field_name} carries user:password@: give the reference alone and log in to the registry "
                    "instead (docker login), so no password is stored with the run"
                )
            if value is None:
                return None
            return (check_image if info.field_name == "image" else check_identifier)(
                value, what=info.field_name
            )
        check_env_names(value)
        return value

    @field_validator("extra_args")
    @classmethod
    def _no_secret_args(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for index, arg in enumerate(value):
            if "\0" in arg:  # execve cannot pass it: the start would fail with a traceback
                raise ValueError(
                    f"{_where(value, index)} holds a NUL character: a command-line argument cannot"
                )
            bad = control_characters(arg)
            if (
                bad
            ):  # run --dry-run prints the command line: ESC, an OSC, RLO would drive the terminal (R13-6)
                raise ValueError(
                    f"{_where(value, index)} holds the control or format character(s) {', '.join(bad)}: an argument "
                    "may hold any printable character, tab and newline, but no other control or format character"
                )
            flag = arg.split("=", 1)[0]
            named = arg.split("=", 2)[1] if arg.count("=") >= 2 else ""  # --env=HF_TOKEN=...
            if "=" in arg and any(
                ENV_NAME.fullmatch(n) and is_secret_name(n) for n in (flag, named)
            ):  # "-e HF_TOKEN=..." for a runner
                raise ValueError(
                    f"extra_args sets {shown(flag)}=..., which looks like a secret: its value would be stored in clear "
                    "in manifest.json, the reports and Prefect's database; list the variable's name in the runner's "
                    "secrets (placement.runner.secrets) instead"
                )
            key = _json_secret(arg)
            if (
                key
            ):  # --kv-transfer-config '{"...": {"aws_secret_access_key": ...}}': its value is never shown
                raise ValueError(
                    f"extra_args holds JSON with the secret-named key {shown(key)}: its value would be stored in clear "
                    "in manifest.json, the reports and Prefect's database; give the server the secret through a "
                    "variable listed in the runner's secrets (placement.runner.secrets) instead"
                )
            if _credential(arg):  # a header, a token, a password in a URL: never shown, even redacted (R13-7)
                raise ValueError(
                    f"{_where(value, index)} holds a credential (not shown): it would be stored in clear in "
                    "manifest.json, the reports and Prefect's database; give it to the server through a variable "
                    "listed in the runner's secrets (placement.runner.secrets) instead"
                )
            if is_secret_flag(flag) or _abbreviates_secret_flag(flag):
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
        for name, text in value.items():
            if "\0" in text:  # execve cannot pass it: the start would fail with a traceback
                raise ValueError(f"extra_env {name} holds a NUL character: an environment value cannot")
            bad = control_characters(text) or control_characters(name, keep="")
            if bad:  # run --dry-run prints the environment: ESC, an OSC, RLO would drive the terminal (R13-6)
                raise ValueError(
                    f"extra_env {shown(name)} holds the control or format character(s) {', '.join(bad)}: a name may "
                    "hold none, a value any printable character, tab and newline, but no other control or format "
                    "character"
                )
        secret = sorted(
            name
            for name, text in value.items()
            if is_secret_name(name) or is_secret_key(name) or _credential(text)
        )
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
        notes = [n for n in (self.ENGINE_NOTE, self.label) if n]
        return " ".join(notes) or None

    @model_validator(mode="after")
    def _synthetic_needs_speculation(self) -> Self:
        if self.synthetic is not None and self.speculative is None:
            raise ValueError(
                "synthetic acceptance needs speculative decoding (set speculative: method and k)"
            )
        if self.synthetic is not None and self.speculative is not None:
            self.synthetic.target(self.speculative.k)  # target AL in [1, K+1], rates of length K
        return self

    @model_validator(mode="after")
    def _only_known_fields(self) -> Self:
        """An unknown field is refused; a framework-only field on another framework says whose it is.

        (Unknown fields are collected with ``extra="allow"`` and refused here, not with ``extra="forbid"``,
        to word these messages; a ``mode="before"`` check would validate JSON in Python mode, where strict
        tuples refuse lists.)
        """
        for name in self.model_extra or {}:
            owners, why = _own_fields().get(name, ((), ""))
            if why and self.framework not in owners:
                raise ValueError(why.format(framework=self.framework))
            raise ValueError(
                f"Extra inputs are not permitted: {name!r} is not a field of a {self.framework} server configuration"
            )
        return self

    @property
    def gpu_framework(self) -> str:
        """Whose GPU-counting rules apply: the framework, or the dialect the simulator speaks."""
        return self.framework

    def instance_gpus(self, parallelism: Parallelism) -> int:
        """GPUs one server instance with ``parallelism`` occupies, by this framework's rules (``tp x pp x dp``)."""
        return dp_gpus(parallelism)

    def weights_path(self) -> str | None:
        """Where the weights are, apart from the served name (vLLM's ``model_path``); None elsewhere."""
        return None

    def disaggregated(self) -> Disaggregation | None:
        """The prefill/decode layout (SGLang's ``disaggregation``); None for one server."""
        return None

    def two_model_choice(self) -> bool | None:
        """TensorRT-LLM's one-model/two-model switch (the sim's too, in that dialect); None: the method's default."""
        return None

    def role_gpus(self, role: DisaggregatedRole) -> int:
        """GPUs of one instance of a disaggregated role."""
        return self.instance_gpus(role.parallelism)

    @property
    def total_gpus(self) -> int:
        """GPUs the whole server occupies (every instance of both roles when disaggregated)."""
        dis = self.disaggregated()
        if dis is None:
            return self.instance_gpus(self.parallelism)
        return (
            self.role_gpus(dis.prefill) * dis.prefill.replicas
            + self.role_gpus(dis.decode) * dis.decode.replicas
        )


class TwoModelSwitch(ServerBase):
    """A variant with a one-model/two-model switch for its drafter (TensorRT-LLM's, and the simulator's in that dialect)."""

    OWN_FIELDS: ClassVar[Mapping[str, str]] = {
        "two_model": "two_model applies to TensorRT-LLM only, not {framework!r}"
    }

    two_model: bool | None = Field(
        None,
        description=(
            "TensorRT-LLM (and the simulator's trtllm dialect) only: run EAGLE3 as two models (separate drafter "
            "engine); None: the method's default (one model for mtp and eagle3, two for draft_model and ngram)."
        ),
    )

    def two_model_choice(self) -> bool | None:
        """``two_model``."""
        return self.two_model


def _own_fields() -> dict[str, tuple[tuple[str, ...], str]]:
    """Every variant's own fields: the frameworks whose variant has each, and the first one's message."""
    fields: dict[str, tuple[tuple[str, ...], str]] = {}
    for name, model in zip(framework_names(), config_models(), strict=True):
        for field_name, why in getattr(model, "OWN_FIELDS", {}).items():
            owners, first = fields.get(field_name, ((), why))
            fields[field_name] = ((*owners, name), first)
    return fields


def engine_note_of(framework: str) -> str | None:
    """The label the numbers of ``framework`` carry in reports (its variant's ``ENGINE_NOTE``; None: a real one)."""
    note = getattr(config_model_of(framework), "ENGINE_NOTE", None)
    return note if isinstance(note, str) else None


if TYPE_CHECKING:
    # statically the common base: a variant's own fields are read through its accessors (weights_path(),
    # disaggregated(), two_model_choice()) or by its plugin after an isinstance check
    ServerConfig = ServerBase
else:
    # every registered framework's model: the built-in plugins' (alflow/frameworks/<name>/config.py) and any
    # entry point's (alflow.plugins)
    ServerConfig = Annotated[Union[config_models()], Field(discriminator="framework")]  # noqa: UP007
"""One serving-engine configuration: the variant of its ``framework`` (see :class:`ServerBase`)."""

_SERVER: TypeAdapter[ServerConfig] = TypeAdapter(ServerConfig, config=ConfigDict(hide_input_in_errors=True))


def server_config(data: Any = None, /, **fields: Any) -> ServerConfig:
    """A server configuration from a mapping or keyword fields, as the variant its ``framework`` names.

    ``server_config(framework="sim", model="m")`` is the sim plugin's ``SimServer``; a mapping may be a
    ``model_dump()`` of any variant.
    """
    return _SERVER.validate_python({**(data or {}), **fields})
