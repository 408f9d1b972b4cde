"""The ``alflow`` console script: check that the project's layers are alflow's own, then run the command line.

alflow's layers above the core (``infra``, ``tasks``, ``flows``, ``deployments``) are top-level folders of the
project (the house layout) and so top-level packages where it is installed. Another distribution that installs a
top-level package of one of those names would shadow alflow's (in an editable install) or overwrite its files (in a
wheel install) with no word from pip. Before anything imports them, :func:`layer_problem` finds both cases: the
package that would be imported is not the folder beside ``alflow``, or another installed distribution claims the
name. The command then stops with one line naming the package, where it is and who else installs it (exit 2).
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Mapping, Sequence
from importlib.metadata import packages_distributions
from pathlib import Path

LAYERS = ("infra", "tasks", "flows", "deployments")
"""The project's packages above ``alflow`` (``tests/unit/test_architecture.py`` checks they are all the layers)."""
DISTRIBUTION = "alflow"


def layer_problem(
    home: Path | None = None,
    claims: Callable[[], Mapping[str, Sequence[str]]] = packages_distributions,
) -> str | None:
    """Why a layer package would not be alflow's own (None: each is). ``home`` holds ``alflow/`` and the layers."""
    root = home or Path(__file__).resolve().parents[2]
    for name in LAYERS:
        spec = importlib.util.find_spec(name)
        found = (
            [Path(p).resolve() for p in (spec.submodule_search_locations or [])] if spec is not None else []
        )
        if (root / name).resolve() not in found:
            where = ", ".join(map(str, found)) or (spec.origin if spec is not None else None) or "nowhere"
            return (
                f"package {name!r} would be imported from {where}, not from alflow's {root / name}: another package "
                f"of that name comes first on the import path; install alflow in a virtual environment of its own"
            )
    by_name = claims()
    for name in LAYERS:
        others = sorted({d for d in by_name.get(name, ()) if d.lower() != DISTRIBUTION})
        if others:
            return (
                f"package {name!r} is installed by {', '.join(others)} as well as by alflow (one overwrites the "
                f"other's files): install alflow in a virtual environment of its own"
            )
    return None


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``alflow`` console script."""
    problem = layer_problem()
    if problem is not None:
        sys.stderr.write(f"error: {problem}\n")
        sys.exit(2)
    from alflow.cli.root import main as run

    run(argv)
