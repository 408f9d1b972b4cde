"""The reference acceptance-length table: the auditable output of M0 (DESIGN.md section 2).

One YAML file per dataset under ``references/``, one entry per (model, method, thinking mode, K,
drafter variant) with AL, per-position rates, the counts behind them and provenance. The drafter
variant (:class:`Variant`) is what else changes the AL of one (model, method, K): the draft model,
vLLM's ``draft_sample_method`` and ``rejection_sample_method``, and the collection concurrency and
prefix caching the value was measured with; two variants live side by side in one table, and a
lookup that matches more than one is an error naming them (:class:`ReferenceAmbiguousError`).

Schema version 2 added the variant; a version-1 table still loads (every entry kept, the variant
filled with what it was measured with: :func:`upgrade_entry_v1`) and is written back as version 2. Loading validates the whole
file and names the file, the entry and the field of any error. Saving is atomic (write, then
rename), so a crash never leaves half a table; M0 adds its entries with :func:`update_reference`
(lock file, re-read, merge, atomic replace), so concurrent runs never lose each other's entries.

A table's ``kind`` says where its numbers come from: ``measured`` (a real M0 run: every entry
carries counts and full provenance), ``simulated`` (the built-in simulated engine: never to be
published as a reference), ``example`` (quoted figures, for demos and tests) or ``imported``
(another project's published values, e.g. InferenceX's golden curves: every entry names its source
in ``imported_from``, and alflow did not measure it; see :mod:`alflow.reference.inferencex`).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, Self

import yaml
from pydantic import Field, ValidationError, ValidationInfo, computed_field, field_validator, model_validator

from alflow.acceptance.synthetic import K_MAX, K_MIN
from alflow.config import (
    REMOTE_REFERENCES,
    CalibrateParams,
    SamplingParams,
    SpecMethod,
    StrictModel,
    ThinkingMode,
)
from alflow.errors import AlflowError, InvalidInputError
from alflow.reference.key import (
    SELF_DRAFTING,
    V1_CONCURRENCY,
    V1_PREFIX_CACHING,
    VLLM_DEFAULT_DRAFT_SAMPLE_METHOD,
    VLLM_DEFAULT_REJECTION_SAMPLE_METHOD,
    DraftSampleMethod,
    Key,
    RejectionSampleMethod,
    TableKind,
    Variant,
    VariantQuery,
    reference_rejection_method,
    server_variant_query,
)
from alflow.util.fsutil import atomic_write_bytes, file_lock, real_path, require_local_path
from alflow.util.names import check_identifier
from alflow.util.redact import redact_argv
from alflow.util.yamlfile import load_yaml, validate_strict, yaml_of_bytes

__all__ = [  # the key types are part of this module's interface (defined in alflow.reference.key)
    "SELF_DRAFTING",
    "V1_CONCURRENCY",
    "V1_PREFIX_CACHING",
    "VLLM_DEFAULT_DRAFT_SAMPLE_METHOD",
    "VLLM_DEFAULT_REJECTION_SAMPLE_METHOD",
    "DraftSampleMethod",
    "Key",
    "RejectionSampleMethod",
    "TableKind",
    "Variant",
    "VariantQuery",
    "m0_variant",
    "reference_rejection_method",
    "server_variant_query",
]

SCHEMA_VERSION: Literal[2] = 2
"""2: entries carry the drafter variant (draft model, sample methods, concurrency, prefix caching)."""
_AL_TOL = 1e-6
_RATES_TOL = 1e-4
LOCK_TIMEOUT_S = 120.0
"""How long a writer waits for another one's lock on a table (a merge takes milliseconds)."""


class ReferenceTableError(AlflowError):
    """A reference table that cannot be read or is invalid (the message names file and field)."""


class ReferenceNotFoundError(AlflowError, KeyError):
    """No reference value for the requested (model, method, thinking, K) and variant."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class ReferenceAmbiguousError(AlflowError, LookupError):
    """More than one drafter variant matches a lookup; the message names each candidate."""


class Provenance(StrictModel):
    """Where a reference value comes from: enough to audit and to reproduce it."""

    framework: str = Field(description="Serving framework that measured the value (vllm for M0).")
    framework_version: str | None = Field(None, description="Framework version reported by the server.")
    image: str | None = Field(None, description="Container image reference, e.g. vllm/vllm-openai:v0.11.0.")
    image_digest: str | None = Field(None, description="Content digest of the image (sha256:...).")
    command: tuple[str, ...] | None = Field(None, description="Exact server command line (argument list).")
    model_revision: str = Field(description="Model revision (commit hash) that was served.")
    dataset: str = Field(description="Dataset name, e.g. nvidia/SPEED-Bench.")
    dataset_revision: str | None = Field(None, description="Dataset revision (commit hash).")
    dataset_hash: str = Field(description="SHA-256 of the prompt file actually sent.")
    sampling: SamplingParams = Field(description="Sampling parameters sent with every request.")
    prompt_count: int = Field(ge=1, description="Number of prompts measured.")
    date: datetime = Field(description="When the measurement finished (UTC).")
    code_version: str = Field(description="alflow version and git revision that ran the measurement.")
    flow_run_id: str | None = Field(None, description="Prefect flow run id, where it ran under Prefect.")
    host: str | None = Field(None, description="Host and GPU description, where known.")

    @field_validator("command")
    @classmethod
    def _redacted(cls, command: tuple[str, ...] | None) -> tuple[str, ...] | None:
        """Read back without secrets, as a stored manifest's configuration is (R13-13).

        ``--api-key X``, ``--hf-token=X``, a secret header or a URL's password in a table written by hand or by
        another tool: ``***`` wherever the table is shown (``reference show --json``), exported or written back.
        """
        return None if command is None else tuple(redact_argv(command))


class ImportSource(StrictModel):
    """Where an imported value comes from: another project's published file, not an alflow measurement."""

    source: Literal["inferencex"] = Field(description="The project that published it.")
    file: str = Field(min_length=1, description="The file imported (name as given).")
    sha256: str = Field(min_length=64, max_length=64, description="SHA-256 of the file's bytes.")
    model_key: str = Field(min_length=1, description="The model's name in that file.")
    source_run: str | None = Field(
        None, description="The run or evidence that produced it, as the file names it."
    )
    collector: str | None = Field(None, description="The script that collected it, as the file names it.")
    comments: tuple[str, ...] = Field(
        (), description="The file's header comments (sampling, template, hardware)."
    )
    imported_at: datetime = Field(description="When alflow imported it (UTC).")
    code_version: str = Field(description="alflow version that imported it.")


class ReferenceEntry(StrictModel):
    """One reference AL: a (model, method, thinking mode, K, drafter variant) point."""

    model: str = Field(min_length=1, description="Model id.")
    method: SpecMethod = Field(description="Speculative method.")
    thinking: ThinkingMode = Field(description="Thinking mode the value was measured with.")
    k: int = Field(ge=K_MIN, le=K_MAX, description="Number of speculative tokens K.")
    draft_model: str | None = Field(
        None, min_length=1, description="Draft model id (None: mtp and ngram draft with the target itself)."
    )
    draft_sample_method: DraftSampleMethod = Field(
        description="How the drafter picked its tokens (vLLM's draft_sample_method; its default is greedy)."
    )
    rejection_sample_method: RejectionSampleMethod = Field(
        description="How the target verified the drafts (vLLM's rejection_sample_method; its default is standard)."
    )
    concurrency: int = Field(ge=1, description="Requests in flight while the value was collected.")
    prefix_caching: bool = Field(description="Whether prefix caching was on while the value was collected.")
    al: float = Field(description="Reference acceptance length (bonus token included), in [1, K+1].")
    per_position_rates: tuple[float, ...] | None = Field(
        None, description="Unconditional per-position acceptance rates p_1..p_K."
    )
    num_drafts: int | None = Field(None, ge=0, description="Verify steps with drafts in the window.")
    draft_tokens: int | None = Field(None, ge=0, description="Draft tokens proposed in the window.")
    accepted_tokens: int | None = Field(None, ge=0, description="Draft tokens accepted in the window.")
    ci_low: float | None = Field(None, description="Lower bound of the AL confidence interval.")
    ci_high: float | None = Field(None, description="Upper bound of the AL confidence interval.")
    provenance: Provenance | None = Field(None, description="How the value was measured.")
    imported_from: ImportSource | None = Field(
        None, description="The published file an imported value comes from (imported tables only)."
    )
    note: str | None = Field(None, description="Free-text remark (e.g. the source of an example value).")

    @field_validator("model", "draft_model")
    @classmethod
    def _identifier(cls, value: str | None, info: ValidationInfo) -> str | None:
        """Model ids as the configuration takes them (round 17, #49: ESC and RLO passed ``reference validate``)."""
        return None if value is None else check_identifier(value, what=str(info.field_name))

    @property
    def variant(self) -> Variant:
        """The drafter variant the value was measured with."""
        return Variant(**{f.name: getattr(self, f.name) for f in fields(Variant)})

    @property
    def key(self) -> Key:
        """The lookup key (model, method, thinking, K, variant)."""
        return Key(self.model, self.method, self.thinking, self.k, self.variant)

    @property
    def label(self) -> str:
        """``model method thinking=.. K=.. [variant]``: how errors and reports name the entry."""
        return self.key.label()

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        where = f"{self.model} {self.method.value} thinking={self.thinking.value} K={self.k}"
        if self.method in SELF_DRAFTING and self.draft_model is not None:
            raise ValueError(
                f"draft_model={self.draft_model!r} for {where}: method {self.method.value!r} drafts with the "
                "target itself (leave draft_model out)"
            )
        if not math.isfinite(self.al) or not 1.0 <= self.al <= self.k + 1:
            raise ValueError(f"al={self.al!r} for {where} is outside [1, {self.k + 1}]")
        if self.per_position_rates is not None:
            rates = self.per_position_rates
            if len(rates) != self.k:
                raise ValueError(
                    f"per_position_rates for {where} has {len(rates)} values; K={self.k} needs {self.k}"
                )
            prev = 1.0
            for i, r in enumerate(rates, start=1):
                if not 0.0 <= r <= 1.0:
                    raise ValueError(f"per_position_rates p_{i}={r!r} for {where} is outside [0, 1]")
                if r > prev + 1e-12:
                    raise ValueError(f"per_position_rates for {where} increase at p_{i}={r!r} > {prev!r}")
                prev = r
            implied = 1.0 + math.fsum(rates)
            if abs(implied - self.al) > _RATES_TOL:
                raise ValueError(
                    f"al={self.al!r} for {where} disagrees with 1 + sum(per_position_rates) = {implied!r}"
                )
        if self.num_drafts is not None and self.accepted_tokens is not None:
            if self.num_drafts == 0:
                raise ValueError(f"num_drafts=0 for {where}: no speculative steps, no AL")
            implied = 1.0 + self.accepted_tokens / self.num_drafts
            if abs(implied - self.al) > _AL_TOL * self.al:
                raise ValueError(
                    f"al={self.al!r} for {where} disagrees with 1 + accepted/num_drafts = {implied!r}"
                )
        if (self.ci_low is None) != (self.ci_high is None):
            raise ValueError(f"give both ci_low and ci_high for {where}, or neither")
        if (
            self.ci_low is not None
            and self.ci_high is not None
            and not self.ci_low <= self.al <= self.ci_high
        ):
            raise ValueError(
                f"confidence interval [{self.ci_low}, {self.ci_high}] for {where} excludes al={self.al}"
            )
        return self


class ReferenceTable(StrictModel):
    """A reference AL table for one dataset category."""

    schema_version: Literal[2] = Field(
        SCHEMA_VERSION, description="File schema version (a version-1 file is upgraded on load)."
    )
    kind: TableKind = Field(
        description=(
            "measured (real M0 run), simulated (alflow's sim engine), example (quoted figures) or imported "
            "(another project's published values, e.g. InferenceX golden curves; not measured by alflow)."
        )
    )
    dataset: str = Field(min_length=1, description="Dataset, e.g. speed-bench.")
    category: str = Field(min_length=1, description="Dataset category, e.g. coding.")
    description: str = Field("", description="What the table is and where it comes from.")
    entries: tuple[ReferenceEntry, ...] = Field(
        description="One entry per (model, method, thinking, K, drafter variant)."
    )

    @model_validator(mode="after")
    def _check(self) -> Self:
        seen: set[Key] = set()
        for entry in self.entries:
            if entry.key in seen:
                raise ValueError(f"duplicate entry for {entry.label}")
            seen.add(entry.key)
            if (entry.imported_from is not None) != (self.kind == "imported"):
                raise ValueError(
                    f"{entry.label}: an imported table needs imported_from on every entry"
                    if self.kind == "imported"
                    else f"{entry.label} has imported_from: imported values belong in an imported table, "
                    f"not a {self.kind} one"
                )
            if self.kind not in ("example", "imported"):
                missing = [
                    name
                    for name in ("provenance", "num_drafts", "accepted_tokens", "per_position_rates")
                    if getattr(entry, name) is None
                ]
                if missing:
                    raise ValueError(
                        f"a {self.kind} table needs {', '.join(missing)} for {entry.model} "
                        f"{entry.method.value} thinking={entry.thinking.value} K={entry.k}"
                    )
        return self

    @property
    def variants(self) -> tuple[Variant, ...]:
        """The distinct drafter variants in the table, in order."""
        return tuple(sorted({e.variant for e in self.entries}, key=Variant.sort_key))

    def lookup(
        self,
        model: str,
        method: SpecMethod | str,
        thinking: ThinkingMode | str,
        k: int,
        variant: VariantQuery | Variant | None = None,
    ) -> ReferenceEntry:
        """The entry for (model, method, thinking, K) of the variant asked for.

        ``variant`` None (or a query leaving fields None) matches any: the lookup succeeds when exactly one
        variant of the point matches, names what the table has when none does
        (:class:`ReferenceNotFoundError`) and names every candidate when more than one does
        (:class:`ReferenceAmbiguousError`).
        """
        m, t = SpecMethod(method), ThinkingMode(thinking)
        query = VariantQuery.exact(variant) if isinstance(variant, Variant) else variant or VariantQuery()
        point = [e for e in self.entries if (e.model, e.method, e.thinking, e.k) == (model, m, t, k)]
        found = [e for e in point if query.matches(e.variant)]
        subject = f"{model} {m.value} thinking={t.value} K={k}"
        where = f"the {self.dataset}/{self.category} table ({self.kind})"
        if len(found) == 1:
            return found[0]

        def variants(entries: list[ReferenceEntry]) -> str:
            return "; ".join(
                f"[{e.variant.label()}]" for e in sorted(entries, key=lambda e: e.variant.sort_key())
            )

        if len(found) > 1:
            asked = query.label()
            raise ReferenceAmbiguousError(
                f"{len(found)} drafter variants of {subject} in {where} match"
                + (f" {asked}" if asked else " (no variant given)")
                + f": {variants(found)}; say which (the server's draft model, draft_sample_method and "
                "rejection_sample_method in its speculative config), or keep one variant per table"
            )
        if point:
            raise ReferenceNotFoundError(
                f"no reference AL for {subject} with {query.label()} in {where}; it has that point for: "
                + variants(point)
            )
        same = sorted({e.k for e in self.entries if (e.model, e.method, e.thinking) == (model, m, t)})
        if same:
            hint = f"it has K={', '.join(map(str, same))} for that model, method and thinking mode"
        else:
            have = sorted({f"{e.model} {e.method.value} thinking={e.thinking.value}" for e in self.entries})
            hint = "it has: " + ("; ".join(have) if have else "no entries")
        raise ReferenceNotFoundError(f"no reference AL for {subject} in {where}; {hint}")

    def with_entries(self, entries: Iterable[ReferenceEntry]) -> ReferenceTable:
        """A copy with ``entries`` added or replacing the ones with the same key (validated)."""
        merged = {e.key: e for e in self.entries}
        for entry in entries:  # validated again: model_copy(update=...) skips validation
            e = ReferenceEntry.model_validate(entry.model_dump(warnings=False))
            merged[e.key] = e
        ordered = sorted(merged.values(), key=lambda e: e.key.sort_key())
        return ReferenceTable.model_validate(
            {**self.model_dump(), "entries": [x.model_dump() for x in ordered]}
        )


# --------------------------------------------------------------------------------------------
# Schema version 1 -> 2

_V2_FIELDS = ("draft_sample_method", "rejection_sample_method", "concurrency", "prefix_caching")


def _speculative_config_of(command: object) -> dict[str, Any]:
    """The ``--speculative-config`` JSON of a recorded vLLM command line (empty when there is none)."""
    if not isinstance(command, Sequence) or isinstance(command, str):
        return {}
    args = [str(a) for a in command]
    for i, arg in enumerate(args):
        text = None
        if arg == "--speculative-config" and i + 1 < len(args):
            text = args[i + 1]
        elif arg.startswith("--speculative-config="):
            text = arg.split("=", 1)[1]
        if text is not None:
            try:
                spec = json.loads(text)
            except ValueError:
                return {}
            return spec if isinstance(spec, dict) else {}
    return {}


def upgrade_entry_v1(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A version-1 entry with the variant it was measured with (an entry that has one is returned as is).

    From the entry's recorded server command where it has one (M0 records the argv: the draft model and
    sample methods of its ``--speculative-config``, ``--enable-prefix-caching``), otherwise what M0 ran with:
    no draft model, vLLM's default sample methods, concurrency 1, prefix caching off.
    """
    data = dict(raw)
    if all(name in data for name in _V2_FIELDS):
        return data
    prov = data.get("provenance")
    command = prov.get("command") if isinstance(prov, Mapping) else None
    spec = _speculative_config_of(command)
    args = (
        {str(a) for a in command} if isinstance(command, Sequence) and not isinstance(command, str) else set()
    )
    method = data.get("method")
    self_drafting = method in {m.value for m in SELF_DRAFTING}
    if "draft_model" not in data and not self_drafting and isinstance(spec.get("model"), str):
        data["draft_model"] = spec["model"]
    # a recorded value the schema does not allow (e.g. "synthetic") is kept, so validation names it
    data.setdefault("draft_sample_method", spec.get("draft_sample_method", VLLM_DEFAULT_DRAFT_SAMPLE_METHOD))
    data.setdefault(
        "rejection_sample_method", spec.get("rejection_sample_method", VLLM_DEFAULT_REJECTION_SAMPLE_METHOD)
    )
    data.setdefault("concurrency", V1_CONCURRENCY)
    data.setdefault("prefix_caching", "--enable-prefix-caching" in args or V1_PREFIX_CACHING)
    return data


def upgrade_table(data: Any) -> Any:
    """A table's mapping in the current schema: version 1 upgraded entry by entry, others as they are.

    A table without ``schema_version`` is version 1: the key defaulted to 1 until version 2 existed.
    """
    if not isinstance(data, Mapping) or data.get("schema_version", 1) != 1:
        return data
    entries = data.get("entries")
    out = dict(data)
    out["schema_version"] = SCHEMA_VERSION
    if isinstance(entries, list | tuple):
        out["entries"] = [upgrade_entry_v1(e) if isinstance(e, Mapping) else e for e in entries]
    return out


# --------------------------------------------------------------------------------------------
# YAML


def load_reference(path: str | os.PathLike[str]) -> ReferenceTable:
    """Read and validate a reference table; errors name the file, the entry and the field."""
    p = Path(path)
    try:
        data = load_yaml(p, what="reference table")
    except InvalidInputError as exc:
        raise ReferenceTableError(str(exc)) from None
    return _validated(data, str(p))


def reference_of_bytes(raw: bytes, source: str) -> ReferenceTable:
    """A reference table from the bytes of a file read elsewhere (an fsspec URL); errors start with ``source``."""
    try:
        data = yaml_of_bytes(raw, source)
    except InvalidInputError as exc:
        raise ReferenceTableError(str(exc)) from None
    return _validated(data, source)


def _validated(data: Any, source: str) -> ReferenceTable:
    if not isinstance(data, dict):
        raise ReferenceTableError(f"{source}: a reference table is a YAML mapping, got {type(data).__name__}")
    data = upgrade_table(data)  # a version-1 table keeps every entry and gains its variant
    return validate_strict(
        data,
        ReferenceTable,
        source=source,
        error=ReferenceTableError,
        describe=lambda exc: _describe(exc, data),
    )


def dump_reference(table: ReferenceTable) -> str:
    """YAML text of a table (fields in declaration order, no Python tags)."""
    data = table.model_dump(mode="json", exclude_none=True)
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)


def save_reference(table: ReferenceTable, path: str | os.PathLike[str]) -> Path:
    """Write a table atomically (temporary file in the same folder, then rename).

    This replaces whatever the file holds: writers that add entries use :func:`update_reference`. A
    symlinked table is written at its real path (:func:`alflow.util.fsutil.real_path`): the link stays a link.
    """
    return atomic_write_bytes(real_path(path), dump_reference(table).encode())


def update_reference(
    path: str | os.PathLike[str],
    entries: Iterable[ReferenceEntry],
    *,
    new: ReferenceTable,
    timeout_s: float = LOCK_TIMEOUT_S,
) -> tuple[ReferenceTable | None, ReferenceTable]:
    """Merge ``entries`` into the table at ``path`` without losing another writer's entries.

    Under an exclusive lock on ``<path>.lock`` (waiting at most ``timeout_s``, then an error naming
    the lock): read the table on disk, merge (``entries`` replace those with the same key, every
    other entry is kept), write it atomically. ``new`` is the (empty) table to start from when there
    is no file yet. A damaged table on disk is an error naming the file and is left as it is; so is a
    table of another ``kind`` than ``new``. Returns the table on disk before the merge (None when
    there was none) and the table written. A symlinked table is locked and replaced at its real path, so
    the link stays a link and every writer, through the link or not, takes the same lock.
    """
    target = real_path(require_local_path(path, what="reference table", why=REMOTE_REFERENCES))
    entries = tuple(entries)
    with file_lock(target, timeout_s=timeout_s, what="the reference table"):
        previous = load_reference(target) if target.exists() else None
        if previous is not None and previous.kind != new.kind:
            raise ReferenceTableError(
                f"{target} is a {previous.kind} table; refusing to add {new.kind} values to it "
                "(choose another reference_path)"
            )
        table = (previous or new).with_entries(entries)
        save_reference(table, target)
    return previous, table


def _describe(exc: ValidationError, data: dict[str, object]) -> str:
    parts = []
    for err in exc.errors()[:5]:
        loc = list(err["loc"])
        where = ""
        if len(loc) >= 2 and loc[0] == "entries" and isinstance(loc[1], int):
            entries = data.get("entries")
            if isinstance(entries, list) and loc[1] < len(entries) and isinstance(entries[loc[1]], dict):
                e = entries[loc[1]]
                where = f" ({e.get('model')} {e.get('method')} thinking={e.get('thinking')} K={e.get('k')})"
        path = ".".join(f"[{x}]" if isinstance(x, int) else str(x) for x in loc).replace(".[", "[")
        msg = str(err["msg"]).removeprefix("Value error, ")
        parts.append(f"{path or 'table'}{where}: {msg}")
    more = len(exc.errors()) - 5
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


# --------------------------------------------------------------------------------------------
# Diff


@dataclass(frozen=True)
class DiffRow:
    """How one (model, method, thinking, K, variant) point changed between two tables."""

    model: str
    method: str
    thinking: str
    k: int
    variant: str
    """The drafter variant, spelled out (:meth:`Variant.label`)."""
    status: Literal["added", "removed", "changed", "unchanged"]
    old_al: float | None
    new_al: float | None
    provenance_changes: tuple[str, ...] = ()

    @computed_field  # type: ignore[prop-decorator]
    @property
    def delta(self) -> float | None:
        """New minus old AL (rounded to 12 digits)."""
        if self.old_al is None or self.new_al is None:
            return None
        return round(self.new_al - self.old_al, 12)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def rel_delta(self) -> float | None:
        """Relative change ``(new - old) / old`` (rounded to 12 digits)."""
        if self.old_al is None or self.new_al is None:
            return None
        return round((self.new_al - self.old_al) / self.old_al, 12)


@dataclass(frozen=True)
class ReferenceDiff:
    """Every point of two tables with what changed and by how much (M0's ``summary.json`` stores it as it is)."""

    rows: tuple[DiffRow, ...]
    table_changes: tuple[str, ...]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def changed(self) -> bool:
        """True when any value was added, removed or changed."""
        return any(r.status != "unchanged" for r in self.rows) or bool(self.table_changes)


_PROVENANCE_FIELDS = (
    "framework",
    "framework_version",
    "image",
    "image_digest",
    "model_revision",
    "dataset_hash",
)


def diff_tables(old: ReferenceTable, new: ReferenceTable, *, tolerance: float = 0.0) -> ReferenceDiff:
    """Compare two tables point by point; an AL change within ``tolerance`` counts as unchanged."""
    if not math.isfinite(tolerance) or tolerance < 0:
        raise InvalidInputError(f"tolerance {tolerance!r}: must be a finite number >= 0")
    table_changes = tuple(
        f"{name}: {getattr(old, name)!r} -> {getattr(new, name)!r}"
        for name in ("kind", "dataset", "category")
        if getattr(old, name) != getattr(new, name)
    )
    a = {e.key: e for e in old.entries}
    b = {e.key: e for e in new.entries}
    rows: list[DiffRow] = []
    for key in sorted(a.keys() | b.keys(), key=Key.sort_key):
        o, n = a.get(key), b.get(key)
        head = (key.model, key.method.value, key.thinking.value, key.k, key.variant.label())
        if o is None and n is not None:
            rows.append(DiffRow(*head, "added", None, n.al))
        elif n is None and o is not None:
            rows.append(DiffRow(*head, "removed", o.al, None))
        elif o is not None and n is not None:
            prov = _provenance_changes(o.provenance, n.provenance)
            status: Literal["changed", "unchanged"] = (
                "changed" if abs(n.al - o.al) > tolerance else "unchanged"
            )
            rows.append(DiffRow(*head, status, o.al, n.al, prov))
    return ReferenceDiff(tuple(rows), table_changes)


def _provenance_changes(old: Provenance | None, new: Provenance | None) -> tuple[str, ...]:
    if old is None or new is None:
        return () if old is new else ("provenance: " + ("added" if old is None else "removed"),)
    return tuple(
        f"{name}: {getattr(old, name)!r} -> {getattr(new, name)!r}"
        for name in _PROVENANCE_FIELDS
        if getattr(old, name) != getattr(new, name)
    )


def m0_variant(params: CalibrateParams) -> Variant:
    """The drafter variant M0 measures with: its drafter, the server's sample methods, its load and caching.

    A sample method the server template leaves None is vLLM's default (M0 measures with vLLM), stored
    explicitly: ``greedy`` and ``standard`` (:data:`~alflow.reference.table.VLLM_DEFAULT_DRAFT_SAMPLE_METHOD`).
    """
    spec = params.server.speculative
    return Variant(
        draft_model=None if params.method in SELF_DRAFTING else params.draft_model,
        draft_sample_method=(spec.draft_sample_method if spec else None) or VLLM_DEFAULT_DRAFT_SAMPLE_METHOD,
        rejection_sample_method=reference_rejection_method(
            (spec.rejection_sample_method if spec else None) or VLLM_DEFAULT_REJECTION_SAMPLE_METHOD
        ),
        concurrency=params.load.concurrency,
        prefix_caching=params.server.enable_prefix_caching,
    )
