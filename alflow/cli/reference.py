"""``alflow reference``: validate, show, diff and audit reference AL tables, and more.

Also: import and export InferenceX golden curves; write the M0 workflow's config.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
import yaml
from pydantic import ValidationError
from rich.markup import escape
from rich.text import Text

from alflow.cli.common import (
    JsonOpt,
    checked_out_file,
    console,
    emit_json,
    handle_errors,
    new_table,
    say,
    write_out_file,
)
from alflow.errors import InvalidInputError
from alflow.reference import table as ref
from alflow.reports.markdown import escape_controls
from alflow.util.fsutil import check_writable_dir
from alflow.util.rows import dump_row
from alflow.util.yamlfile import describe_validation, load_yaml_model

if TYPE_CHECKING:
    from alflow.config import SpecMethod

reference_app = typer.Typer(
    help="Reference AL tables: validate, show, diff, audit, import/export InferenceX golden curves.",
    no_args_is_help=True,
)


def register(app: typer.Typer) -> None:
    """Add ``alflow reference`` to ``app``."""
    app.add_typer(reference_app, name="reference")


PathArg = Annotated[Path, typer.Argument(help="Path of a reference table (YAML).")]


@reference_app.command("validate")
@handle_errors
def reference_validate(path: PathArg, as_json: JsonOpt = False) -> None:
    """Validate a reference table; exit 2 with the file, entry and field of the first problems."""
    table = ref.load_reference(path)
    summary = {"path": str(path), "valid": True, "kind": table.kind, "entries": len(table.entries)}
    if as_json:
        emit_json(summary)
    else:
        say(f"{path}: valid {table.kind} table, {len(table.entries)} entries")


@reference_app.command("show")
@handle_errors
def reference_show(
    path: PathArg,
    model: Annotated[str | None, typer.Option("--model", help="Only this model.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Show a reference table: AL by K for each model, method and thinking mode."""
    table = ref.load_reference(path)
    entries = [e for e in table.entries if model is None or e.model == model]
    if model is not None and not entries:
        raise InvalidInputError(f"model {model!r} is not in {path}")
    if as_json:
        emit_json(
            {
                "kind": table.kind,
                "dataset": table.dataset,
                "category": table.category,
                "entries": [e.model_dump(mode="json", exclude_none=True) for e in entries],
            }
        )
        return
    ks = sorted({e.k for e in entries})
    title = escape(escape_controls(f"Reference AL: {table.dataset}/{table.category} ({table.kind})"))
    out = new_table(title, ("model", "method", "thinking", "variant"))
    for k in ks:
        out.add_column(f"K={k}", justify="right")
    groups: dict[tuple[str, str, str, ref.Variant], dict[int, float]] = {}
    for e in sorted(entries, key=lambda e: e.key.sort_key()):
        groups.setdefault((e.model, e.method.value, e.thinking.value, e.variant), {})[e.k] = e.al
    for (m, meth, th, variant), by_k in groups.items():
        out.add_row(
            *(Text(escape_controls(cell)) for cell in (m, meth, th, variant.label())),
            *(f"{by_k[k]:.3f}" if k in by_k else "" for k in ks),
        )
    console.print(out)
    if table.kind == "imported":
        sources = sorted({e.imported_from.file for e in entries if e.imported_from is not None})
        say("note: IMPORTED values, not measured by alflow (from " + ", ".join(sources) + ")")
    elif table.kind != "measured":
        say(f"note: this is a {table.kind} table, not a measured reference")


@reference_app.command("diff")
@handle_errors
def reference_diff(
    old: Annotated[Path, typer.Argument(help="The previous table.")],
    new: Annotated[Path, typer.Argument(help="The new table.")],
    tolerance: Annotated[float, typer.Option(help="AL changes within this are reported as unchanged.")] = 0.0,
    as_json: JsonOpt = False,
) -> None:
    """Show what changed between two reference tables, and by how much."""
    if not math.isfinite(tolerance) or tolerance < 0:
        raise InvalidInputError(f"--tolerance {tolerance:g}: must be a finite number >= 0")
    diff = ref.diff_tables(ref.load_reference(old), ref.load_reference(new), tolerance=tolerance)
    if as_json:
        emit_json(dump_row(diff))
        return
    for line in diff.table_changes:
        say(f"table {line}")
    out = new_table(
        escape(f"{old} -> {new}"),
        (
            "model",
            "method",
            "thinking",
            "K",
            "variant",
            "status",
            "old AL",
            "new AL",
            "delta",
            "rel",
            "provenance",
        ),
    )
    for r in diff.rows:
        if r.status == "unchanged" and not r.provenance_changes:
            continue
        out.add_row(
            Text(r.model),
            Text(r.method),
            Text(r.thinking),
            str(r.k),
            Text(r.variant),
            Text(r.status),
            "" if r.old_al is None else f"{r.old_al:.4f}",
            "" if r.new_al is None else f"{r.new_al:.4f}",
            "" if r.delta is None else f"{r.delta:+.4f}",
            "" if r.rel_delta is None else f"{r.rel_delta:+.2%}",
            Text("; ".join(r.provenance_changes)),
        )
    if out.row_count:
        console.print(out)
    else:
        console.print("no changes", highlight=False)


@reference_app.command("audit")
@handle_errors
def reference_audit(
    table: Annotated[Path, typer.Argument(help="The reference table to audit.")],
    run_dirs: Annotated[list[Path], typer.Argument(help="Run directories of the M0 runs that wrote it.")],
    as_json: JsonOpt = False,
) -> None:
    """Check every field of every entry against its run's stored data; exit 1 on a mismatch or unchecked field.

    AL, counts, rates and CI bounds are recomputed from the stored scrapes; the drafter variant, model revision,
    sampling and framework come from the run's configuration; the dataset hash from the run's record and the
    dataset file where it is here; the rest from the run's provenance and summary. Each mismatch names the
    field, the table's value and the expected one.
    """
    from alflow.results.audit import audit_reference

    report = audit_reference(table, [str(d) for d in run_dirs])
    if as_json:
        emit_json(dump_row(report))
    else:
        out = new_table(
            escape(escape_controls(f"Audit of {table}")), ("entry", "status", "problems"), overflow="fold"
        )
        for row in report.rows:
            lines = [*row.problems, *(f"unchecked: {u}" for u in row.unchecked), *row.notes]
            out.add_row(*(Text(escape_controls(cell)) for cell in (row.entry, row.status, "\n".join(lines))))
        console.print(out)
        console.print("audit passed" if report.ok else "audit FAILED", highlight=False)
    if not report.ok:
        raise typer.Exit(1)


def _on_off(value: str | None, option: str) -> bool | None:
    if value is None:
        return None
    if value not in ("on", "off"):
        raise InvalidInputError(f"{option} {value!r}: give on or off")
    return value == "on"


def _spec_method(method: str) -> SpecMethod:
    """``--method`` as a method, or the one-line error naming the choices."""
    from alflow.config import SpecMethod

    try:
        return SpecMethod(method)
    except ValueError:
        raise InvalidInputError(
            f"--method {method!r}: not one of {', '.join(m.value for m in SpecMethod)}"
        ) from None


@reference_app.command("import-inferencex")
@handle_errors
def reference_import_inferencex(
    files: Annotated[
        list[Path], typer.Argument(help="InferenceX golden AL files (golden_al_distribution/*.yaml).")
    ],
    into: Annotated[
        Path, typer.Option("--into", help="The imported reference table to add them to (created).")
    ],
    model: Annotated[
        str | None, typer.Option("--model", help="Model name in the table (default: the file's model key).")
    ] = None,
    method: Annotated[
        str | None, typer.Option("--method", help="Speculative method, where the file does not say it.")
    ] = None,
    draft_model: Annotated[
        str | None, typer.Option("--draft-model", help="Draft model id, where the file does not name it.")
    ] = None,
    concurrency: Annotated[
        int | None,
        typer.Option(
            "--concurrency", help="Collection concurrency, where neither the file nor its collector says."
        ),
    ] = None,
    prefix_caching: Annotated[
        str | None,
        typer.Option("--prefix-caching", help="on or off, where neither the file nor its collector says."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Import InferenceX golden curves into an ``imported`` table (never a measured one), variant and source kept."""
    from alflow.reference.inferencex import import_golden
    from alflow.results.provenance import code_version

    into = checked_out_file(
        into, "--into"
    )  # a FIFO, a folder, a device, a path under a file: before any read
    spec_method = None if method is None else _spec_method(method)
    if concurrency is not None and concurrency < 1:
        raise InvalidInputError(f"--concurrency {concurrency}: must be >= 1")
    result = import_golden(
        files,
        into,
        code_version=code_version(),
        model=model,
        method=spec_method,
        draft_model=draft_model,
        concurrency=concurrency,
        prefix_caching=_on_off(prefix_caching, "--prefix-caching"),
    )
    variants = sorted(
        {
            f"{e.model} {e.method.value} thinking={e.thinking.value} [{e.variant.label()}]"
            for e in result.entries
        }
    )
    if as_json:
        emit_json(
            {
                "into": str(into),
                "imported": len(result.entries),
                "entries": len(result.table.entries),
                "skipped": list(result.skipped),
                "curves": variants,
            }
        )
        return
    say(
        f"imported {len(result.entries)} values into {into} ({len(result.table.entries)} entries, kind imported)"
    )
    for line in variants:
        say(f"  {line}")
    if result.skipped:
        say("skipped (N/A in the file): " + ", ".join(result.skipped))


@reference_app.command("export-inferencex")
@handle_errors
def reference_export_inferencex(
    path: PathArg,
    out: Annotated[Path, typer.Option("--out", help="Folder to write the golden AL files into.")],
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace files already there.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Write a table as InferenceX golden AL files, one per (model, method, drafter variant)."""
    from alflow.reference.inferencex_export import export_golden
    from alflow.results.provenance import code_version

    check_writable_dir(out, what="--out")  # not under a file, /proc or a read-only mount: before any read
    table = ref.load_reference(path)
    written = export_golden(
        table, out, code_version=code_version(), table_name=str(path), overwrite=overwrite
    )
    if as_json:
        emit_json({"table": str(path), "files": [str(p) for p in written]})
        return
    for p in written:
        say(f"wrote {p}")


@reference_app.command("m0-config")
@handle_errors
def reference_m0_config(
    models: Annotated[str, typer.Option("--models", help="Comma-separated model ids from the catalogue.")],
    out: Annotated[Path, typer.Option("--out", help="Where to write the M0 config (YAML).")],
    catalogue: Annotated[Path, typer.Option("--catalogue", help="Model catalogue.")] = Path(
        "references/models.yaml"
    ),
    ks: Annotated[str, typer.Option("--ks", help="Comma-separated K values.")] = "1,2,3,4,5,6,7",
    thinking: Annotated[str, typer.Option("--thinking", help="Comma-separated thinking modes.")] = "on,off",
    framework: Annotated[str, typer.Option("--framework", help="vllm (references) or sim (tests).")] = "vllm",
    image: Annotated[str | None, typer.Option("--image", help="Framework image with tag.")] = None,
    prompts: Annotated[
        str | None,
        typer.Option("--prompts", help="Prepared SPEED-Bench JSONL (default: bundled demo prompts)."),
    ] = None,
    reference: Annotated[
        str, typer.Option("--reference", help="Reference table to write.")
    ] = "references/speed-bench-coding.yaml",
    results_root: Annotated[str, typer.Option("--results-root", help="Run store root.")] = "results",
    runner: Annotated[str, typer.Option("--runner", help="process or docker.")] = "docker",
    extra_arg: Annotated[
        list[str] | None, typer.Option("--extra-arg", help="Extra server argument (repeat).")
    ] = None,
) -> None:
    """Write the M0 config the reference-AL workflow runs (one per model: ``alflow run m0 --config``)."""
    from alflow.config import CalibrateParams, CalibrationCatalogue

    out = checked_out_file(
        out, "--out"
    )  # a FIFO hung the write; a folder or a path under a file: a traceback
    cat = load_yaml_model(catalogue, CalibrationCatalogue, what="model catalogue")
    ids = [m.strip() for m in models.split(",") if m.strip()]
    if len(ids) != 1:
        raise InvalidInputError(
            f"--models {models!r}: give exactly one model per config (the workflow loops)"
        )
    try:
        item = cat.get(ids[0])
        k_values = tuple(int(k) for k in ks.split(","))
    except ValueError as exc:
        raise InvalidInputError(f"{exc}") from None
    try:
        params = CalibrateParams.model_validate(
            {
                "models": [item.model.model_dump(mode="json")],
                "method": item.method.value,
                "draft_model": item.draft_model,
                "ks": k_values,
                "thinking": [t.strip() for t in thinking.split(",") if t.strip()],
                "server": {
                    "framework": framework,
                    "model": item.model.id,
                    "revision": item.model.revision,
                    "image": image,
                    "parallelism": item.parallelism.model_dump(),
                    "extra_args": list(extra_arg or ()),
                },
                "placement": {"runner": {"kind": runner}, "results_root": results_root},
                "workload": {"kind": "speed-bench", "path": prompts, "category": "coding"},
                "load": {"concurrency": 1},
                "reference_path": reference,
            }
        )
    except ValidationError as exc:  # an option the config refuses: one line, exit 2, never its value
        raise InvalidInputError(describe_validation(exc)) from None
    write_out_file(out, yaml.safe_dump(params.model_dump(mode="json"), sort_keys=False).encode(), "--out")
    say(f"wrote {out}")
