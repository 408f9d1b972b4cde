"""The schema of each flow's ``summary.json``: one pydantic model per flow, checked when it is written and read.

A summary is validated before it is stored (:func:`store_summary`), so a run never writes a summary its own
readers would refuse, and :func:`store_summary` puts the JSON schema of every flow's summary beside it
(``summary.schema.json`` in each run's directory) for tools outside alflow.
Rows inside a summary are typed too: M2 points (:class:`alflow.results.rows.M2Point`), reference entries
(:class:`alflow.reference.table.ReferenceEntry`), verdicts (:class:`alflow.gates.Verdict`), each stored flat by its
model and read back by it, so the summaries of runs stored before these models existed read too: a summary's
unknown keys are kept (a row's are ignored), missing lists read empty, a row's missing figures read as defaults.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from alflow.errors import AlflowError
from alflow.evals.gsm8k import Gsm8kSummary
from alflow.gates import Verdict
from alflow.reference.table import ReferenceDiff, ReferenceEntry
from alflow.results.rows import BestK, M2Point
from alflow.results.store import RunWriter

SCHEMA_FILE = "summary.schema.json"


class SummaryError(AlflowError):
    """A ``summary.json`` that does not hold what its flow's summary holds."""


class StoredSummary(BaseModel):
    """Fields every flow's summary has (the base of each flow's model)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    schema_version: int | None = Field(
        None, description="The run store's schema version (absent: before it)."
    )
    failures: list[str] = Field(default_factory=list, description="What failed, one line each.")

    def stored(self) -> dict[str, Any]:
        """The JSON form to write (the store adds ``schema_version``).

        A row that is not its type is written as it is, for :func:`store_summary`'s check to refuse by name.
        """
        return self.model_dump(mode="json", exclude={"schema_version"}, warnings=False)


class M0RunSummary(StoredSummary):
    """M0: the entries measured, what was reused from the cache, and how the reference table changed."""

    flow: Literal["m0"]
    reference_path: str
    entries: list[ReferenceEntry] = Field(default_factory=list, description="The reference entries measured.")
    cached_points: list[str] = Field(default_factory=list)
    diff: ReferenceDiff | None = Field(
        None, description="How the reference table changed (None: no previous table)."
    )
    partial: bool = False
    reference_updated: bool = Field(
        True, description="False when the run failed: its entries are in the run only."
    )


class M1RunSummary(StoredSummary):
    """M1: the gates' verdicts, the client's numbers and GSM8K's."""

    flow: Literal["m1"]
    subject: str
    passed: bool
    partial: bool = False
    verdicts: list[Verdict] = Field(
        default_factory=list, description="The gates' verdicts, one flat row each."
    )
    client: dict[str, Any] | None = None
    gsm8k: Gsm8kSummary | None = None


class M2RunSummary(StoredSummary):
    """M2: the synthetic target and scheme, one audited point per concurrency (and repeat)."""

    flow: Literal["m2"]
    target_al: float
    scheme: str | None
    nodes: int = 1
    num_gpus: int | None = None
    repeats: int = 1
    points: list[M2Point] = Field(default_factory=list, description="M2 points, one flat row each.")
    partial: bool = False


class SweepRunSummary(StoredSummary):
    """The sweep's own run: how the Ks ran, the best K per concurrency, the K choice and lost nodes."""

    flow: Literal["sweep"]
    mode: str
    ks: list[int]
    best_k: list[BestK] = Field(default_factory=list, description="The best K per concurrency, one row each.")
    repeats: int = 1
    k_choice: list[dict[str, Any]] = Field(default_factory=list)
    lost_nodes: list[str] = Field(default_factory=list)


AnySummary = M0RunSummary | M1RunSummary | M2RunSummary | SweepRunSummary
RunSummary = Annotated[AnySummary, Field(discriminator="flow")]
"""Any flow's summary, told apart by its ``flow``."""
_ADAPTER: TypeAdapter[AnySummary] = TypeAdapter(RunSummary)
FLOWS = ("m0", "m1", "m2", "sweep")


def read_summary(data: Mapping[str, Any], where: str) -> AnySummary:
    """The typed summary of a stored ``summary.json`` (``where`` names it in the error)."""
    if data.get("flow") not in FLOWS:
        raise SummaryError(f"{where}: flow {data.get('flow')!r} is not one of {', '.join(FLOWS)}")
    try:
        return _ADAPTER.validate_python(dict(data))
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"][1:]) or "summary"
        raise SummaryError(f"{where}: {field}: {first['msg']}") from None


def store_summary(writer: RunWriter, summary: StoredSummary) -> str:
    """Write ``summary.json`` (checked from its JSON form first, so it reads back) and ``summary.schema.json``."""
    data = summary.stored()
    read_summary(data, f"{writer.dir}/summary.json")
    writer.write_text(SCHEMA_FILE, schema_text())
    return writer.write_summary(data)


def summary_schema() -> dict[str, Any]:
    """The JSON schema of every flow's ``summary.json``."""
    return _ADAPTER.json_schema()


def schema_text() -> str:
    """:func:`summary_schema` as the text of ``summary.schema.json``."""
    return json.dumps(summary_schema(), indent=2, sort_keys=True) + "\n"
