"""The schema of a run's ``manifest.json``: what ran, where, its status and the files it wrote.

Written by :class:`alflow.results.store.RunWriter` at the start of a run and after every file, read
by :func:`alflow.results.store.open_run`. Every reader works on these models, never on raw JSON, so a
field has one name and one type everywhere. ``schema_version`` is checked before validation: a
manifest of another version is refused with the path and both versions.

``config`` is the flow's parameters as given (each flow has its own parameter model, and a manifest
must stay readable after those models change), so it stays a JSON object; the facts reports need from
it are read by :mod:`alflow.results.view`. Provenance fields a flow adds beyond the known ones are
kept as they are (``extra="allow"``).
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION: Final = 1
Status = Literal["running", "complete", "failed"]


class _Open(BaseModel):
    """A record that keeps fields it does not name (written by newer code, or added by a flow)."""

    model_config = ConfigDict(extra="allow")


class FileEntry(BaseModel):
    """One file the run wrote."""

    model_config = ConfigDict(extra="forbid")

    written: str = Field(description="When it was (last) written, ISO 8601 UTC.")
    rows: int | None = Field(None, ge=0, description="Rows of a parquet table; None for JSON and text files.")


class HostRecord(_Open):
    """The host the flow ran on (:func:`alflow.results.provenance.host_info`)."""

    host: str | None = None
    os: str | None = None
    python: str | None = None
    cpus: int | None = None
    gpus: list[dict[str, str]] | None = None


class ServerProvenance(_Open):
    """What a run records about its server: the launch as rendered, then what the runner and lifecycle add.

    The launch's part is :meth:`alflow.frameworks.launch.Launch.provenance`; the runners add their own (``run_id``,
    the secrets' names, a container, a Slurm job), ``alflow_infra.lifecycle`` the live version and a model's hashes. Every field has a default, so a run stored before a field existed still reads; a field a newer alflow (or a
    third-party runner) adds is kept as it is.
    """

    framework: str | None = None
    dialect: str | None = None
    model: str | None = None
    image: str | None = None
    argv: list[str] = Field(default_factory=list)
    command: str | None = None
    """The command line (``shlex``-joined ``argv``)."""
    env: dict[str, str] = Field(default_factory=dict)
    """The launch's environment, secret values redacted."""
    secret_env: list[str] = Field(default_factory=list)
    files: dict[str, str] = Field(default_factory=dict)
    """Files the launch wrote (path -> content)."""
    port: int | None = None
    health_path: str | None = None
    metrics_path: str | None = None
    warnings: list[str] = Field(default_factory=list)
    """The recipe's warnings, then the release gate's notes on the live server."""
    synthetic: dict[str, Any] | None = None
    """The rendered synthetic-acceptance knobs (``scheme`` among them); None: real acceptance."""
    engine_note: str | None = None
    runtime_k: list[dict[str, Any]] = Field(default_factory=list)
    """Runtime-varying-K knobs the launch carries (:class:`alflow.acceptance.runtime_k.RuntimeKKnob` as dicts)."""
    nodes: int = 1
    metrics_endpoints: list[dict[str, Any]] = Field(default_factory=list)
    worker_argv: list[str] | None = None
    gpus_per_node: int | None = None
    mpi: str | None = None
    tasks_per_node: int | None = None
    requirements: list[dict[str, str]] = Field(default_factory=list)
    groups: list[dict[str, Any]] = Field(default_factory=list)
    # what the runner adds
    run_id: str | None = None
    secrets_passed: list[str] = Field(default_factory=list)
    """The names of the secrets passed to the server (never their values)."""
    container: str | None = None
    image_version_label: str | None = None
    slurm: dict[str, Any] | None = None
    """The Slurm job: id, script, nodes, hosts, head address."""
    external: bool = False
    """An external server alflow attached to (did not start)."""
    # what the lifecycle adds
    framework_version: str | None = None
    """The version the live server reported (or its image's label)."""
    model_runner: str | None = None
    """What the server's log says of its model runner (vLLM: ``V2``, or ``V1 (why)``); None: its recipe reads none."""
    model_source: str | None = None
    model_wheel: str | None = None
    model_wheel_sha256: str | None = None
    model_content_sha256: str | None = None

    def amended(self, **fields: Any) -> ServerProvenance:
        """A copy with ``fields`` set, validated (what a runner or the lifecycle adds)."""
        return ServerProvenance.model_validate({**self.model_dump(exclude_unset=True), **fields})

    def stored(self) -> dict[str, Any]:
        """The JSON object stored in ``manifest.json`` (the fields set, as they were set)."""
        return self.model_dump(mode="json", exclude_unset=True)


class ServerRecord(_Open):
    """The server a run measured: its handle as stored (:class:`alflow_infra.runners.base.ServerHandle`)."""

    runner: str | None = None
    id: str | None = None
    base_url: str | None = None
    metrics_url: str | None = None
    dialect: str | None = None
    model: str | None = None
    name: str | None = None
    image: str | None = None
    image_digest: str | None = None
    nodes: int = 1
    provenance: ServerProvenance = Field(default_factory=ServerProvenance)
    """The recipe's launch facts: framework, argv, image, synthetic knobs, ..."""

    @property
    def framework(self) -> str | None:
        """The framework the recipe launched."""
        return self.provenance.framework

    @property
    def launch_image(self) -> str | None:
        """The image the server ran: the handle's, else the launch's."""
        return self.image or self.provenance.image

    @property
    def command(self) -> str | None:
        """The server's command line as the recipe rendered it."""
        return self.provenance.command


class RunProvenance(_Open):
    """Where a run's numbers come from: code, host, the Prefect flow run, the server, the dataset."""

    code_version: str | None = None
    host: HostRecord | None = None
    flow_run_id: str | None = None
    engine_note: str | None = None
    """The engine's label where it is not a GPU server (the tiny CPU engine)."""
    server: ServerRecord | None = None
    dataset: dict[str, Any] | None = None
    scheme: str | None = None
    """M2: the synthetic-acceptance scheme the server's knobs select."""
    target_al: float | None = None
    """M2: the AL the server was forced to."""


class RunManifest(BaseModel):
    """``manifest.json``: one run's identity, status, configuration, provenance and files."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    schema_version: Literal[1] = SCHEMA_VERSION
    flow: str
    run_id: str
    status: Status = "running"
    simulated: bool = False
    started: str
    finished: str | None = None
    error: str | None = None
    config: dict[str, Any] = Field(default_factory=dict)
    provenance: RunProvenance = Field(default_factory=RunProvenance)
    files: dict[str, FileEntry] = Field(default_factory=dict)
