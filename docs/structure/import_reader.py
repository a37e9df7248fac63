"""A checkout's import graph read from its source, and the circles in it: the one reader and cycle finder behind
``import_graph.py`` (the counts ``docs/layout.md`` gives), ``tests/test_package_layout.py`` (the library has no
import cycle) and ``tests/test_import_contract.py`` (the library imports no sweep package), so they cannot come to
read imports differently.

Each module is named by its path (``orchestrator/config.py`` is ``orchestrator.config``, a package by its
``__init__``); each import statement (at any depth, relative ones resolved) is an arrow to the module whose path its
name gives: the longest prefix of it that is a module (``from a.b import c`` lands on ``a.b.c`` where that is a
module, else on ``a.b``; an import of ``wavealign.orchestrator.config`` where no ``wavealign/orchestrator/`` exists
lands on ``wavealign/__init__.py``). Imports made through ``importlib`` are not read.

It lives here, beside the script, and in no package: it is a tool for the checkout, not part of the library (inside
``wavealign/`` or ``lab/`` it would be one more module of the graph it counts, and in ``wavealign/`` ship in the
wheel); here the script imports it as a sibling with no path set up, where in ``tests/`` a docs script would reach
into the tests. The tests load it by its file (``tests/checkout_imports.py``), as ``tests/test_results_scripts.py``
loads the results' scripts."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path


def modules(root: Path, folders: Iterable[str]) -> dict[str, Path]:
    """Dotted name -> file, for every ``.py`` under ``root``'s ``folders`` (a package by its ``__init__``)."""
    found = {}
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _is_main_block(node: ast.AST) -> bool:
    """``if __name__ == "__main__":``: the module run as a program (``python -m``), not imported as a library."""
    return (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
            and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__")


def _nodes(tree: ast.AST, main_blocks: bool) -> Iterator[ast.AST]:
    """Every node under ``tree``, those of its ``__main__`` blocks only if ``main_blocks``."""
    for child in ast.iter_child_nodes(tree):
        if main_blocks or not _is_main_block(child):
            yield child
            yield from _nodes(child, main_blocks)


def imports(source: str, package: str, *, main_blocks: bool = True,
            filename: str = "<source>") -> list[tuple[int, str]]:
    """Each name ``source`` imports, with its line: ``a.b`` for ``import a.b``, ``a.b.c`` for ``from a.b import c``,
    relative ones resolved against ``package`` (the package the module of ``source`` is in, or is); those of its
    ``__main__`` blocks only if ``main_blocks``."""
    found = []
    for node in _nodes(ast.parse(source, filename=filename), main_blocks):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([base] if base else [])])
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def imported(path: Path, name: str, *, main_blocks: bool = True) -> list[str]:
    """The names ``path`` (module ``name``) imports (``imports``)."""
    package = name if path.stem == "__init__" else name.rpartition(".")[0]
    return [target for _, target in imports(path.read_text(), package, main_blocks=main_blocks,
                                            filename=str(path))]


def resolve(name: str, known: dict[str, Path]) -> str | None:
    """The longest prefix of ``name`` that is one of the ``known`` modules."""
    parts = name.split(".")
    return next((".".join(parts[:i]) for i in range(len(parts), 0, -1) if ".".join(parts[:i]) in known), None)


def graph(known: dict[str, Path], *, main_blocks: bool = True) -> dict[str, set[str]]:
    """Each of the ``known`` modules -> the other known modules it imports (through its ``__main__`` blocks too, if
    ``main_blocks``)."""
    arrows = {}
    for name, path in known.items():
        targets = {resolve(target, known) for target in imported(path, name, main_blocks=main_blocks)}
        arrows[name] = targets - {None, name}
    return arrows


def _reachable(arrows: dict[str, set[str]], start: str) -> set[str]:
    """The nodes one arrow or more away from ``start`` (``start`` itself only if it is on a loop)."""
    seen: set[str] = set()
    todo = list(arrows[start])
    while todo:
        if (node := todo.pop()) not in seen:
            seen.add(node)
            todo += arrows[node]
    return seen


def cycles(arrows: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one node of ``arrows`` (node -> the nodes it points to, every one of
    them a node too), each sorted, in order. A node's group is the nodes it reaches that reach it back: a search from
    every node, with no recursion depth to outgrow, and quick at a checkout's few hundred modules."""
    reach = {node: _reachable(arrows, node) for node in arrows}
    groups = {frozenset({node} | {other for other in reach[node] if node in reach[other]}) for node in arrows}
    return sorted(sorted(group) for group in groups if len(group) > 1)
