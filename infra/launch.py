"""The Launch: everything a runner needs to start one server, and nothing runner-specific.

A recipe (``infra.recipes``) builds a :class:`Launch` from a :class:`alflow.config.ServerConfig`; a
runner (``infra.runners``) starts it as a local process or a container. The Launch holds the exact
argument list and environment (secrets only *by name*: their values are read by the runner at start
and never stored here), the files the server reads (e.g. TensorRT-LLM's YAML), where it listens, and
where its health and metrics endpoints are. :meth:`Launch.provenance` is what a run records.
"""

from __future__ import annotations

import shlex
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from alflow.acceptance.knobs import SGLANG_LEN_ENV, SGLANG_METHOD_ENV, SGLANG_TOKEN_MODE_ENV, TRTLLM_ENV

REDACTED = "***"
SECRET_NAME_HINTS = (
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "API_KEY",
    "ACCESS_KEY",
    "PRIVATE_KEY",
    "CREDENTIAL",
)
"""An environment variable whose name contains one of these is treated as a secret and redacted."""
KNOB_ENV_NAMES = frozenset({SGLANG_LEN_ENV, SGLANG_METHOD_ENV, SGLANG_TOKEN_MODE_ENV, TRTLLM_ENV})
"""Environment variables that force acceptance: only a Launch's own env may set them (recipes put them
there from the config's ``synthetic``; runners never pass them through from their own environment)."""
DEFAULT_FILES_DIR = "/alflow"
"""Where launch files live by default (in a container; a process runner relocates them)."""
WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", ""})  # noqa: S104 (names of wildcard addresses)

# Multi-node placeholders (issue 10). A recipe puts these strings in ``argv`` (alone or inside a longer
# argument, e.g. ``"@ALFLOW_HEAD_ADDR@:29500"``); the runner replaces them on each node at start:
# the Slurm runner in the job script (rank from SLURM_NODEID, head address from the first node's
# NodeAddr), single-host runners with rank 0, this host and 1 node.
NODE_RANK = "@ALFLOW_NODE_RANK@"
"""Replaced by the node's rank within the server (0 on the head node)."""
HEAD_ADDR = "@ALFLOW_HEAD_ADDR@"
"""Replaced by the address of the head node (rank 0), reachable from every node."""
NNODES = "@ALFLOW_NNODES@"
"""Replaced by the number of nodes the server spans."""
NODE_PLACEHOLDERS = (NODE_RANK, HEAD_ADDR, NNODES)


def substitute_node(argv: tuple[str, ...], *, rank: int, head_addr: str, nnodes: int) -> tuple[str, ...]:
    """``argv`` with the multi-node placeholders replaced for one node (single-host runners use this)."""
    values = {NODE_RANK: str(rank), HEAD_ADDR: head_addr, NNODES: str(nnodes)}
    out = []
    for arg in argv:
        filled = arg
        for placeholder, value in values.items():
            filled = filled.replace(placeholder, value)
        out.append(filled)
    return tuple(out)


@dataclass(frozen=True)
class MetricsEndpoint:
    """One Prometheus endpoint of a multi-endpoint server: on node ``node`` (0 = head), at ``port`` and ``path``.

    A server that exposes spec-decode counters in several places (data-parallel replicas, decode
    workers of a disaggregated setup) lists them all; the scraper reads every one and sums counters.
    """

    node: int
    port: int
    path: str = "/metrics"

    def __post_init__(self) -> None:
        if self.node < 0:
            raise ValueError(f"metrics endpoint node index must be >= 0, got {self.node}")
        if not 0 < self.port < 65536:
            raise ValueError(f"metrics endpoint port must be in 1..65535, got {self.port}")


def is_secret_name(name: str) -> bool:
    """True when an environment variable name looks like a secret (HF_TOKEN, AWS_SECRET_ACCESS_KEY...)."""
    upper = name.upper()
    return any(hint in upper for hint in SECRET_NAME_HINTS)


def redact_env(env: Mapping[str, str], secret_names: tuple[str, ...] = ()) -> dict[str, str]:
    """A copy of ``env`` with the values of secret-looking and explicitly named variables replaced."""
    return {
        key: (REDACTED if key in secret_names or is_secret_name(key) else value) for key, value in env.items()
    }


def redact_text(text: str, secrets: Mapping[str, str]) -> str:
    """``text`` with every occurrence of a secret *value* replaced (for log lines and error messages)."""
    for value in secrets.values():
        if value and len(value) >= 4:
            text = text.replace(value, REDACTED)
    return text


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now (bind port 0, read it, close)."""
    bind_host = "127.0.0.1" if host in WILDCARD_HOSTS else host
    family = socket.AF_INET6 if ":" in bind_host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((bind_host, 0))
        port: int = sock.getsockname()[1]
        return port


def connect_host(bind_host: str) -> str:
    """The address a client on the same host uses to reach a server bound to ``bind_host``."""
    if bind_host in WILDCARD_HOSTS:
        return "127.0.0.1"
    return f"[{bind_host}]" if ":" in bind_host else bind_host


@dataclass(frozen=True)
class LaunchFile:
    """A file the server reads at start, materialised by the runner under ``Launch.files_dir``."""

    name: str
    content: str

    def __post_init__(self) -> None:
        if not self.name or "/" in self.name or self.name in (".", ".."):
            raise ValueError(f"launch file name {self.name!r} must be a plain file name")


@dataclass(frozen=True)
class Launch:
    """How to start one server: argument list, environment, files, port, endpoints and provenance.

    ``argv[0]`` is the program (a container's entrypoint is replaced by it). ``env`` holds no secret
    values: ``secret_env`` names the variables a runner passes through from its secret source.
    Files are referenced in ``argv`` as ``files_dir/name``; a runner that puts them elsewhere calls
    :meth:`relocated`.
    """

    framework: str
    dialect: str
    model: str
    argv: tuple[str, ...]
    port: int
    host: str = "0.0.0.0"  # noqa: S104 (servers in containers must be reachable)
    env: Mapping[str, str] = field(default_factory=dict)
    files: tuple[LaunchFile, ...] = ()
    files_dir: str = DEFAULT_FILES_DIR
    health_path: str = "/health"
    metrics_path: str = "/metrics"
    readiness_timeout_s: float = 1800.0
    image: str | None = None
    secret_env: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    synthetic: Mapping[str, object] | None = None
    nodes: int = 1
    """Nodes the server spans (1: single host). Only a multi-node runner (Slurm) can start more than one."""
    metrics_endpoints: tuple[MetricsEndpoint, ...] = ()
    """Every metrics endpoint to scrape and sum; empty: only the head's ``port`` + ``metrics_path``."""

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise ValueError(f"a Launch spans at least 1 node, got nodes={self.nodes}")
        for endpoint in self.metrics_endpoints:
            if endpoint.node >= self.nodes:
                raise ValueError(
                    f"metrics endpoint on node {endpoint.node} but the Launch spans {self.nodes} node(s)"
                )
        if not self.argv:
            raise ValueError("a Launch needs a program to run (argv is empty)")
        if not 0 < self.port < 65536:
            raise ValueError(f"a Launch needs a concrete port in 1..65535, got {self.port}")
        for key in self.env:
            if key in self.secret_env:
                raise ValueError(f"{key} is a secret: pass it by name in secret_env, not as a value in env")

    def file_path(self, name: str) -> str:
        """Where the server finds launch file ``name``."""
        return f"{self.files_dir.rstrip('/')}/{name}"

    def base_url(self, host: str | None = None, port: int | None = None) -> str:
        """``http://HOST:PORT`` as seen by a client on the same host (or the given host/port)."""
        return f"http://{host or connect_host(self.host)}:{port or self.port}"

    def command_line(self) -> str:
        """The argument list as one shell-quoted line (for display and provenance only; never run)."""
        return shlex.join(self.argv)

    def relocated(self, files_dir: str) -> Launch:
        """A copy of this Launch with its files under ``files_dir``: argv and env references are rewritten."""
        mapping = {self.file_path(f.name): f"{files_dir.rstrip('/')}/{f.name}" for f in self.files}
        return replace(
            self,
            files_dir=files_dir,
            argv=tuple(mapping.get(arg, arg) for arg in self.argv),
            env={key: mapping.get(value, value) for key, value in self.env.items()},
        )

    def provenance(self) -> dict[str, object]:
        """What a run records about its server: the exact command, environment (redacted), files."""
        return {
            "framework": self.framework,
            "dialect": self.dialect,
            "model": self.model,
            "image": self.image,
            "argv": list(self.argv),
            "command": self.command_line(),
            "env": redact_env(self.env, self.secret_env),
            "secret_env": list(self.secret_env),
            "files": {self.file_path(f.name): f.content for f in self.files},
            "port": self.port,
            "health_path": self.health_path,
            "metrics_path": self.metrics_path,
            "warnings": list(self.warnings),
            "synthetic": None if self.synthetic is None else dict(self.synthetic),
            "nodes": self.nodes,
            "metrics_endpoints": [
                {"node": e.node, "port": e.port, "path": e.path} for e in self.metrics_endpoints
            ],
        }
