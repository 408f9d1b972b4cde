"""The ``alflow`` command line: one module per command group, the shared helpers in :mod:`alflow.cli.common`.

- :func:`main`, the console script's entry point, runs :mod:`alflow.cli.root`, the root command (``app``, loaded
  when first asked for); the layers above the core are reached through ``alflow_flows.entry`` only;
- :mod:`~alflow.cli.bench` (``bench``, ``metrics snapshot``), :mod:`~alflow.cli.run` (``run``),
  :mod:`~alflow.cli.demo`, :mod:`~alflow.cli.report`, :mod:`~alflow.cli.reference`,
  :mod:`~alflow.cli.synthetic`, :mod:`~alflow.cli.evals` (``eval``), :mod:`~alflow.cli.models`;
- the engines' own ``sim`` and ``tiny`` groups live with their servers (``python -m alflow.sim`` starts a
  server without loading the rest of the command line), ``infra`` with the runners.

Commands parse and print; the work is a core function (for example :func:`alflow.bench.bench`).
"""

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from alflow.cli.root import app


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``alflow`` console script.

    ``--version`` answers before the command tree loads; ``--help`` (anywhere) and no arguments load no third-party
    plugin (:func:`alflow.plugins.skip_entry_points`): a broken one cannot stop them.
    """
    args = sys.argv[1:] if argv is None else argv
    if args == ["--version"]:
        from alflow import __version__

        sys.stdout.write(f"alflow {__version__}\n")
        return
    from alflow import plugins

    if not args or "--help" in args:
        plugins.skip_entry_points()
    plugins.entry_specs()  # imported here, outside any import: each in its time (resolve_within)
    from alflow.cli.root import main as run

    run(argv)


def __getattr__(name: str) -> Any:
    # the command tree loads when first asked for
    if name == "app":
        from alflow.cli.root import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["app", "main"]
