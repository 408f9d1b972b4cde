"""Where a server runs: a local process, a docker container, an external server or a Slurm job (``kind`` chooses)."""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import AfterValidator, Field, ValidationInfo, field_validator, model_validator

from alflow.config.base import MAX_GPUS_PER_NODE, MAX_NODES, StrictModel
from alflow.config.server import (
    ServerDialect,
)
from alflow.loadgen.spec import MAX_SECONDS
from alflow.util.names import check_log_dir, check_secret_env_name
from alflow.util.redact import check_http_url

LogDir = Annotated[str | None, AfterValidator(check_log_dir)]
"""A server log folder (:func:`alflow.util.names.check_log_dir`: not a file, not under /proc, /sys or /dev)."""


class ProcessOptions(StrictModel):
    """Runner 'process': the server is a local child process (used for the simulator)."""

    kind: Literal["process"] = Field("process", description="Runner kind.")
    log_dir: LogDir = Field(
        None, description="Directory for the server log and files (None: a temporary one)."
    )
    stop_timeout_s: float = Field(
        10.0, gt=0.0, le=MAX_SECONDS, description="Seconds between SIGTERM and SIGKILL."
    )
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
        30.0, gt=0.0, le=MAX_SECONDS, description="Seconds the container gets to stop before it is killed."
    )
    log_dir: LogDir = Field(
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
    api_key_env: str | None = Field(
        None,
        description=(
            "The NAME of an environment variable, on the machine that runs the flow (the Prefect worker), holding "
            "the server's API key (vLLM's or SGLang's --api-key): sent as 'Authorization: Bearer <key>' with "
            "every API request (never to the metrics URLs); only the name is stored. None: no key is sent."
        ),
    )

    @field_validator("api_key_env")
    @classmethod
    def _api_key_env_is_a_name(cls, value: str | None) -> str | None:
        return None if value is None else check_secret_env_name(value, what="api_key_env")

    @field_validator("base_url", "metrics_url", "metrics_urls")
    @classmethod
    def _urls_parse(cls, value: str | tuple[str, ...] | None, info: ValidationInfo) -> object:
        """Each an http(s) URL with a host that parses (:func:`alflow.util.redact.check_http_url`).

        Round 13: ``http://[::1`` passed ``--dry-run``; the real run failed with ``ValueError: Invalid IPv6 URL``
        after Prefect and the flow had started.
        """
        for url in (value,) if isinstance(value, str) else value or ():
            check_http_url(url, str(info.field_name))
        return value

    @model_validator(mode="after")
    def _one_metrics_source(self) -> Self:
        if self.metrics_url is not None and self.metrics_urls and self.metrics_url not in self.metrics_urls:
            raise ValueError(
                f"metrics_url {self.metrics_url!r} is not among metrics_urls {list(self.metrics_urls)}: "
                "give metrics_urls alone (the first one is the primary)"
            )
        return self  # each an http(s) URL with a host: _urls_parse


class SlurmOptions(StrictModel):
    """Runner 'slurm': the server runs as a Slurm batch job (one or more nodes), submitted with sbatch.

    Values that end up on ``#SBATCH`` lines must be plain tokens (no spaces or quotes): the runner
    refuses anything that would need shell quoting there.
    """

    kind: Literal["slurm"] = Field("slurm", description="Runner kind.")
    nodes: int | None = Field(
        None,
        ge=1,
        le=MAX_NODES,
        description=(
            "Number of nodes for the job (--nodes); the first one is the head. None: the server config's "
            "nodes, which is authoritative (a different value here is an error)."
        ),
    )
    gpus_per_node: int | None = Field(
        None,
        ge=0,
        le=MAX_GPUS_PER_NODE,
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
    log_dir: LogDir = Field(
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
        3600.0,
        gt=0.0,
        le=MAX_SECONDS,
        description="How long start waits for the job to leave the queue and get its nodes.",
    )
    poll_interval_s: float = Field(
        1.0, gt=0.0, le=MAX_SECONDS, description="Seconds between job-state queries (scontrol) while waiting."
    )
    stop_timeout_s: float = Field(
        30.0,
        gt=0.0,
        le=MAX_SECONDS,
        description="How long stop waits for the cancelled job to leave the running states.",
    )
    command_timeout_s: float = Field(
        30.0,
        gt=0.0,
        le=MAX_SECONDS,
        description="Timeout of each Slurm client command (sbatch, scontrol, scancel).",
    )


RunnerOptions = Annotated[
    ProcessOptions | DockerOptions | ExternalServer | SlurmOptions, Field(discriminator="kind")
]
"""Where a server runs: the ``kind`` field chooses the runner."""
