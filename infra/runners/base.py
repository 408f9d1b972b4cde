"""The runner contract: start a Launch, wait for health, read logs, stop; and the ServerHandle.

A :class:`ServerHandle` is plain data (URLs, dialect, an id the runner can stop, provenance): never
a live SDK object, so it can travel in a Prefect result. :func:`wait_for_health` is the shared
readiness loop: it polls the health URL and, between polls, asks the runner whether the server is
still alive, so a server that dies at start fails within a poll interval with its log tail.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Protocol

from pydantic import PlainSerializer

from alflow.errors import InvalidInputError
from alflow.frameworks.launch import Launch, redact_text
from alflow.frameworks.registry import never_inherited_env
from alflow.results.manifest import ServerProvenance
from alflow.util.redact import redact_url
from alflow_infra.errors import ServerRefusedError, ServerStartError

log = logging.getLogger(__name__)

LOG_TAIL_LINES = 100
"""Log lines attached to a start failure."""
LOG_TAIL_BYTES = 256 * 1024
"""How much of the end of a log file is read for a tail."""


SecretSource = Callable[[str], str | None]
"""Maps a secret's name to its value (default: the environment; a Prefect task may pass a Secret's)."""


def secret_values(names: Iterable[str], launch: Launch, source: SecretSource) -> dict[str, str]:
    """Values of the runner's and the launch's secrets that ``source`` knows (never logged or stored)."""
    return {name: value for name in dict.fromkeys((*names, *launch.secret_env)) if (value := source(name))}


def run_folder(log_dir: str | None, tag: str, prefix: str) -> Path:
    """``log_dir/tag`` (made; it must not exist yet), or without ``log_dir`` a new temporary folder named after ``tag``."""
    if not log_dir:
        return Path(tempfile.mkdtemp(prefix=f"{prefix}{tag}-"))
    folder = Path(log_dir).expanduser() / tag
    folder.mkdir(parents=True, exist_ok=False)
    return folder


def write_launch_files(launch: Launch, folder: Path) -> Launch:
    """``launch`` with its files written into ``folder/files`` and its arguments pointing there (unchanged: none)."""
    if not launch.files:
        return launch
    files_dir = folder / "files"
    files_dir.mkdir()
    for item in launch.files:
        (files_dir / item.name).write_text(item.content, encoding="utf-8")
    return launch.relocated(str(files_dir))


def inherited_env(keep: Callable[[str], bool] = lambda _name: True) -> dict[str, str]:
    """The environment a started server inherits: this process's, without the variables that carry synthetic knobs.

    A stray ``SGLANG_SIMULATE_ACC_LEN`` in a shell would make a "real" run synthetic behind the config's back: only
    the Launch may set those. ``keep`` drops more (the slurm runner's stale ``SLURM_*`` job variables).
    """
    dropped = never_inherited_env()  # and a synthetic-only shortcut's switch (a framework's shortcut_env)
    return {k: v for k, v in os.environ.items() if k not in dropped and keep(k)}


def run_tag(launch: Launch, run_id: str) -> str:
    """A unique, readable name for one start: framework, run id, time, and a random suffix."""
    return f"{launch.framework}-{run_id[:12]}-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:4]}"


@dataclass(frozen=True)
class ServerHandle:
    """A started (or attached) server: where it is, what it speaks, and how its runner finds it.

    ``id`` is what the runner stops (a process id, a container id, the URL of an external server).
    """

    runner: str
    id: str
    base_url: str
    metrics_url: str
    health_url: str
    dialect: str
    model: str
    readiness_timeout_s: float = 1800.0
    name: str | None = None
    log_path: str | None = None
    image: str | None = None
    image_digest: str | None = None
    provenance: Annotated[ServerProvenance, PlainSerializer(ServerProvenance.stored)] = field(
        default_factory=ServerProvenance
    )
    """What the run records about the server (the launch as rendered, then what the runner and lifecycle add)."""
    metrics_urls: tuple[str, ...] = ()
    """Every metrics endpoint of a multi-endpoint server (counters are summed over them); empty: ``metrics_url`` alone."""
    nodes: int = 1
    """Nodes the server spans."""
    api_key_env: str | None = None
    """The NAME of the environment variable holding the server's API key (an external server's ``api_key_env``);
    never the key: :func:`handle_api_key` reads the value where requests are built."""

    def __post_init__(self) -> None:
        # a handle rebuilt from its JSON form (a Prefect result, a manifest) gets lists and objects back
        object.__setattr__(self, "metrics_urls", tuple(self.metrics_urls))
        provenance: object = self.provenance
        if not isinstance(provenance, ServerProvenance):
            object.__setattr__(self, "provenance", ServerProvenance.model_validate(provenance))

    @property
    def all_metrics_urls(self) -> tuple[str, ...]:
        """The endpoints to scrape: ``metrics_urls`` when set, else ``(metrics_url,)``."""
        return self.metrics_urls or (self.metrics_url,)


def api_key_from_env(name: str | None) -> str | None:
    """The API key in environment variable ``name`` of this process (None when ``name`` is None).

    Raises :class:`~alflow.errors.InvalidInputError` (one line naming the variable, never its value) when it is
    unset or empty, or holds what cannot be one HTTP header line. The value is never stored or logged.
    """
    if name is None:
        return None
    value = os.environ.get(name)
    if not value:
        raise InvalidInputError(
            f"the external server's api_key_env names {name}, which is {'empty' if value == '' else 'not set'} in "
            "the environment of the process that runs the flow (the Prefect worker): set it there to the "
            "server's API key"
        )
    if not (value.isascii() and value.isprintable()) or value != value.strip():
        raise InvalidInputError(
            f"the value of {name} (api_key_env) must be printable ASCII without surrounding spaces (it is sent "
            "as an HTTP header); it is not"
        )
    return value


def handle_api_key(handle: ServerHandle) -> str | None:
    """The API key for requests to ``handle``'s API (None: send none), read now from the environment.

    Every request alflow makes to the server's API (``/v1/*``, ``/detokenize``, version and server-info probes)
    carries it as ``Authorization: Bearer <key>`` (:func:`alflow.loadgen.client.auth_headers`); metrics scrapes
    and health checks do not: vLLM's ``--api-key`` middleware lets every path outside ``/v1`` through (the
    ``authentication`` middleware / ``AuthenticationMiddleware`` of ``vllm/entrypoints/openai/api_server.py``;
    a later route-derived guard keeps ``/health``, ``/version`` and ``/metrics`` public), and SGLang's
    ``add_api_key_middleware`` spares ``/health`` and ``/metrics``. Checked against vLLM and SGLang sources in
    a code index, not against the exact tag a preset pins. Raises as :func:`api_key_from_env`.
    """
    return api_key_from_env(handle.api_key_env)


class Runner(Protocol):
    """Starts servers somewhere (a local process, a container, nowhere for an external server)."""

    name: str
    """The registry key of this runner."""

    def start(self, launch: Launch) -> ServerHandle:
        """Start the server described by ``launch`` (without waiting for it) and return its handle."""
        ...

    def wait_ready(self, handle: ServerHandle, timeout_s: float | None = None) -> None:
        """Wait until the health endpoint answers 200.

        Raises :class:`ServerStartError` with the log tail when the server dies first or the timeout
        (default: the Launch's) passes.
        """
        ...

    def logs(self, handle: ServerHandle, tail: int = LOG_TAIL_LINES) -> str:
        """The last ``tail`` lines of the server's log ('' when there is none)."""
        ...

    def stop(self, handle: ServerHandle) -> None:
        """Stop the server and release what the runner created (idempotent)."""
        ...


_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
"""An opener that ignores *_proxy variables: health checks go straight to the server."""


def health_ok(url: str, timeout_s: float = 2.0) -> bool:
    """True when ``GET url`` answers 200 within ``timeout_s`` (no proxy in between)."""
    request = urllib.request.Request(url, method="GET")  # noqa: S310 (http URLs built by alflow)
    try:
        with _DIRECT.open(request, timeout=timeout_s) as response:
            return int(response.status) == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


_FATAL = re.compile(r"(?:\b[A-Z]\w*(?:Error|Exception)\b: .+|\S+: error: .+)$")
"""A Python exception line (``AssertionError: ...``) or an argparse error (``vllm serve: error: ...``)."""


def fetch_json(url: str, timeout_s: float = 5.0, headers: Mapping[str, str] | None = None) -> object | None:
    """``GET url`` as JSON (no proxy), or None when it does not answer 200 with JSON; ``headers`` go with it."""
    request = urllib.request.Request(url, method="GET", headers=dict(headers or {}))  # noqa: S310 (alflow's URLs)
    try:
        with _DIRECT.open(request, timeout=timeout_s) as response:
            if int(response.status) != 200:
                return None
            data: object = json.loads(response.read(1 << 20))
            return data
    except (urllib.error.URLError, OSError, ValueError):
        return None


def wait_for_health(
    url: str,
    timeout_s: float,
    *,
    dead_reason: Callable[[], str | None],
    log_tail: Callable[[], str],
    what: str = "server",
    interval_s: float = 0.2,
) -> None:
    """Poll ``url`` until it answers 200, failing fast when ``dead_reason()`` reports a death.

    The polls start 20 ms apart and back off to ``interval_s`` (a process that is ready in half a second is
    seen then, not up to ``interval_s`` later). ``dead_reason`` returns None while the server lives, else why
    it is dead (exit code, state). Raises :class:`ServerStartError` carrying ``log_tail()`` on death or after
    ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    pause = min(0.02, interval_s)
    while True:
        reason = dead_reason()
        if reason is not None:
            tail = log_tail()
            # the last line that reads like the program's fatal error (its own words)
            fatal = next(
                (m[0].strip() for x in reversed(tail.splitlines()) if (m := _FATAL.search(x.strip()))), None
            )
            headline = f"{what} died before it was ready: {reason}"
            if fatal is None:  # no word of its own (killed, out of memory): may be worth another try
                raise ServerStartError(headline, tail)
            raise ServerRefusedError(f"{headline}: {fatal}", tail)
        if health_ok(url, timeout_s=min(2.0, max(0.1, deadline - time.monotonic()))):
            return
        if time.monotonic() >= deadline:
            reason = dead_reason()
            detail = f" (and it died: {reason})" if reason else ""
            raise ServerStartError(
                f"{what} was not healthy at {redact_url(url)} within {timeout_s:g} s{detail}", log_tail()
            )
        time.sleep(pause)
        pause = min(pause * 2, interval_s)


@contextmanager
def running_server(runner: Runner, launch: Launch, timeout_s: float | None = None) -> Iterator[ServerHandle]:
    """Start ``launch``, wait until it is ready, yield its handle, and always stop it afterwards."""
    handle = runner.start(launch)
    try:
        runner.wait_ready(handle, timeout_s)
        yield handle
    finally:
        runner.stop(handle)


def file_tail(path: str | None, tail: int, secrets: Mapping[str, str]) -> str:
    """The last ``tail`` lines of the log file at ``path``, ``secrets`` values redacted ('' when there is none)."""
    if path is None:
        return ""
    try:
        with Path(path).open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - LOG_TAIL_BYTES))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    lines = text.splitlines()[-tail:] if tail > 0 else []
    return redact_text("\n".join(lines) + ("\n" if lines else ""), secrets)
