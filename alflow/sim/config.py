"""Settings of the simulated engine, and how they are read from the places real frameworks read them.

Explicit command-line flags are one source; the framework's own switches are the other, read only for the
matching ``--dialect`` (DOMAIN.md sections 3 and 8) by that framework's plugin (``alflow/frameworks/<name>/sim.py``):
its flags, the arguments the simulator's command line does not define (vLLM's ``--speculative-config JSON``, ATOM's
``--spec-decode-acceptance-length``; ``Framework.sim_args``), and its environment variables (SGLang's
``SGLANG_SIMULATE_ACC_*``, TensorRT-LLM's ``TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS``; ``Framework.sim_env``).
Which dialects exist comes from the registry's plain data (:mod:`alflow.plugins`); their default schemes, knob
variables and emitters from the typed registry (:mod:`alflow.frameworks.registry`).

Rules: an explicit flag wins over the framework source (a warning is logged when they differ); a
framework source given to the wrong dialect, or one that contradicts itself, is an error that names
both; values are validated with the acceptance package's rules.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from alflow.acceptance.synthetic import SyntheticTarget, get_scheme
from alflow.errors import InvalidInputError
from alflow.plugins import dialect_names
from alflow.sim.acceptance import METHODS
from alflow.sim.dialects import MetricsEmitter
from alflow.sim.profiles import DEFAULT_PROFILE, get_profile
from alflow.sim.sources import FrameworkSettings, sim_plugin, sim_plugins
from alflow.util.fsutil import file_problem
from alflow.util.names import shown

log = logging.getLogger(__name__)

Dialect = str
"""A framework the simulator speaks (:func:`alflow.plugins.dialect_names`)."""

SGLANG_TOKEN_MODES = ("fixed", "real-draft-token")
PER_REQUEST_LEVELS = ("none", "summary", "detailed")
"""vLLM's ``--per-request-spec-decode-metrics`` levels (vllm/config/observability.py)."""
NODE_PARALLEL = ("tp", "dp")
"""How a multi-node simulated server uses its nodes: one model across them, or one engine per node."""
SGLANG_FIXED_TOKEN_ID = 100


@dataclass(frozen=True)
class SimConfig:
    """Everything the simulated engine is configured with (validated by :meth:`validate`)."""

    host: str = "127.0.0.1"
    port: int = 8000
    model_name: str = "llama-3.3-70b"
    dialect: Dialect = "vllm"
    k: int = 3
    method: str = "mtp"
    synthetic_al: float | None = None
    synthetic_rates: tuple[float, ...] | None = None
    synthetic_scheme: str | None = None
    max_num_seqs: int = 256
    max_model_len: int = 32768
    seed: int = 0
    profile: str = DEFAULT_PROFILE
    time_scale: float = 1.0
    step_log: Path | None = None
    acceptance_quality: float = 1.0
    mean_output_tokens: int = 300
    answer_key: Path | None = None
    answer_accuracy: float = 1.0
    startup_delay_s: float = 0.0
    fail_startup: bool = False
    crash_after_requests: int | None = None
    error_rate: float = 0.0
    stream_error_rate: float = 0.0
    stall_after_tokens: int | None = None
    sglang_window_steps: int = 40
    short_draft_share: float = 0.0
    """The share of a request's verify steps that propose fewer than K drafts (1..K-1, uniform), as n-gram partial
    matches, grammar or adaptive verification do: accepted drafts are capped by the drafts proposed."""
    sglang_token_mode: str = "fixed"  # noqa: S105 - not a secret
    nnodes: int = 1
    node_rank: int = 0
    head_addr: str | None = None
    dist_port: int | None = None
    node_parallel: str = "tp"
    join_timeout_s: float = 300.0
    heartbeat_s: float = 0.5
    peer_timeout_s: float = 5.0
    notes: tuple[str, ...] = field(default=())
    framework_version: str | None = None
    """The framework version the server reports (tests of alflow's release gates); None: ``alflow-sim``."""
    per_request_spec_decode_metrics: str = "none"
    """vLLM's ``--per-request-spec-decode-metrics`` (none, summary, detailed; dialect vllm only): each response
    carries ``metrics.speculative_decoding`` as vLLM 0.32.0 sends it (:mod:`alflow.sim.payloads`)."""
    sglang_spec_details: bool = True
    """SGLang dialect: answer ``return_spec_tokens_details: true`` with ``sglext.spec_tokens_details`` as SGLang
    with PR #33518 does (:mod:`alflow.sim.payloads`); False: ignore the field, as an older SGLang does."""
    api_key: str | None = field(default=None, repr=False)
    """Requests to /v1/* need ``Authorization: Bearer <api_key>`` (vLLM's ``--api-key``); None: open."""

    @property
    def multi_node(self) -> bool:
        """True when the server spans more than one node (a head and workers, :mod:`alflow.sim.cluster`)."""
        return self.nnodes > 1

    @property
    def node_port(self) -> int:
        """The port this node listens on: ``--port + node_rank`` (nodes may share one address)."""
        return self.port + self.node_rank if self.port else 0

    @property
    def served_model_name(self) -> str:
        """The model name as served: always prefixed ``sim/``."""
        return self.model_name if self.model_name.startswith("sim/") else f"sim/{self.model_name}"

    @property
    def synthetic(self) -> bool:
        """True when acceptance is forced (synthetic mode), False for natural acceptance."""
        return self.synthetic_al is not None or self.synthetic_rates is not None

    @property
    def fixed_token_output(self) -> bool:
        """SGLang synthetic acceptance in ``fixed`` token mode: every output token is id 100."""
        return self.dialect == "sglang" and self.synthetic and self.sglang_token_mode == "fixed"  # noqa: S105

    @property
    def scheme(self) -> str:
        """The synthetic scheme in use: the explicit one, else the dialect's own."""
        return self.synthetic_scheme or default_scheme(self.dialect)

    def validate(self) -> SimConfig:
        """Return self if every value is allowed, else raise InvalidInputError naming the value."""
        _check_choice("--dialect", self.dialect, dialect_names())
        _check_choice("--method", self.method, METHODS)
        if self.synthetic:
            get_scheme(self.scheme)
            target = SyntheticTarget.of(self.k, al=self.synthetic_al, rates=self.synthetic_rates)
            if target.rates is not None and not get_scheme(self.scheme).accepts_rates:
                raise InvalidInputError(
                    f"--synthetic-rates needs a scheme that takes rates (vllm); {self.scheme!r} takes an AL"
                )
        else:
            SyntheticTarget.of(self.k, al=1.0)  # validates K
            if self.synthetic_scheme is not None:
                get_scheme(self.synthetic_scheme)
        _check_choice(
            "--per-request-spec-decode-metrics", self.per_request_spec_decode_metrics, PER_REQUEST_LEVELS
        )
        # vLLM also refuses the flag without --speculative-config (vllm/config/vllm.py); the sim always speculates
        # (K >= 1 is checked above), so only the dialect can be wrong here
        if self.per_request_spec_decode_metrics != "none" and self.dialect != "vllm":
            raise InvalidInputError(
                f"--per-request-spec-decode-metrics {self.per_request_spec_decode_metrics} is vLLM's (--dialect vllm), "
                f"not {self.dialect}'s: SGLang sends its per-request counts in sglext.spec_tokens_details when a "
                "request asks (return_spec_tokens_details), TensorRT-LLM sends none"
            )
        get_profile(self.profile)
        _check_range("--port", self.port, 0, 65535)
        _check_range("--max-num-seqs", self.max_num_seqs, 1, 1_000_000)
        _check_range("--max-model-len", self.max_model_len, 16, 10_000_000)
        _check_range("--mean-output-tokens", self.mean_output_tokens, 1, 10_000_000)
        _check_range("--sglang-window-steps", self.sglang_window_steps, 1, 1_000_000)
        _check_float("--short-draft-share", self.short_draft_share, 0.0, 1.0)
        _check_float("--time-scale", self.time_scale, 0.0, 1e6)
        _check_float("--acceptance-quality", self.acceptance_quality, 0.0, 1.5)
        _check_float("--answer-accuracy", self.answer_accuracy, 0.0, 1.0)
        _check_float("--startup-delay", self.startup_delay_s, 0.0, 3600.0)
        _check_float("--error-rate", self.error_rate, 0.0, 1.0)
        _check_float("--stream-error-rate", self.stream_error_rate, 0.0, 1.0)
        if self.crash_after_requests is not None:
            _check_range("--crash-after-requests", self.crash_after_requests, 0, 1 << 40)
        if self.stall_after_tokens is not None:
            _check_range("--stall-after-tokens", self.stall_after_tokens, 0, 1 << 40)
        _check_choice("--sglang-token-mode", self.sglang_token_mode, SGLANG_TOKEN_MODES)
        if self.answer_key is not None:
            why = file_problem(self.answer_key)  # a name too long: one line, not an OSError traceback
            if why is not None:
                raise InvalidInputError(f"--answer-key {shown(str(self.answer_key))} {why}")
        self._validate_nodes()
        return self

    def _validate_nodes(self) -> None:
        _check_range("--nnodes", self.nnodes, 1, 1024)
        _check_range("--node-rank", self.node_rank, 0, 1023)
        if self.node_rank >= self.nnodes:
            raise InvalidInputError(f"--node-rank {self.node_rank} must be below --nnodes {self.nnodes}")
        _check_choice("--node-parallel", self.node_parallel, NODE_PARALLEL)
        _check_float("--join-timeout", self.join_timeout_s, 0.1, 86400.0)
        _check_float("--heartbeat-interval", self.heartbeat_s, 0.01, 60.0)
        _check_float("--peer-timeout", self.peer_timeout_s, 0.05, 3600.0)
        if self.peer_timeout_s <= self.heartbeat_s:
            raise InvalidInputError(
                f"--peer-timeout {self.peer_timeout_s:g} must be longer than --heartbeat-interval {self.heartbeat_s:g}"
            )
        if not self.multi_node:
            return
        if self.port == 0:
            raise InvalidInputError(
                f"--nnodes {self.nnodes} needs an explicit --port (node R listens on --port + R), not 0"
            )
        _check_range("--port + node rank", self.port + self.nnodes - 1, 1, 65535)
        if self.dist_port is None:
            raise InvalidInputError(
                f"--nnodes {self.nnodes} needs --dist-port (where the head takes workers)"
            )
        _check_range("--dist-port", self.dist_port, 1, 65535)
        if self.port <= self.dist_port < self.port + self.nnodes:
            raise InvalidInputError(
                f"--dist-port {self.dist_port} collides with the nodes' ports {self.port}..{self.port + self.nnodes - 1}"
            )
        if self.node_rank > 0 and not self.head_addr:
            raise InvalidInputError(f"--node-rank {self.node_rank} (a worker) needs --head-addr")


def default_scheme(dialect: str) -> str:
    """The synthetic scheme a framework uses unless told otherwise (its plugin's knob renderer's)."""
    knobs = sim_plugin(dialect).knobs
    if knobs is None:
        raise InvalidInputError(f"--dialect {dialect!r} has no synthetic acceptance of its own")
    return knobs.default_scheme


def framework_env() -> dict[str, str]:
    """Every framework's knob environment variable -> the framework that reads it."""
    return {name: f.name for f in sim_plugins() for name in sorted(f.knob_env)}


def _check_choice(name: str, value: str, choices: Sequence[str]) -> None:
    if value not in choices:
        raise InvalidInputError(f"{name} {value!r} is not one of {', '.join(choices)}")


def _check_range(name: str, value: int, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidInputError(f"{name}={value!r} must be an integer in [{low}, {high}]")


def _check_float(name: str, value: float, low: float, high: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidInputError(f"{name}={value!r} is not a finite number")
    if not low <= value <= high:
        raise InvalidInputError(f"{name}={value!r} must be in [{low}, {high}]")


def parse_rates(text: str) -> tuple[float, ...]:
    """``"1,0.8,0.5"`` or ``"[1, 0.8, 0.5]"`` -> a tuple of floats (error names the text)."""
    stripped = text.strip().strip("[]")
    try:
        return tuple(float(part) for part in stripped.replace(" ", ",").split(",") if part)
    except ValueError:
        raise InvalidInputError(f"--synthetic-rates {text!r}: expected numbers separated by commas") from None


def _not_this_dialects(dialect: str, args: Sequence[str]) -> str:
    """Why ``args`` are refused in ``dialect``: whose flag the first is, if another framework's."""
    flag = args[0].split("=", 1)[0]
    owners = [f.name for f in sim_plugins() if flag in f.sim_flags]
    if owners:
        return (
            f"{flag} is {owners[0]}'s switch but --dialect is {dialect!r}; use that framework's own source or "
            "explicit --synthetic-* flags"
        )
    return f"unknown arguments for the simulator in dialect {dialect!r}: {' '.join(args)}"


def _framework_sources(
    dialect: str, env: Mapping[str, str], framework_args: Sequence[str]
) -> list[FrameworkSettings]:
    """The settings in ``dialect``'s own sources; another framework's variables are ignored with a warning."""
    found: list[FrameworkSettings] = []
    plugin = sim_plugin(dialect)
    if plugin.sim_env is not None:
        found.append(plugin.sim_env(env))
    if framework_args:
        if plugin.sim_args is None:
            raise InvalidInputError(_not_this_dialects(dialect, framework_args))
        found.append(plugin.sim_args(framework_args))
    for name, owner in framework_env().items():
        if name in env and owner != dialect:
            log.warning("ignoring %s: it is %s's switch and --dialect is %s", name, owner, dialect)
    return found


def resolve(
    base: SimConfig,
    *,
    explicit: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    framework_args: Sequence[str] = (),
) -> SimConfig:
    """Merge the dialect's framework source into ``base``; fields named in ``explicit`` win.

    ``explicit`` lists the SimConfig field names the user set on the command line; ``framework_args`` are the
    arguments it did not define, read by the dialect's plugin (its ``sim_args``). Raises
    InvalidInputError when a framework source belongs to another dialect or contradicts itself.
    """
    found = _framework_sources(base.dialect, {} if env is None else env, framework_args)
    cfg = base
    notes = list(base.notes)
    for fs in found:
        updates: dict[str, object] = {}
        pairs: list[tuple[str, object]] = [
            ("k", fs.k),
            ("method", fs.method),
            ("synthetic_al", fs.al),
            ("synthetic_rates", fs.rates),
            ("synthetic_scheme", fs.scheme),
            ("sglang_token_mode", fs.token_mode),
        ]
        for name, value in pairs:
            if value is None:
                continue
            if name in explicit:
                if getattr(cfg, name) != value:
                    msg = f"{name}={getattr(cfg, name)!r} from the command line overrides {fs.source} ({value!r})"
                    log.warning(msg)
                    notes.append(msg)
                continue
            updates[name] = value
        # an explicit AL overrides rates from the source and vice versa (one target only)
        if "synthetic_al" in explicit or "synthetic_rates" in explicit:
            updates.pop("synthetic_al", None)
            updates.pop("synthetic_rates", None)
        if updates:
            notes.append(f"from {fs.source}: " + ", ".join(f"{k}={v!r}" for k, v in updates.items()))
        cfg = replace(cfg, **updates)  # type: ignore[arg-type]
    if cfg.synthetic_al is not None and cfg.synthetic_rates is not None:
        raise InvalidInputError("give only one of --synthetic-al and --synthetic-rates")
    return replace(cfg, notes=tuple(notes)).validate()


def emitter_of(dialect: str) -> MetricsEmitter:
    """The metrics emitter of ``dialect``: its framework plugin's ``sim`` (vLLM's, SGLang's, TensorRT-LLM's are here)."""
    emitter = sim_plugin(dialect).sim
    if emitter is None:
        raise InvalidInputError(f"framework {dialect!r} has no dialect the simulator speaks")
    return emitter
