"""Runner 'docker': the server runs in a container created through the Docker engine API.

What a container gets (DOMAIN.md section 8): the Launch's argument list (``argv[0]`` replaces the
image's entrypoint), its environment plus the secrets named in the options (read from the secret
source at start, never logged, never stored in the handle or provenance), GPUs as a device request
(``all`` = ``DeviceRequest(count=-1, capabilities=[["gpu"]])``, or a list of ids; a framework on AMD GPUs, per its
plugin's ``gpu``, gets ``/dev/kfd`` and ``/dev/dri`` and group ``video`` instead), ``ipc_mode=host``
or a ``shm_size``, the model cache volume, host networking or a mapped port, and labels that
identify alflow and the run (``alflow=1``, ``alflow.run-id``, ``alflow.created`` in Unix seconds).
Launch files are copied into the created container before it starts.

Readiness polls the health URL while checking the container state: a container that exits fails
at once with its last 100 log lines. :meth:`DockerRunner.stop` always stops and removes.
:func:`cleanup_containers` removes containers a killed run left behind (by label and age).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import urllib.parse
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import docker
import docker.errors
from docker.types import DeviceRequest

from alflow.config import DockerOptions
from alflow.frameworks.launch import (
    WILDCARD_HOSTS,
    Launch,
    LaunchFile,
    connect_host,
    redact_text,
    single_host,
    single_host_metrics_urls,
)
from alflow.frameworks.registry import get_framework
from alflow.frameworks.sim.recipe import SIM_IMAGE
from alflow.plugins import framework_names
from alflow_infra.errors import RunnerError
from alflow_infra.images import ensure_sim_image, tarball
from alflow_infra.runners.base import (
    LOG_TAIL_LINES,
    SecretSource,
    ServerHandle,
    secret_values,
    wait_for_health,
)

log = logging.getLogger(__name__)
IMAGE_VERSION_LABEL = "org.opencontainers.image.version"
"""The OCI label an image may state its version in: the live gate's fallback when the server says none."""

LABEL = "alflow"
LABEL_RUN_ID = "alflow.run-id"
LABEL_CREATED = "alflow.created"
LABEL_FRAMEWORK = "alflow.framework"
LABEL_MODEL = "alflow.model"


def docker_client(timeout_s: float = 60.0) -> docker.DockerClient:
    """A client for the Docker engine named by the environment (DOCKER_HOST or the local socket).

    Raises :class:`RunnerError` with a hint when no engine answers.
    """
    try:
        client = docker.from_env(timeout=int(timeout_s))
        client.ping()
    except docker.errors.DockerException as exc:
        raise RunnerError(
            f"no Docker engine reachable ({exc}); start one (e.g. `bash scripts/ci-services.sh`) or set DOCKER_HOST"
        ) from exc
    return client


def device_requests(gpus: str | tuple[str, ...]) -> list[DeviceRequest]:
    """Docker device requests for ``gpus``: 'all', 'none', or a list of GPU ids/UUIDs."""
    if gpus == "none":
        return []
    if gpus == "all":
        return [DeviceRequest(count=-1, capabilities=[["gpu"]])]
    return [DeviceRequest(device_ids=list(gpus), capabilities=[["gpu"]])]


AMD_DEVICES = ("/dev/kfd:/dev/kfd:rwm", "/dev/dri:/dev/dri:rwm")
"""What a ROCm container needs (ROCm's Docker guide: ``--device=/dev/kfd --device=/dev/dri --group-add video``)."""
AMD_VISIBLE_ENV = "ROCR_VISIBLE_DEVICES"


def gpu_vendor(framework: str) -> str | None:
    """Whose GPUs a container of ``framework`` gets: its plugin's ``gpu``.

    A launch of no registered framework (a probe, a hand-built launch) gets the default device request.
    """
    return get_framework(framework).gpu if framework in framework_names() else None


def parse_volume(spec: str) -> tuple[str, dict[str, str]]:
    """``'HOST:CONTAINER[:ro|rw]'`` as a docker SDK volume entry."""
    parts = spec.split(":")
    if len(parts) == 2:
        parts.append("rw")
    if len(parts) != 3 or not parts[0] or not parts[1] or parts[2] not in ("ro", "rw"):
        raise RunnerError(f"volume {spec!r} is not 'HOST:CONTAINER[:ro|rw]'")
    host = str(Path(parts[0]).expanduser()) if parts[0].startswith(("/", "~", ".")) else parts[0]
    return host, {"bind": parts[1], "mode": parts[2]}


def container_spec(
    launch: Launch,
    options: DockerOptions,
    *,
    image: str,
    run_id: str,
    secrets: Mapping[str, str],
    created_s: int,
    name: str,
) -> dict[str, Any]:
    """Keyword arguments for ``client.containers.create`` (pure: the tests pin it).

    ``secrets`` values enter the container environment only; never log this dict unredacted.
    """
    cache = [f"{options.model_cache}:{options.model_cache_target}:rw"] if options.model_cache else []
    volumes = dict(parse_volume(volume) for volume in (*cache, *options.volumes))
    labels = {
        **options.labels,
        LABEL: "1",
        LABEL_RUN_ID: run_id,
        LABEL_CREATED: str(created_s),
        LABEL_FRAMEWORK: launch.framework,
        LABEL_MODEL: launch.model,
    }
    spec: dict[str, Any] = {
        "image": image,
        "entrypoint": [launch.argv[0]],
        "command": list(launch.argv[1:]),
        "environment": {**launch.env, **secrets},
        "labels": labels,
        "name": name,
        "detach": True,
        "volumes": volumes,
        "ipc_mode": options.ipc_mode,
        "shm_size": options.shm_size,
    }
    if gpu_vendor(launch.framework) == "amd":
        if options.gpus != "none":  # AMD GPUs: the KFD and DRI devices and group video
            spec.update(devices=list(AMD_DEVICES), group_add=["video"])
        if options.gpus not in ("none", "all"):  # a list of ids: the ROCm runtime's own selection
            spec["environment"] = {AMD_VISIBLE_ENV: ",".join(options.gpus), **spec["environment"]}
    else:
        spec["device_requests"] = device_requests(options.gpus)
    if options.network == "host":
        spec["network_mode"] = "host"
    else:
        ports = dict.fromkeys((launch.port, *(e.port for e in launch.metrics_endpoints)))
        spec["ports"] = {f"{port}/tcp": None for port in ports}
    return {key: value for key, value in spec.items() if value is not None}  # no ipc_mode or shm_size: none


def files_archive(files: tuple[LaunchFile, ...], files_dir: str) -> bytes:
    """A tar archive (to extract at ``/``) holding ``files`` under ``files_dir``."""
    parts = [part for part in files_dir.strip("/").split("/") if part]
    dirs = {"/".join(parts[: i + 1]): 0o755 for i in range(len(parts))}
    return tarball(dirs, {"/".join([*parts, item.name]): item.content for item in files})


class DockerRunner:
    """Starts a Launch in a container (docker SDK) and always stops and removes it."""

    name = "docker"

    def __init__(
        self,
        options: DockerOptions | None = None,
        *,
        client: docker.DockerClient | None = None,
        run_id: str | None = None,
        secret_source: SecretSource | None = None,
    ) -> None:
        self.options = options or DockerOptions()
        self.run_id = run_id or uuid.uuid4().hex
        self._client = client
        self._secret_source: SecretSource = secret_source or os.environ.get
        self._secrets: dict[str, Mapping[str, str]] = {}
        self._image_versions: dict[str, str | None] = {}

    @property
    def client(self) -> docker.DockerClient:
        """The Docker client (connected on first use)."""
        if self._client is None:
            self._client = docker_client()
        return self._client

    def ensure_image(self, image: str) -> tuple[str, str]:
        """Pull ``image`` as the options say; return (image id, digest or id for provenance)."""
        policy = self.options.pull
        found: Any = None
        if policy != "always":
            with contextlib.suppress(docker.errors.ImageNotFound):
                found = self.client.images.get(image)
        if found is None and image == SIM_IMAGE:
            ensure_sim_image(self.client, image)  # made locally, never pulled
            found = self.client.images.get(image)
        if found is None:
            if policy == "never":
                raise RunnerError(f"image {image!r} is not present locally and pull='never'")
            log.info("pulling image %s", image)
            try:
                found = self.client.images.pull(image)
            except docker.errors.APIError as exc:
                raise RunnerError(f"cannot pull image {image!r}: {exc.explanation or exc}") from exc
        digests = found.attrs.get("RepoDigests") or []
        labels = (found.attrs.get("Config") or {}).get("Labels") or {}
        version = labels.get(IMAGE_VERSION_LABEL) if isinstance(labels, dict) else None
        self._image_versions[image] = str(version) if version else None
        return str(found.id), str(digests[0]) if digests else str(found.id)

    def server_host(self, launch: Launch) -> str:
        """Where clients reach the container: the engine's host for a remote engine (tcp), else local."""
        base_url = str(getattr(self.client.api, "base_url", ""))
        host = urllib.parse.urlsplit(base_url).hostname
        if base_url.startswith(("http://", "https://")) and host and host not in ("localhost", "127.0.0.1"):
            return host
        return connect_host(launch.host)

    def create(self, launch: Launch) -> ServerHandle:
        """Create the container (not started) with its files copied in; the handle can be stopped.

        Node placeholders are filled for one node (rank 0, head = the container's own bind address); a
        multi-node launch is refused (only the slurm runner starts those).
        """
        launch = single_host(launch, runner=self.name, head_addr=connect_host(launch.host))
        if not launch.image:
            raise RunnerError(f"the docker runner needs an image; the {launch.framework} launch names none")
        if self.options.network == "bridge" and launch.host not in WILDCARD_HOSTS:
            raise RunnerError(
                f"with bridge networking the server must bind a wildcard address (0.0.0.0), not {launch.host!r}: "
                "a mapped port cannot reach it"
            )
        _, digest = self.ensure_image(launch.image)
        secrets = secret_values(self.options.secrets, launch, self._secret_source)
        name = f"alflow-{launch.framework}-{self.run_id[:12]}-{uuid.uuid4().hex[:6]}"
        spec = container_spec(
            launch,
            self.options,
            image=launch.image,
            run_id=self.run_id,
            secrets=secrets,
            created_s=int(time.time()),
            name=name,
        )
        log.info(
            "creating container %s from %s: %s (secrets passed: %s)",
            name,
            launch.image,
            launch.command_line(),
            ", ".join(sorted(secrets)) or "none",
        )
        try:
            container = self.client.containers.create(**spec)
        except docker.errors.APIError as exc:
            raise RunnerError(
                f"cannot create container from {launch.image!r}: {exc.explanation or exc}"
            ) from exc
        self._secrets[container.id] = secrets
        if launch.files:
            try:
                container.put_archive("/", files_archive(launch.files, launch.files_dir))
            except docker.errors.APIError as exc:
                self._remove(container.id)
                raise RunnerError(f"cannot copy launch files into {name}: {exc.explanation or exc}") from exc
        base = launch.base_url(host=self.server_host(launch))
        return ServerHandle(
            runner=self.name,
            id=str(container.id),
            base_url=base,
            metrics_url=base + launch.metrics_path,
            health_url=base + launch.health_path,
            dialect=launch.dialect,
            model=launch.model,
            readiness_timeout_s=launch.readiness_timeout_s,
            name=name,
            log_path=str(Path(self.options.log_dir).expanduser() / f"{name}.log")
            if self.options.log_dir
            else None,
            image=launch.image,
            image_digest=digest,
            metrics_urls=single_host_metrics_urls(launch, self.server_host(launch)),
            nodes=launch.nodes,
            provenance=launch.provenance().amended(
                container=name,
                run_id=self.run_id,
                secrets_passed=sorted(secrets),
                **(
                    {"image_version_label": self._image_versions[launch.image]}
                    if self._image_versions.get(launch.image)
                    else {}
                ),
            ),
        )

    def start(self, launch: Launch) -> ServerHandle:
        """Create and start the container; with bridge networking, read back the mapped port."""
        handle = self.create(launch)
        try:
            container = self.client.containers.get(handle.id)
            container.start()
            if self.options.network == "bridge":
                container.reload()
                mapped: dict[int, int] = {}
                for port in (launch.port, *(e.port for e in launch.metrics_endpoints)):
                    bound = (container.ports or {}).get(f"{port}/tcp") or []
                    if not bound:
                        raise RunnerError(f"container {handle.name} has no host port for {port}/tcp")
                    mapped[port] = int(bound[0]["HostPort"])
                host = self.server_host(launch)
                base = launch.base_url(host=host, port=mapped[launch.port])
                handle = replace(
                    handle,
                    base_url=base,
                    metrics_url=base + launch.metrics_path,
                    health_url=base + launch.health_path,
                    metrics_urls=single_host_metrics_urls(launch, host, mapped),
                )
        except (docker.errors.APIError, RunnerError) as exc:
            tail = self.logs(handle)
            self.stop(handle)
            detail = exc.explanation if isinstance(exc, docker.errors.APIError) else str(exc)
            raise RunnerError(f"cannot start container {handle.name}: {detail}\n{tail}".rstrip()) from exc
        except BaseException:
            with contextlib.suppress(Exception):
                self.stop(handle)
            raise
        log.info("started container %s (%s)", handle.name, handle.id[:12])
        return handle

    def _dead_reason(self, handle: ServerHandle) -> str | None:
        try:
            container = self.client.containers.get(handle.id)
        except docker.errors.NotFound:
            return "the container is gone"
        state = container.attrs.get("State") or {}
        status = state.get("Status", container.status)
        if status in ("exited", "dead"):
            oom = " (out of memory)" if state.get("OOMKilled") else ""
            return f"container {handle.name} {status} with exit code {state.get('ExitCode')}{oom}"
        return None

    def wait_ready(self, handle: ServerHandle, timeout_s: float | None = None) -> None:
        """Poll the health URL while checking the container state (fails fast with 100 log lines)."""
        wait_for_health(
            handle.health_url,
            handle.readiness_timeout_s if timeout_s is None else timeout_s,
            dead_reason=lambda: self._dead_reason(handle),
            log_tail=lambda: self.logs(handle, LOG_TAIL_LINES),
            what=f"{handle.dialect} server in container {handle.name}",
        )

    def _log_text(self, handle: ServerHandle, **tail: int) -> str:
        """The container's log (stdout and stderr; ``tail=N``: its last N lines), secret values redacted."""
        raw = self.client.containers.get(handle.id).logs(stdout=True, stderr=True, **tail)
        text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else str(raw)
        return redact_text(text, self._secrets.get(handle.id, {}))

    def logs(self, handle: ServerHandle, tail: int = LOG_TAIL_LINES) -> str:
        """The container's last ``tail`` log lines (stdout and stderr), secret values redacted."""
        try:
            return self._log_text(handle, tail=tail)
        except docker.errors.APIError:
            return ""

    def save_logs(self, handle: ServerHandle) -> None:
        """Write the container's whole log (secrets redacted) to ``handle.log_path``, if it has one."""
        if handle.log_path is None:
            return
        try:
            text = self._log_text(handle)
        except docker.errors.APIError as exc:
            log.warning("cannot read the log of %s: %s", handle.name, exc)
            return
        path = Path(handle.log_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")

    def stop(self, handle: ServerHandle) -> None:
        """Stop (SIGTERM, then SIGKILL after ``stop_timeout_s``), save the log if asked, remove; idempotent."""
        try:
            container = self.client.containers.get(handle.id)
        except docker.errors.NotFound:
            self._secrets.pop(handle.id, None)
            return
        if container.status in ("running", "restarting", "paused"):
            with contextlib.suppress(docker.errors.APIError):
                container.stop(timeout=max(1, round(self.options.stop_timeout_s)))
        self.save_logs(handle)
        self._secrets.pop(handle.id, None)
        self._remove(handle.id)
        log.info("removed container %s", handle.name or handle.id[:12])

    def _remove(self, container_id: str) -> None:
        try:
            self.client.api.remove_container(container_id, force=True, v=True)
        except docker.errors.NotFound:
            return
        except docker.errors.APIError as exc:
            if exc.status_code != 409:  # 409: removal already in progress
                raise RunnerError(
                    f"cannot remove container {container_id[:12]}: {exc.explanation or exc}"
                ) from exc


@dataclass(frozen=True)
class CleanupEntry:
    """One alflow container found by :func:`cleanup_containers`."""

    id: str
    name: str
    status: str
    run_id: str
    framework: str
    age_s: float
    selected: bool
    removed: bool


def cleanup_containers(
    client: docker.DockerClient | None = None,
    *,
    older_than_s: float = 0.0,
    run_id: str | None = None,
    dry_run: bool = False,
    now_s: float | None = None,
) -> list[CleanupEntry]:
    """Remove (force) containers labelled ``alflow=1`` created at least ``older_than_s`` ago.

    ``run_id`` limits it to one run. A container without a readable ``alflow.created`` label counts
    as old. ``dry_run`` lists without removing. Returns every container considered, oldest first.
    """
    client = client or docker_client()
    now = time.time() if now_s is None else now_s
    filters: dict[str, Any] = {"label": [f"{LABEL}=1"] + ([f"{LABEL_RUN_ID}={run_id}"] if run_id else [])}
    entries: list[CleanupEntry] = []
    for container in client.containers.list(all=True, filters=filters):
        try:  # when it was created: the alflow.created label
            age = now - float(((container.attrs.get("Config") or {}).get("Labels") or {})[LABEL_CREATED])
        except (KeyError, TypeError, ValueError):
            age = float("inf")
        labels = container.labels or {}
        remove = age >= older_than_s
        if remove and not dry_run:
            try:
                client.api.remove_container(container.id, force=True, v=True)
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as exc:
                log.warning("cannot remove container %s: %s", container.name, exc)
                remove = False
            else:
                log.info("removed leftover container %s (age %.0f s)", container.name, age)
        entries.append(
            CleanupEntry(
                id=str(container.id),
                name=str(container.name),
                status=str(container.status),
                run_id=str(labels.get(LABEL_RUN_ID, "")),
                framework=str(labels.get(LABEL_FRAMEWORK, "")),
                age_s=age,
                selected=age >= older_than_s,
                removed=remove and not dry_run,
            )
        )
    entries.sort(key=lambda e: -e.age_s)
    return entries
