"""``alflow tiny serve``: the command line of the tiny CPU engine's server (a typer sub-app).

:func:`register` adds the ``tiny`` group to the root ``alflow`` app; ``python -m alflow.tiny serve``
runs the same command on its own (that is what the ``tiny`` recipe launches). The engine needs the
optional extra ``alflow[tiny]``; without it the command exits with an error naming the extra.
"""

from __future__ import annotations

import logging
import sys
from functools import partial
from pathlib import Path
from typing import Annotated

import typer

from alflow.errors import AlflowError
from alflow.serving.app import run_until_signalled, serve_group
from alflow.sim.config import parse_rates
from alflow.tiny.server import LISTENING_PREFIX, TinyService, TinyServiceSettings, serve
from alflow.tiny.settings import TinySpec, resolve_spec
from alflow.util.fsutil import file_problem
from alflow.util.names import check_host, shown

log = logging.getLogger("alflow.tiny")


def load_server(
    spec: TinySpec,
    *,
    model: Path | None,
    served_model_name: str | None,
    n_ctx: int,
    threads: int | None,
    seed: int,
    host: str,
    port: int,
) -> TinyService:
    """Load the engine (the ``alflow[tiny]`` extra) and wrap it in a server."""
    from alflow.tiny.engine import SpecSettings, TinyEngine  # the optional extra, imported on use

    engine = TinyEngine.load(None if model is None else str(model), n_ctx=n_ctx, n_threads=threads, seed=seed)
    settings = None
    if spec.k > 0:
        settings = SpecSettings(
            k=spec.k, ngram_min=spec.ngram_min, ngram_max=spec.ngram_max, synthetic_rates=spec.synthetic_rates
        )
    vocab = getattr(engine, "vocab_size", None)
    return TinyService(
        engine,
        TinyServiceSettings(
            served_model_name=served_model_name or engine.model_name,
            n_ctx=n_ctx,
            vocab_size=vocab if isinstance(vocab, int) else None,
            spec=settings,
            synthetic=spec.synthetic,
            speculative_config=spec.speculative_config(),
            host=host,
            port=port,
            engine_info={
                "threads": threads,
                "seed": seed,
                "model_path": None if model is None else str(model),
            },
        ),
    )


def serve_command(
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to bind; 0 picks a free one and prints it.")] = 8000,
    model: Annotated[
        Path | None, typer.Option(help="GGUF model file (default: the bundled Gemma 3 270M base model).")
    ] = None,
    served_model_name: Annotated[
        str | None, typer.Option(help="Model name in the API (default: the engine's model name).")
    ] = None,
    k: Annotated[
        int | None, typer.Option("--k", help="Draft tokens per step, K (0: no speculation; default 3).")
    ] = None,
    ngram_min: Annotated[
        int | None, typer.Option(help="Smallest n-gram looked up for drafts (default 1).")
    ] = None,
    ngram_max: Annotated[
        int | None, typer.Option(help="Largest n-gram looked up for drafts (default 4).")
    ] = None,
    synthetic_al: Annotated[
        float | None, typer.Option(help="Synthetic acceptance: target AL (vLLM's min-variance rates).")
    ] = None,
    synthetic_rates_text: Annotated[
        str | None,
        typer.Option("--synthetic-rates", help="Synthetic acceptance: unconditional rates p_1..p_K."),
    ] = None,
    speculative_config: Annotated[
        str | None,
        typer.Option(help="vLLM's --speculative-config JSON (method ngram; the recipe passes this)."),
    ] = None,
    n_ctx: Annotated[int, typer.Option(help="Context size in tokens (prompt + output + K).")] = 2048,
    threads: Annotated[
        int | None, typer.Option(help="CPU threads of the engine (default: the library's).")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the engine (requests without a seed).")] = 0,
    log_level: Annotated[str, typer.Option(help="Logging level on stderr.")] = "INFO",
) -> None:
    """Serve a small real language model on CPU with real n-gram speculative decoding (vLLM-style metrics)."""
    logging.basicConfig(
        level=log_level.upper(), stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s"
    )
    try:
        spec = resolve_spec(
            k=k,
            ngram_min=ngram_min,
            ngram_max=ngram_max,
            synthetic_al=synthetic_al,
            synthetic_rates=None if synthetic_rates_text is None else parse_rates(synthetic_rates_text),
            speculative_config=speculative_config,
        )
        _check_serve_options(host, n_ctx, threads, model)
    except AlflowError as exc:
        sys.stderr.write(f"error: {exc}\n")
        raise typer.Exit(2) from None
    try:
        server = load_server(
            spec,
            model=model,
            served_model_name=served_model_name,
            n_ctx=n_ctx,
            threads=threads,
            seed=seed,
            host=host,
            port=port,
        )
        run_server(server)
    except ImportError as exc:
        sys.stderr.write(
            f"error: the tiny engine needs the optional extra: pip install 'alflow[tiny]' ({exc})\n"
        )
        raise typer.Exit(1) from None
    except AlflowError as exc:
        sys.stderr.write(f"error: {exc}\n")
        raise typer.Exit(1) from None


def _check_serve_options(host: str, n_ctx: int, threads: int | None, model: Path | None) -> None:
    """The serving options checked before the engine loads (one line each)."""
    try:
        check_host(host, what="--host")  # '' bound every interface; 'a..b' or ESC: a traceback at the bind
    except ValueError as exc:
        raise AlflowError(str(exc)) from None
    if n_ctx < 64:
        raise AlflowError(f"--n-ctx {n_ctx} is too small (at least 64)")
    if threads is not None and threads < 1:
        raise AlflowError(f"--threads {threads} must be at least 1")
    why = None if model is None else file_problem(model.expanduser())  # a name too long, a missing file
    if why is not None:
        raise AlflowError(f"--model {shown(str(model))} {why} (a GGUF model file was expected)")


def run_server(server: TinyService) -> None:
    """Serve until SIGTERM or SIGINT; print the listening line on stdout once bound."""
    run_until_signalled(partial(serve, server), LISTENING_PREFIX)


def register(app: typer.Typer) -> None:
    """Add the ``tiny`` group (with ``serve``) to the root ``alflow`` app."""
    help_text = "A small real language model on CPU with n-gram speculative decoding."
    app.add_typer(serve_group(serve_command, help_text), name="tiny")


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``python -m alflow.tiny`` (the ``tiny`` group on its own)."""
    serve_group(serve_command, "The tiny CPU engine.", standalone=True)(
        args=argv, prog_name="python -m alflow.tiny"
    )
