"""InferenceX golden AL files from an alflow reference table: the export half of :mod:`alflow.reference.inferencex`.

One file per model, method and drafter variant, the variant written into ``_metadata``, so export -> import
round-trips it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from alflow.config import SpecMethod, ThinkingMode
from alflow.errors import InvalidInputError
from alflow.reference.inferencex import (
    AL_DECIMALS,
    METADATA_KEY,
    THINKING_KEYS,
)
from alflow.reference.table import (
    VLLM_DEFAULT_DRAFT_SAMPLE_METHOD,
    VLLM_DEFAULT_REJECTION_SAMPLE_METHOD,
    ReferenceEntry,
    ReferenceTable,
    ReferenceTableError,
    Variant,
)
from alflow.util.fsutil import atomic_write_bytes


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9._-]+", "-", text.rsplit("/", 1)[-1].lower()).strip("-") or "model"


_LEVEL = {
    SpecMethod.MTP: "MTP",
    SpecMethod.EAGLE3: "EAGLE3",
    SpecMethod.DSPARK: "DSpark",
    SpecMethod.DFLASH: "DFlash",
    SpecMethod.DFLASH2: "DFlash2",
    SpecMethod.NGRAM: "n-gram",
    SpecMethod.DRAFT_MODEL: "draft-model",
}


@dataclass(frozen=True)
class GoldenFile:
    """One exported golden file: its name and text."""

    name: str
    text: str


def golden_files(table: ReferenceTable, *, code_version: str, table_name: str) -> tuple[GoldenFile, ...]:
    """The table as InferenceX golden files, one per (model, method, drafter variant).

    A simulated table is refused: its numbers are not a reference. The header says what the values are
    (kind, provenance or the imported source); ``_metadata`` carries the whole variant.
    """
    if table.kind == "simulated":
        raise ReferenceTableError(
            f"{table_name} is a simulated table (alflow's simulated engine): not a reference, nothing to export"
        )
    if not table.entries:
        raise ReferenceTableError(f"{table_name} has no entries: nothing to export")
    groups: dict[tuple[str, SpecMethod, Variant], list[ReferenceEntry]] = {}
    for e in table.entries:
        groups.setdefault((e.model, e.method, e.variant), []).append(e)
    names: dict[tuple[str, SpecMethod, Variant], str] = {}
    for model, method, variant in groups:
        siblings = [v for (m, me, v) in groups if (m, me) == (model, method)]
        parts = [_slug(model), method.value]
        if len({v.draft_model for v in siblings}) > 1 and variant.draft_model:
            parts.append(_slug(variant.draft_model))
        if variant.draft_sample_method != VLLM_DEFAULT_DRAFT_SAMPLE_METHOD:
            parts.append(f"{variant.draft_sample_method}_sample_method")
        if variant.rejection_sample_method != VLLM_DEFAULT_REJECTION_SAMPLE_METHOD:
            parts.append(f"{variant.rejection_sample_method}_rejection_sample_method")
        if len({v.concurrency for v in siblings}) > 1:
            parts.append(f"conc{variant.concurrency}")
        if len({v.prefix_caching for v in siblings}) > 1:
            parts.append("prefix_caching" if variant.prefix_caching else "no_prefix_caching")
        names[(model, method, variant)] = "_".join(parts) + ".yaml"
    taken: dict[str, tuple[str, SpecMethod, Variant]] = {}
    for key, name in names.items():
        if name in taken:  # e.g. two models whose ids end alike: name the full id
            raise ReferenceTableError(
                f"{table_name}: {key[0]} and {taken[name][0]} would both export to {name}; rename one model"
            )
        taken[name] = key
    out = []
    for (model, method, variant), entries in sorted(
        groups.items(), key=lambda kv: (kv[0][0], kv[0][1].value, kv[0][2].sort_key())
    ):
        header = _header(table, table_name, entries, method, variant, code_version)
        body: dict[str, Any] = {METADATA_KEY: _metadata(method, variant, code_version)}
        ordered = sorted(entries, key=lambda e: e.k)
        modes = {
            key: {e.k: round(e.al, AL_DECIMALS) for e in ordered if e.thinking is m}
            for key, m in THINKING_KEYS.items()
        }
        body[model] = {key: by_k for key, by_k in modes.items() if by_k}
        text = "\n".join(f"# {line}" if line else "#" for line in header) + "\n"
        text += yaml.safe_dump(body, sort_keys=False, allow_unicode=True, width=100)
        out.append(GoldenFile(names[(model, method, variant)], text))
    return tuple(out)


def _metadata(method: SpecMethod, variant: Variant, code_version: str) -> dict[str, Any]:
    return {
        **({"draft-model": variant.draft_model} if variant.draft_model else {}),
        "method": method.value,
        "draft-sample-method": variant.draft_sample_method,
        "rejection-sample-method": variant.rejection_sample_method,
        "concurrency": variant.concurrency,
        "prefix-caching": variant.prefix_caching,
        "exported-by": code_version,
    }


def _header(
    table: ReferenceTable,
    table_name: str,
    entries: Sequence[ReferenceEntry],
    method: SpecMethod,
    variant: Variant,
    code_version: str,
) -> list[str]:
    lines: list[str] = []
    sources = {e.imported_from for e in entries if e.imported_from is not None}
    if len(sources) == 1:
        src = next(iter(sources))
        lines += list(src.comments)  # the source's own header, its run first
        lines.append(
            f"Re-exported by {code_version} from {table_name} (imported from {Path(src.file).name})."
        )
    else:
        lines.append(
            f"Acceptance Length (AL) reference values from the alflow {table.kind} table {table_name}"
            + (" (NOT measured: example figures)" if table.kind == "example" else "")
            + "."
        )
        lines.append(f"dataset: {table.category} ({table.dataset})")
        provs = [e.provenance for e in entries if e.provenance is not None]
        if provs:
            p = provs[0]
            lines.append(
                f"Measured by alflow M0 with {p.framework}"
                + (f" {p.framework_version}" if p.framework_version else "")
                + (f", image {p.image}" if p.image else "")
                + f", model revision {p.model_revision}, {p.prompt_count} prompts."
            )
            for mode in ThinkingMode:
                sampled = [e.provenance for e in entries if e.thinking is mode and e.provenance is not None]
                if sampled:
                    fields = sampled[0].sampling.request_fields()
                    lines.append(
                        f"thinking_{mode.value}: " + " | ".join(f"{k}: {v}" for k, v in fields.items())
                    )
            runs = sorted({str(p.flow_run_id) for p in provs if p.flow_run_id})
            if runs:
                lines.append("flow runs: " + ", ".join(runs))
        lines.append(f"Exported by {code_version}; AL rounded to {AL_DECIMALS} decimals as InferenceX does.")
    lines.append(
        f"variant: draft={variant.draft_model or 'self'} | draft_sample_method={variant.draft_sample_method} | "
        f"rejection_sample_method={variant.rejection_sample_method} | concurrency={variant.concurrency} | "
        f"prefix_caching={'on' if variant.prefix_caching else 'off'}"
    )
    return [*lines, "", f"key = num_speculative_tokens ({_LEVEL[method]} level); value = golden AL"]


def export_golden(
    table: ReferenceTable,
    out_dir: str | os.PathLike[str],
    *,
    code_version: str,
    table_name: str,
    overwrite: bool = False,
) -> tuple[Path, ...]:
    """Write the table's golden files into ``out_dir``, each atomically.

    Existing files are refused (before anything is written) unless ``overwrite``.
    """
    files = golden_files(table, code_version=code_version, table_name=table_name)
    folder = Path(out_dir)
    if folder.exists() and not folder.is_dir():
        raise InvalidInputError(f"--out {folder}: exists and is not a folder")
    if not overwrite:
        there = [f.name for f in files if (folder / f.name).exists()]
        if there:
            raise InvalidInputError(
                f"--out {folder}: {', '.join(there)} already exist{'s' if len(there) == 1 else ''}; "
                "choose another folder or pass --overwrite"
            )
    folder.mkdir(parents=True, exist_ok=True)
    return tuple(atomic_write_bytes(folder / f.name, f.text.encode()) for f in files)
