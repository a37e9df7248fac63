"""The checkout's import graph as a reader or a tool that maps import names to paths sees it: each module is named by
its path (``orchestrator/config.py`` is ``orchestrator.config``), each import statement (at any depth, relative ones
resolved) is an arrow to the module whose path its name gives (the longest prefix of it that is a file: an import of
``wavealign.orchestrator.config`` where no ``wavealign/orchestrator/`` exists lands on ``wavealign/__init__.py``).
Prints the modules, the arrows within and between the top-level folders, and the circles (groups of modules that
import one another in a loop; imports made through ``importlib`` are not read).

    python docs/structure/import_graph.py [ROOT]   # ROOT: a checkout, default this one
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from pathlib import Path

FOLDERS = ("wavealign", "orchestrator", "jobs", "analysis", "lab")


def modules(root: Path) -> dict[str, Path]:
    """Dotted name -> file, for every ``.py`` under ``FOLDERS`` (a package by its ``__init__``)."""
    found = {}
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported(path: Path, name: str) -> list[str]:
    """The names ``path`` (module ``name``) imports: ``a.b`` for ``import a.b``, ``a.b.c`` for ``from a.b import c``."""
    package = name if path.stem == "__init__" else name.rpartition(".")[0]
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([base] if base else [])])
            names += [f"{base}.{a.name}" for a in node.names]
    return names


def resolve(name: str, known: dict[str, Path]) -> str | None:
    """The longest prefix of ``name`` that is a module of the checkout."""
    parts = name.split(".")
    return next((".".join(parts[:i]) for i in range(len(parts), 0, -1) if ".".join(parts[:i]) in known), None)


def graph(root: Path) -> set[tuple[str, str]]:
    """The arrows, module -> module."""
    known = modules(root)
    arrows = set()
    for name, path in known.items():
        for target in imported(path, name):
            if (found := resolve(target, known)) not in (None, name):
                arrows.add((name, found))
    return arrows


def circles(arrows: set[tuple[str, str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    edges: dict[str, list[str]] = {}
    for a, b in arrows:
        edges.setdefault(a, []).append(b)
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, []):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    sys.setrecursionlimit(10_000)
    for v in list(edges):
        if v not in index:
            visit(v)
    return out


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[2])
    known = modules(root)
    arrows = graph(root)
    by_folder = Counter((a.split(".")[0], b.split(".")[0]) for a, b in arrows)
    print(f"{len(known)} modules, {len(arrows)} arrows")
    for (a, b), n in sorted(by_folder.items()):
        print(f"  {a} -> {b}: {n}")
    loops = circles(arrows)
    print(f"{len(loops)} circles" + "".join(f"\n  {' '.join(c)}" for c in loops))


if __name__ == "__main__":
    main()
