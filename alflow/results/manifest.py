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


class ServerRecord(_Open):
    """The server a run measured: its handle as stored (:class:`infra.runners.base.ServerHandle`)."""

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
    provenance: dict[str, Any] = Field(default_factory=dict)
    """The recipe's launch facts: framework, argv, image, synthetic knobs, ..."""

    @property
    def framework(self) -> str | None:
        """The framework the recipe launched."""
        fw = self.provenance.get("framework")
        return None if fw is None else str(fw)

    @property
    def launch_image(self) -> str | None:
        """The image the server ran: the handle's, else the launch's."""
        img = self.image or self.provenance.get("image")
        return None if img is None else str(img)

    @property
    def command(self) -> str | None:
        """The server's command line as the recipe rendered it."""
        cmd = self.provenance.get("command")
        return None if cmd is None else str(cmd)


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
