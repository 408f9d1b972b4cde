"""The ``alflow`` command line: one module per command group, the shared helpers in :mod:`alflow.cli.common`.

- :mod:`alflow.cli.entry`: the console script's entry point (:func:`main`): it checks that the project's layers
  are alflow's own, then runs :mod:`alflow.cli.root`, the root command (``app``, loaded when first asked for);
- :mod:`~alflow.cli.bench` (``bench``, ``metrics snapshot``), :mod:`~alflow.cli.run` (``run``),
  :mod:`~alflow.cli.demo`, :mod:`~alflow.cli.report`, :mod:`~alflow.cli.reference`,
  :mod:`~alflow.cli.synthetic`, :mod:`~alflow.cli.evals` (``eval``), :mod:`~alflow.cli.models`;
- the engines' own ``sim`` and ``tiny`` groups live with their servers (``python -m alflow.sim`` starts a
  server without loading the rest of the command line), ``infra`` with the runners.

Commands parse and print; the work is a core function (for example :func:`alflow.bench.bench`).
"""

from typing import TYPE_CHECKING, Any

from alflow.cli.entry import main

if TYPE_CHECKING:
    from alflow.cli.root import app


def __getattr__(name: str) -> Any:
    # the command tree loads when first asked for, so the console script (main) checks the layers first
    if name == "app":
        from alflow.cli.root import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["app", "main"]
