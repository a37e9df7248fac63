"""The library's shape: its modules import one another without a loop (a module imports only modules to its left in
the data flow), counting the imports a function makes when it runs and those of a registry (``wavealign.registry``),
which imports every module of its package on first lookup."""

from __future__ import annotations

import ast
from pathlib import Path

import wavealign

PACKAGE = Path(wavealign.__file__).resolve().parent


def _module_names() -> dict[str, Path]:
    """Every module of the library, by dotted name (a package by its ``__init__``)."""
    names = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def _is_main_block(node: ast.AST) -> bool:
    """``if __name__ == "__main__":``: the module run as a program (``python -m``), not imported as a library."""
    return (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
            and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__")


def _nodes(tree: ast.AST):
    """Every node of ``tree`` outside its ``__main__`` blocks."""
    for child in ast.iter_child_nodes(tree):
        if not _is_main_block(child):
            yield child
            yield from _nodes(child)


def _imports(path: Path, known: dict[str, Path]) -> set[str]:
    """The library modules ``path`` imports, anywhere in it but a ``__main__`` block (a name imported from a package
    that is a module of its own counts as that module)."""
    found = set()
    for node in _nodes(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found |= {f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in known else node.module
                      for alias in node.names}
    return {name for name in found if name in known}


def _registry_entries(package: str, known: dict[str, Path]) -> set[str]:
    """The modules a registry package imports on its first lookup (its public direct submodules), if it is one."""
    if known[package].name != "__init__.py" or "Registry(" not in known[package].read_text():
        return set()
    return {name for name in known
            if name.rpartition(".")[0] == package and not name.rpartition(".")[2].startswith("_")}


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules it imports. A registry package is two nodes: ``P`` (its definitions, which its entries
    import to register) and ``P:lookup`` (its first lookup, which imports every entry); a module outside it that
    imports ``P`` reaches both."""
    known = _module_names()
    entries = {name: _registry_entries(name, known) for name in known}
    graph = {name: set() for name in known}
    graph.update({f"{name}:lookup": found for name, found in entries.items() if found})
    for name, path in known.items():
        for target in _imports(path, known) - {name}:
            graph[name].add(target)
            if entries[target] and name not in entries[target]:
                graph[name].add(f"{target}:lookup")
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
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

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_library_s_import_graph_has_no_cycles():
    graph = import_graph()
    assert "wavealign.launch_order" in graph["wavealign.kernels.fa4"]  # the graph is read, not empty
    assert "wavealign.reorderers.wavealign" in graph["wavealign.reorderers:lookup"]  # a lookup imports the entries
    assert cycles(graph) == []


def test_a_loop_of_two_modules_is_found():
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
