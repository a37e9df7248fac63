"""The library's shape: its modules import one another without a loop (a module imports only modules to its left in
the data flow), counting the imports a function makes when it runs and those of a registry (``wavealign.registry``),
which imports every module of its package on first lookup. The imports are read by ``docs/structure/import_reader.py``,
the reader the layout's counts come from; those of a ``__main__`` block are left out (a module run as a program is not
imported as a library)."""

from __future__ import annotations

from pathlib import Path

from checkout_imports import import_reader

import wavealign

PACKAGE = Path(wavealign.__file__).resolve().parent


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
    known = import_reader.modules(PACKAGE.parent, [PACKAGE.name])
    entries = {name: _registry_entries(name, known) for name in known}
    graph = {name: targets | {f"{target}:lookup" for target in targets
                              if entries[target] and name not in entries[target]}
             for name, targets in import_reader.graph(known, main_blocks=False).items()}
    graph.update({f"{name}:lookup": found for name, found in entries.items() if found})
    return graph


def test_the_library_s_import_graph_has_no_cycles():
    graph = import_graph()
    assert "wavealign.launch_order" in graph["wavealign.kernels.fa4"]  # the graph is read, not empty
    assert "wavealign.reorderers.wavealign" in graph["wavealign.reorderers:lookup"]  # a lookup imports the entries
    assert import_reader.cycles(graph) == []


def test_a_loop_of_two_modules_is_found():
    assert import_reader.cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]


def test_the_reader_resolves_relative_imports_and_leaves_main_blocks_out_if_asked(tmp_path):
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "__init__.py").write_text("")
    (tmp_path / "p" / "a.py").write_text("def f():\n    from . import b\nif __name__ == '__main__':\n    import p.c\n")
    (tmp_path / "p" / "b.py").write_text("from p.a import f\n")  # f is no module: the arrow lands on p.a
    (tmp_path / "p" / "c.py").write_text("")
    known = import_reader.modules(tmp_path, ["p"])
    assert import_reader.graph(known) == {"p": set(), "p.a": {"p.b", "p.c"}, "p.b": {"p.a"}, "p.c": set()}
    assert import_reader.graph(known, main_blocks=False)["p.a"] == {"p.b"}
