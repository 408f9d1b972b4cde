"""The house rules, checked on the source: no import cycles, the core without Prefect, files that fit in a head.

Imports are read with :mod:`ast` from every module of ``alflow/`` (function-level imports included:
a lazy import still ties two modules together; ``if TYPE_CHECKING:`` blocks excluded).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 700

# The only modules of the core that may start Prefect flows (lazily, when the command runs).
PREFECT_ALLOWED = {"alflow.cli.run", "alflow.cli.demo", "alflow.cli.main"}


def _modules() -> dict[str, Path]:
    mods: dict[str, Path] = {}
    # a compiled extension is a module too: its stub (``_rxread.pyi`` beside ``_rxread.c``) stands for it
    stubs = [p for p in (ROOT / "alflow").rglob("*.pyi") if not p.with_suffix(".py").exists()]
    for path in sorted([*(ROOT / "alflow").rglob("*.py"), *stubs]):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for n in ast.walk(node))
    return skip


def _imported_names(module: str, path: Path) -> Iterator[str]:
    """Every absolute name ``module`` imports: ``import a.b`` yields ``a.b``, ``from a.b import c`` yields ``a.b.c``.

    ``a.b.c`` is a module or a name in ``a.b``; :func:`_graph` resolves it to the longest module prefix.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _type_checking_nodes(tree)
    is_package = path.name == "__init__.py"
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join([*package, *([base] if base else [])])
            yield from (f"{base}.{alias.name}" for alias in node.names)


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for module, path in mods.items():
        for imported in _imported_names(module, path):
            name = imported
            while name and name not in mods:
                name = name.rpartition(".")[0]
            if name and name != module:
                graph[module].add(name)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root, children_of_root in graph.items():
        if root in index:
            continue
        work = [(root, iter(sorted(children_of_root)))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _package(module: str) -> str:
    return ".".join(module.split(".")[:2])


def test_the_cycle_finder_finds_a_cycle_and_only_real_ones() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set(), "c": {"b"}}) == []


def test_the_import_reader_resolves_relative_and_from_imports(tmp_path: Path) -> None:
    path = tmp_path / "mod.py"
    path.write_text("from . import x\nfrom ..y import z\nimport a.b\nif TYPE_CHECKING:\n    import hidden\n")
    names = set(_imported_names("alflow.pkg.mod", path))
    assert names == {"alflow.pkg.x", "alflow.y.z", "a.b"}
    assert "hidden" not in names


def test_no_import_cycle_between_the_modules_of_alflow() -> None:
    assert _cycles(_graph()) == []


def test_no_import_cycle_between_the_packages_of_alflow() -> None:
    packages: dict[str, set[str]] = {}
    for module, targets in _graph().items():
        src = _package(module)
        packages.setdefault(src, set()).update(_package(t) for t in targets if _package(t) != src)
    for targets in list(packages.values()):
        for t in targets:
            packages.setdefault(t, set())
    assert _cycles(packages) == []


def test_the_core_imports_prefect_only_where_the_command_line_starts_a_flow() -> None:
    offenders = sorted(
        f"{module} imports {name}"
        for module, path in _modules().items()
        if module not in PREFECT_ALLOWED
        for name in _imported_names(module, path)
        if name.split(".")[0] in ("prefect", "flows", "tasks")
    )
    assert offenders == []


def _python_files() -> Iterator[Path]:
    for top in ("alflow", "infra", "tasks", "flows"):
        yield from sorted((ROOT / top).rglob("*.py"))


def test_no_source_file_over_700_lines() -> None:
    lengths = {
        str(p.relative_to(ROOT)): len(p.read_text(encoding="utf-8").splitlines()) for p in _python_files()
    }
    assert len(lengths) > 100  # the walk found the tree
    too_long = {name: n for name, n in lengths.items() if n > MAX_LINES}
    assert too_long == {}, f"files over {MAX_LINES} lines: split them"
