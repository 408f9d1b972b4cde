"""The local image the tests (and a laptop) run the simulator in, without any registry.

``alflow-sim-base:local`` is made by ``docker import`` of a tiny tarball: empty directories and the
usual ``/bin``, ``/lib``, ``/lib64``, ``/sbin`` links into ``/usr``. The interpreter, the host's
``/usr`` (C libraries) and the project are bind-mounted read-only at their own paths, and the
container uses the host's network, so the recipe's argument list (``sys.executable -m alflow.sim``)
runs unchanged inside it. :func:`sim_docker_options` gives the matching runner options.
"""

from __future__ import annotations

import contextlib
import io
import logging
import sys
import tarfile
import time
from collections.abc import Mapping
from pathlib import Path

import docker
import docker.errors

from alflow.config import DockerOptions
from alflow.frameworks.sim.recipe import SIM_IMAGE

log = logging.getLogger(__name__)

PROJECT_ROOT = Path(__file__).resolve().parents[1]
_DIRS = {"usr": 0o755, "etc": 0o755, "tmp": 0o1777, "proc": 0o555, "sys": 0o555, "dev": 0o755, "root": 0o700}
_LINKS = {"bin": "usr/bin", "lib": "usr/lib", "lib64": "usr/lib64", "sbin": "usr/sbin"}
_FILES = {
    "etc/passwd": "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
    "etc/group": "root:x:0:\nnogroup:x:65534:\n",
}


def tarball(
    dirs: Mapping[str, int], files: Mapping[str, str], links: Mapping[str, str] | None = None
) -> bytes:
    """A tar archive of ``dirs`` (name -> mode), then ``links`` (name -> target), then ``files`` (name -> text, 0644)."""
    buffer = io.BytesIO()
    now = int(time.time())
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, mode in dirs.items():
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, mode, now
            tar.addfile(info)
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname, info.mtime = tarfile.SYMTYPE, target, now
            tar.addfile(info)
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, now
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def base_tarball() -> bytes:
    """The root filesystem of the base image: directories, links into /usr, passwd and group."""
    return tarball(_DIRS, _FILES, _LINKS)


def ensure_sim_image(client: docker.DockerClient, image: str = SIM_IMAGE, *, rebuild: bool = False) -> str:
    """Make ``image`` by importing :func:`base_tarball` unless it exists; return its id."""
    with contextlib.suppress(docker.errors.ImageNotFound):
        if not rebuild:
            return str(client.images.get(image).id)
    repository, _, tag = image.rpartition(":")
    if not repository:
        repository, tag = image, "latest"
    log.info("importing local image %s", image)
    client.api.import_image_from_data(base_tarball(), repository=repository, tag=tag)
    return str(client.images.get(image).id)


def runtime_mounts() -> tuple[str, ...]:
    """Read-only bind mounts that make this interpreter and project usable in the base image."""
    paths = [Path("/usr"), Path(sys.base_prefix).resolve(), PROJECT_ROOT]
    prefix = Path(sys.prefix).resolve()
    if not prefix.is_relative_to(PROJECT_ROOT):
        paths.append(prefix)
    out: list[str] = []
    for path in paths:
        if any(path.is_relative_to(Path(done.split(":", 1)[0])) for done in out):
            continue
        out.append(f"{path}:{path}:ro")
    return tuple(out)


def sim_docker_options(**overrides: object) -> DockerOptions:
    """Docker runner options for the simulator in the local image: no GPUs, host network, no pull."""
    return DockerOptions.model_validate(
        {
            "gpus": "none",
            "ipc_mode": None,
            "network": "host",
            "model_cache": None,
            "pull": "never",
            "volumes": runtime_mounts(),
            "stop_timeout_s": 5.0,
            **overrides,
        }
    )
