"""``alflow results``: browse a results root.

- ``alflow results serve [ROOT] [--host 127.0.0.1] [--port 8765] [--token-env NAME] [--refresh-s 2]
  [--no-cache]``: the results site (:mod:`alflow.site`), read-only, until Ctrl-C or SIGTERM. A host that is not
  loopback needs ``--token-env NAME``, an environment variable holding the access token (refused before
  binding otherwise: one line, exit 2). The catalogue keeps its entries in ``~/.cache/alflow/catalog`` (never
  in the root) unless ``--no-cache``.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from alflow.cli.common import (
    NOT_NEGATIVE,
    Bound,
    check_options,
    handle_errors,
    register_bounds,
    say_err,
)
from alflow.results.catalog_cache import default_cache_dir

results_app = typer.Typer(help="Browse a results root: the results site.", no_args_is_help=True)
_BOUNDS = register_bounds("serve", {"--port": Bound(0, high=65535), "--refresh-s": NOT_NEGATIVE})


def register(app: typer.Typer) -> None:
    """Add the ``results`` group to the root command."""
    app.add_typer(results_app, name="results")


def _announce(line: str) -> None:
    say_err(f"alflow results: {line}")  # the root's name as visible escapes (round 18, F5)
    sys.stderr.flush()


@results_app.command("serve")
@handle_errors
def serve_cmd(
    root: Annotated[str, typer.Argument(help="Results root: a folder or an fsspec URL.")] = "results",
    host: Annotated[
        str, typer.Option(help="Address to listen on (not loopback: --token-env is required).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port (0: one the OS picks).")] = 8765,
    token_env: Annotated[
        str | None, typer.Option(help="Environment variable holding the token every request must carry.")
    ] = None,
    refresh_s: Annotated[float, typer.Option(help="Seconds between catalogue refreshes (0: never).")] = 2.0,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Keep no catalogue cache on disk.")] = False,
) -> None:
    """Serve the results site over ROOT, read-only, until Ctrl-C or SIGTERM."""
    from alflow.site.server import serve

    check_options({"--port": port, "--refresh-s": refresh_s}, _BOUNDS)
    serve(
        root,
        host=host,
        port=port,
        token_env=token_env,
        refresh_s=refresh_s,
        cache_dir=None if no_cache else default_cache_dir(),
        announce=_announce,
    )
