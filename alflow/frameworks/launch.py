"""The Launch: everything a runner needs to start one server, and nothing runner-specific.

A recipe (``alflow.frameworks.recipes``) builds a :class:`Launch` from a :class:`alflow.config.ServerConfig`; a
runner (``alflow_infra.runners``) starts it as a local process or a container. The Launch holds the exact
argument list and environment (secrets only *by name*: their values are read by the runner at start
and never stored here), the files the server reads (e.g. TensorRT-LLM's YAML), where it listens, and
where its health and metrics endpoints are. :meth:`Launch.provenance` is what a run records.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import shlex
import socket
import tempfile
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from alflow.acceptance.runtime_k import RuntimeKKnob
from alflow.errors import RunnerError
from alflow.frameworks.versions import Capability
from alflow.results.manifest import ServerProvenance
from alflow.util.free_text import REDACTED
from alflow.util.redact import redact_values
from alflow.util.rows import dump_row
from alflow.util.secret_names import is_secret_name

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
NODE_ADDR_PREFIX = "@ALFLOW_NODE_ADDR_"


def node_addr(index: int) -> str:
    """Placeholder replaced by the address of the job's node ``index`` (0: the first node of the server).

    For a program that must name another group's node, e.g. a disaggregated frontend naming the head
    of each prefill and decode group; ``HEAD_ADDR`` is the head of the program's own group.
    """
    if index < 0:
        raise ValueError(f"node index must be >= 0, got {index}")
    return f"{NODE_ADDR_PREFIX}{index}@"


def substitute_node(
    argv: tuple[str, ...],
    *,
    rank: int,
    head_addr: str,
    nnodes: int,
    node_addrs: tuple[str, ...] = (),
) -> tuple[str, ...]:
    """``argv`` with the multi-node placeholders replaced for one node (single-host runners use this).

    ``node_addrs`` fills :func:`node_addr` placeholders (default: ``head_addr`` for node 0 only).
    """
    values = {NODE_RANK: str(rank), HEAD_ADDR: head_addr, NNODES: str(nnodes)}
    for index, address in enumerate(node_addrs or (head_addr,)):
        values[node_addr(index)] = address
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


def redact_text(text: str, secrets: Mapping[str, str]) -> str:
    """``text`` with every occurrence of a secret *value* replaced (for log lines and error messages)."""
    return redact_values(text, secrets.values())


EPHEMERAL_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
LISTEN_PORT_FLOOR = 20000
"""The lowest port :func:`free_port` hands out when it can pick below the kernel's ephemeral range."""
_PORT_TRIES = 200


def ephemeral_range(path: str = EPHEMERAL_RANGE_FILE) -> tuple[int, int] | None:
    """The kernel's ephemeral (outgoing) port range, or None where it cannot be read (not Linux)."""
    try:
        low, high = (int(part) for part in Path(path).read_text(encoding="ascii").split())
    except (OSError, ValueError):
        return None
    return low, high


def _all_free(family: socket.AddressFamily, host: str, first: int, count: int) -> bool:
    socks: list[socket.socket] = []
    try:
        for port in range(first, first + count):
            sock = socket.socket(family, socket.SOCK_STREAM)
            socks.append(sock)
            sock.bind((host, port))
        return True
    except OSError:
        return False
    finally:
        for sock in socks:
            sock.close()


RECENT_PORTS = Path(tempfile.gettempdir()) / "alflow-recent-ports"
"""Ports :func:`free_port` handed out on this host lately (``port time`` lines, under an exclusive lock)."""
RECENT_PORTS_S = 300.0
"""How long a port handed out stays reserved: two alflow processes starting servers at once on one host never get
the same port (a free port is only free until its server binds it, seconds later; seen in CI, two sims on one
port, each run measuring the other's server)."""


def _reserve(first: int, count: int, now: float | None = None) -> bool:
    """Record ``first..first+count-1`` as handed out, unless one was handed out lately by any alflow process here.

    "Lately" is :data:`RECENT_PORTS_S`; a file that cannot be used reserves nothing and refuses nothing.
    """
    now = time.time() if now is None else now
    wanted = set(range(first, first + count))
    try:
        fd = os.open(RECENT_PORTS, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        return True
    with os.fdopen(fd, "r+", encoding="ascii") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        kept: list[tuple[int, float]] = []
        for line in f.read().splitlines():
            with contextlib.suppress(ValueError):
                port, stamp = line.split()
                if now - float(stamp) < RECENT_PORTS_S:
                    kept.append((int(port), float(stamp)))
        if wanted & {port for port, _ in kept}:
            return False
        kept += [(port, now) for port in sorted(wanted)]
        f.seek(0)
        f.truncate()
        f.write("".join(f"{port} {stamp:.3f}\n" for port, stamp in kept))
    return True


def free_port(host: str = "127.0.0.1", count: int = 1) -> int:
    """The first of ``count`` consecutive TCP ports that are free on ``host`` right now.

    The server binds the port later (seconds later on Slurm), so the choice avoids the kernel's
    ephemeral range where the system allows: a port from that range can be taken in between by any
    outgoing connection on the host, which is how a two-node job on one host once failed to bind
    ("address already in use"). Where the range cannot be read or leaves no room below it, a
    kernel-chosen port is used (and checked for ``count`` free ports). A port another alflow process on this host
    was given lately is never given again (:func:`_reserve`).
    """
    if count < 1:
        raise ValueError(f"count must be at least 1, not {count}")
    bind_host = "127.0.0.1" if host in WILDCARD_HOSTS else host
    family = socket.AF_INET6 if ":" in bind_host else socket.AF_INET
    span = ephemeral_range()
    if span is not None and span[0] - count > LISTEN_PORT_FLOOR:
        rng = random.SystemRandom()
        for _ in range(_PORT_TRIES):
            first = rng.randrange(LISTEN_PORT_FLOOR, span[0] - count + 1)
            if _all_free(family, bind_host, first, count) and _reserve(first, count):
                return first
    for _ in range(_PORT_TRIES):
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.bind((bind_host, 0))
            first = int(sock.getsockname()[1])
        if (
            first + count - 1 <= 65535
            and _all_free(family, bind_host, first, count)
            and _reserve(first, count)
        ):
            return first
    raise RunnerError(f"no {count} consecutive free TCP port(s) on {bind_host} after {_PORT_TRIES} tries")


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


def _check_program(argv: tuple[str, ...], what: str) -> None:
    if not argv:
        raise ValueError(f"{what} needs a program to run (its argument list is empty)")


@dataclass(frozen=True)
class LaunchGroup:
    """One program of a disaggregated server, run on its own consecutive nodes of the job.

    ``first_node`` is the group's first node within the server (0: the job's first node); on the
    group's nodes the placeholders mean: ``NODE_RANK`` the rank within the group, ``HEAD_ADDR`` the
    address of the group's first node, ``NNODES`` the group's node count. ``worker_argv`` (None: the
    same as ``argv``) runs on the group's nodes of rank > 0. ``port`` is where the group's head serves.
    """

    name: str
    role: str
    first_node: int
    nodes: int
    argv: tuple[str, ...]
    port: int
    worker_argv: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if not self.name or shlex.quote(self.name) != self.name:
            raise ValueError(f"launch group name {self.name!r} must be a plain word")
        if self.first_node < 0 or self.nodes < 1:
            raise ValueError(
                f"launch group {self.name!r} needs first_node >= 0 and nodes >= 1, "
                f"got first_node={self.first_node}, nodes={self.nodes}"
            )
        _check_program(self.argv, f"launch group {self.name!r}")
        if self.worker_argv is not None:
            _check_program(self.worker_argv, f"the workers of launch group {self.name!r}")
        if not 0 < self.port < 65536:
            raise ValueError(f"launch group {self.name!r} needs a port in 1..65535, got {self.port}")

    @property
    def node_range(self) -> range:
        """The server's node indexes this group runs on."""
        return range(self.first_node, self.first_node + self.nodes)


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
    image_warnings: tuple[str, ...] = ()
    """The release gates' warnings about ``image``'s tag (a tag without a version): they hold only where the
    server runs from that image, so a runner that uses no image (the process runner) drops them with
    :meth:`without_image` and the live server's version is checked instead."""
    synthetic: Mapping[str, object] | None = None
    nodes: int = 1
    """Nodes the server spans (1: single host). Only a multi-node runner (Slurm) can start more than one."""
    metrics_endpoints: tuple[MetricsEndpoint, ...] = ()
    """Every metrics endpoint to scrape and sum; empty: only the head's ``port`` + ``metrics_path``."""
    worker_argv: tuple[str, ...] | None = None
    """The argument list on nodes of rank > 0 when it differs from the head's (vLLM's ``--headless``
    workers); None: ``argv`` runs on every node."""
    gpus_per_node: int | None = None
    """GPUs the server uses on each node (from the parallelism); None: unknown or none (the simulator).
    The Slurm runner requests them when its options name no ``gpus_per_node``."""
    mpi: str | None = None
    """An MPI launch (TensorRT-LLM's ``trtllm-llmapi-launch``): the ``srun --mpi`` plugin (``pmix``);
    the Slurm runner starts ``tasks_per_node`` tasks on each node. None: one task per node."""
    tasks_per_node: int = 1
    """Tasks per node of an MPI launch (one per GPU); 1 otherwise."""
    groups: tuple[LaunchGroup, ...] = ()
    """A disaggregated server: each group (prefill, decode) runs on its own nodes, and ``argv`` is the
    frontend (router) run on the first node beside them; ``port`` is the frontend's. Empty: ``argv``
    is the whole server."""
    requirements: tuple[Capability, ...] = ()
    """What this configuration needs of the framework's release (:mod:`alflow.frameworks.versions`): checked against
    the image tag by the recipe, and against the live server's own version once it is ready."""
    version_paths: tuple[str, ...] = ("/version",)
    """Where the live server says its version (a JSON object with ``version``), tried in order."""
    release_args: tuple[tuple[Capability, tuple[str, ...]], ...] = ()
    """Arguments to add where the installed release is known to have the capability (an unset option that
    defaults to on where available, e.g. vLLM's per-request acceptance): a runner that can read the install
    (the process runner, through the recipe's ``check_install``) adds them; others leave them out."""
    engine_note: str | None = None
    """What this launch's numbers are, when the install changes it (e.g. synthetic acceptance through alflow's
    CPU port of vLLM's kernel rule): runs add it to their engine label in provenance, reports and artifacts."""
    runtime_k: tuple[RuntimeKKnob, ...] = ()
    """Runtime-varying-K knobs in the configuration (steps may verify fewer than K drafts): allowed with real
    acceptance and recorded here (the recipe refuses them with synthetic acceptance)."""

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise ValueError(f"a Launch spans at least 1 node, got nodes={self.nodes}")
        if self.tasks_per_node < 1:
            raise ValueError(f"tasks_per_node must be >= 1, got {self.tasks_per_node}")
        if self.tasks_per_node > 1 and self.mpi is None:
            raise ValueError(
                f"tasks_per_node={self.tasks_per_node} needs an MPI launch (set mpi, e.g. 'pmix')"
            )
        if self.mpi is not None and shlex.quote(self.mpi) != self.mpi:
            raise ValueError(f"mpi plugin {self.mpi!r} must be a plain word")
        if self.gpus_per_node is not None and self.gpus_per_node < 0:
            raise ValueError(f"gpus_per_node must be >= 0, got {self.gpus_per_node}")
        if self.worker_argv is not None:
            _check_program(self.worker_argv, "the workers of a Launch")
        self._check_groups()
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

    def _check_groups(self) -> None:
        if not self.groups:
            return
        if self.mpi is not None or self.worker_argv is not None:
            raise ValueError(
                "a disaggregated Launch takes no mpi or worker_argv of its own (each group has its worker_argv)"
            )
        used: dict[int, str] = {}
        for group in self.groups:
            for node in group.node_range:
                if node >= self.nodes:
                    raise ValueError(
                        f"launch group {group.name!r} runs on node {node} but the Launch spans {self.nodes} node(s)"
                    )
                if node in used:
                    raise ValueError(
                        f"launch groups {used[node]!r} and {group.name!r} both run on node {node}"
                    )
                used[node] = group.name
        if len(used) != self.nodes:
            idle = sorted(set(range(self.nodes)) - set(used))
            raise ValueError(f"no launch group runs on node(s) {idle} of the {self.nodes} the Launch spans")
        if len({g.name for g in self.groups}) != len(self.groups):
            raise ValueError("launch group names must be unique")

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

        def move(argv: tuple[str, ...] | None) -> tuple[str, ...] | None:
            return None if argv is None else tuple(mapping.get(arg, arg) for arg in argv)

        return replace(
            self,
            files_dir=files_dir,
            argv=move(self.argv) or (),
            worker_argv=move(self.worker_argv),
            groups=tuple(
                replace(g, argv=move(g.argv) or (), worker_argv=move(g.worker_argv)) for g in self.groups
            ),
            env={key: mapping.get(value, value) for key, value in self.env.items()},
        )

    def without_image(self) -> Launch:
        """The launch as a runner that uses no image starts it: no image, none of the image tag's warnings."""
        return replace(self, image=None, image_warnings=())

    def provenance(self) -> ServerProvenance:
        """What a run records about its server: the exact command, environment (redacted), files."""
        return ServerProvenance.model_validate(
            {
                "framework": self.framework,
                "dialect": self.dialect,
                "model": self.model,
                "image": self.image,
                "argv": list(self.argv),
                "command": self.command_line(),
                "env": {
                    k: REDACTED if k in self.secret_env or is_secret_name(k) else v
                    for k, v in self.env.items()
                },
                "secret_env": list(self.secret_env),
                "files": {self.file_path(f.name): f.content for f in self.files},
                "port": self.port,
                "health_path": self.health_path,
                "metrics_path": self.metrics_path,
                "warnings": [*self.image_warnings, *self.warnings],
                "synthetic": None if self.synthetic is None else dict(self.synthetic),
                "engine_note": self.engine_note,
                "runtime_k": [dump_row(k) for k in self.runtime_k],
                "nodes": self.nodes,
                "metrics_endpoints": [asdict(e) for e in self.metrics_endpoints],
                "worker_argv": None if self.worker_argv is None else list(self.worker_argv),
                "gpus_per_node": self.gpus_per_node,
                "mpi": self.mpi,
                "tasks_per_node": self.tasks_per_node,
                "requirements": [
                    {"feature": r.feature, "minimum": str(r.minimum), "source": r.source}
                    for r in self.requirements
                ],
                "groups": [
                    {
                        "name": g.name,
                        "role": g.role,
                        "first_node": g.first_node,
                        "nodes": g.nodes,
                        "port": g.port,
                        "argv": list(g.argv),
                        "command": shlex.join(g.argv),
                        "worker_argv": None if g.worker_argv is None else list(g.worker_argv),
                    }
                    for g in self.groups
                ],
            }
        )


def single_host(launch: Launch, *, runner: str, head_addr: str) -> Launch:
    """``launch`` as a single-host runner starts it: node placeholders filled for rank 0 of 1 node.

    ``head_addr`` is the address the server reaches itself at (``connect_host`` of its bind address).
    A server spanning several nodes (or a disaggregated one) is refused: only the slurm runner starts
    those. The provenance keeps the filled argument list (what actually ran).
    """
    if launch.nodes > 1 or launch.groups:
        what = "a disaggregated server" if launch.groups else f"a server spanning {launch.nodes} nodes"
        raise RunnerError(
            f"the {runner} runner starts a server on one host, but the {launch.framework} launch is {what}: "
            "use the slurm runner (runner kind 'slurm'), or set the server config's nodes to 1"
        )
    if launch.mpi is not None:
        raise RunnerError(
            f"the {launch.framework} launch is an MPI launch (srun --mpi={launch.mpi}): only the slurm runner starts it"
        )
    return replace(launch, argv=substitute_node(launch.argv, rank=0, head_addr=head_addr, nnodes=1))


def single_host_metrics_urls(
    launch: Launch, host: str, ports: Mapping[int, int] | None = None
) -> tuple[str, ...]:
    """The metrics URLs of ``launch.metrics_endpoints`` on one host (``ports`` maps container to host ports)."""
    mapped = ports or {}
    return tuple(
        launch.base_url(host=host, port=mapped.get(e.port, e.port)) + e.path for e in launch.metrics_endpoints
    )
