"""The ``alflow`` command line: one module per command group, the shared helpers in :mod:`alflow.cli.common`.

- :mod:`alflow.cli.main`: the root command and the console script's entry point (:func:`main`);
- :mod:`~alflow.cli.bench` (``bench``, ``metrics snapshot``), :mod:`~alflow.cli.run` (``run``),
  :mod:`~alflow.cli.demo`, :mod:`~alflow.cli.report`, :mod:`~alflow.cli.reference`,
  :mod:`~alflow.cli.synthetic`, :mod:`~alflow.cli.evals` (``eval``), :mod:`~alflow.cli.models`;
- the engines' own ``sim`` and ``tiny`` groups live with their servers (``python -m alflow.sim`` starts a
  server without loading the rest of the command line), ``infra`` with the runners.

Commands parse and print; the work is a core function (for example :func:`alflow.bench.bench`).
"""

from alflow.cli.main import app, main

__all__ = ["app", "main"]
