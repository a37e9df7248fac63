"""The lab scripts under ``benchmarks/results/`` that its README lists as running at HEAD still do, as far as a CPU
can tell without running them: each names only library modules, attributes and call parameters that exist, and one
that keeps its work under ``if __name__ == "__main__":`` imports for real. Every script must be listed (as running or
as a record of a commit), so a new script or a rename that breaks one cannot go unnoticed."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import re
import sys
import tomllib
import types

import pytest
import results_script
from results_script import RESULTS

INDEX = RESULTS / "README.md"
# one row of the index's table: | `folder/script.py` | runs | ... or | `folder/script.py` | record of <sha> | ...
# the project's own packages (the library and the sweep's, each named as its folder), as pyproject.toml lists them
OURS = tuple(sorted({name.split(".")[0] for name in tomllib.loads(
    (RESULTS.parents[1] / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]}))
ROW = re.compile(r"^\| `(?P<script>[^`]+\.py)` \| (?P<status>runs|record of [0-9a-f]{7,40}) \|", re.MULTILINE)


def _index() -> dict[str, str]:
    """Each listed script (relative to ``benchmarks/results``) and its status."""
    rows = ROW.findall(INDEX.read_text())
    assert len(rows) == len(dict(rows)), "a script is listed twice in benchmarks/results/README.md"
    return dict(rows)


def _running() -> list[str]:
    return sorted(script for script, status in _index().items() if status == "runs")


def _has_main_guard(tree: ast.Module) -> bool:
    return any(isinstance(node, ast.If) and ast.unparse(node.test) in ('__name__ == "__main__"',
                                                                       "__name__ == '__main__'")
               for node in tree.body)


def _resolve(module: types.ModuleType, name: str):
    """``module.name``: an attribute, or a submodule not imported yet; None where neither exists."""
    if hasattr(module, name):
        return getattr(module, name)
    try:
        return importlib.import_module(f"{module.__name__}.{name}")
    except ImportError:
        return None


class _LibraryNames(ast.NodeVisitor):
    """What a script takes from the project's packages (``OURS``) that does not exist: modules, names, attributes of
    modules and of classes, and keyword or positional parameters of the functions and classes it calls."""

    def __init__(self) -> None:
        self.bound: dict[str, object] = {}  # a name the script binds by an import -> the library object
        self.missing: list[str] = []

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name.split(".")[0] not in OURS:
                continue
            try:
                module = importlib.import_module(alias.name)
            except ImportError as exc:
                self.missing.append(f"line {node.lineno}: import {alias.name}: {exc}")
                continue
            top = alias.name.split(".")[0]
            self.bound[alias.asname or top] = module if alias.asname else sys.modules[top]

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level or not node.module or node.module.split(".")[0] not in OURS:
            return
        try:
            module = importlib.import_module(node.module)
        except ImportError as exc:
            self.missing.append(f"line {node.lineno}: from {node.module}: {exc}")
            return
        for alias in node.names:
            found = _resolve(module, alias.name)
            if found is None:
                self.missing.append(f"line {node.lineno}: {node.module} has no {alias.name}")
            else:
                self.bound[alias.asname or alias.name] = found

    def lookup(self, expr: ast.expr):
        """The library object ``expr`` (a bound name or an attribute chain on one) stands for, else None."""
        if isinstance(expr, ast.Name):
            return self.bound.get(expr.id)
        if not isinstance(expr, ast.Attribute):
            return None
        owner = self.lookup(expr.value)
        if isinstance(owner, types.ModuleType):
            found = _resolve(owner, expr.attr)
            if found is None:
                self.missing.append(f"line {expr.lineno}: {ast.unparse(expr)} does not exist")
            return found
        if isinstance(owner, type):
            if not hasattr(owner, expr.attr):
                self.missing.append(f"line {expr.lineno}: {ast.unparse(expr)} does not exist")
            return getattr(owner, expr.attr, None)
        return None

    def check_call(self, node: ast.Call) -> None:
        function = self.lookup(node.func)
        try:
            signature = inspect.signature(function) if callable(function) else None
        except (TypeError, ValueError):  # a builtin without a signature
            signature = None
        if signature is None:
            return
        takes_any = any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())
        for keyword in node.keywords:
            if keyword.arg and not takes_any and keyword.arg not in signature.parameters:
                self.missing.append(f"line {node.lineno}: {ast.unparse(node.func)}(...) has no {keyword.arg}")
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            return  # what *args or **kwargs hold is known only when it runs
        try:
            signature.bind(*node.args, **{k.arg: k.value for k in node.keywords})
        except TypeError as exc:
            self.missing.append(f"line {node.lineno}: {ast.unparse(node.func)}(...): {exc}")

    @classmethod
    def of(cls, tree: ast.Module) -> list[str]:
        names = cls()
        names.visit(tree)  # the imports first, wherever they are (a function's own imports too)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                names.check_call(node)
            elif isinstance(node, ast.Attribute):
                names.lookup(node)
        return sorted(set(names.missing))


def test_every_script_under_results_is_listed_as_running_or_as_a_record():
    on_disk = {path.relative_to(RESULTS).as_posix() for path in RESULTS.rglob("*.py")}
    listed = set(_index())
    assert not on_disk - listed, f"add these to benchmarks/results/README.md: {sorted(on_disk - listed)}"
    assert not listed - on_disk, f"listed but not there: {sorted(listed - on_disk)}"


@pytest.mark.parametrize("script", _running())
def test_a_running_script_takes_only_what_the_library_has(script):
    assert _LibraryNames.of(ast.parse((RESULTS / script).read_text())) == []


@pytest.mark.parametrize("script", [s for s in _running() if _has_main_guard(ast.parse((RESULTS / s).read_text()))])
def test_a_running_script_imports(script, monkeypatch):
    """Imported as its own command would be (its folder first on the path), its ``main`` not run."""
    results_script.load(script, monkeypatch)
