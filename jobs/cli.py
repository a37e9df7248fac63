"""The ``wavealign`` console script: ``wavealign <command> [args...]`` runs ``wavealign.jobs.<command>``;
``wavealign --version`` prints the package version and the checkout's git sha.

A command is any module of this package with a ``main(argv) -> int``; dashes in the command name
become underscores. Adding a command is adding one module.
"""

from __future__ import annotations

import ast
import importlib
import os
import sys
from pathlib import Path

_NOT_COMMANDS = {"cli"}


def commands() -> dict[str, str]:
    """Command name -> first line of its module docstring, read without importing the module."""
    found = {}
    for path in sorted(Path(__file__).parent.glob("*.py")):
        if path.stem.startswith("_") or path.stem in _NOT_COMMANDS:
            continue
        tree = ast.parse(path.read_text())
        if any(isinstance(node, ast.FunctionDef) and node.name == "main" for node in tree.body):
            found[path.stem.replace("_", "-")] = (ast.get_docstring(tree) or "").strip().split("\n")[0]
    return found


def version() -> str:
    """``wavealign <version>``, with the checkout's git sha where there is one (a wheel has none)."""
    import wavealign
    from wavealign.environment import git_sha

    sha = git_sha()
    return f"wavealign {wavealign.__version__}" + (f" (git {sha})" if sha else "")


def _usage() -> str:
    lines = ["usage: wavealign <command> [args...]", "       wavealign --version", "", "commands:"]
    lines += [f"  {name:<20} {doc}" for name, doc in sorted(commands().items())]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0
    if argv[0] in ("-V", "--version"):
        print(version())
        return 0
    name = argv[0]
    if name not in commands():
        print(f"wavealign: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    try:
        module = importlib.import_module(f"wavealign.jobs.{name.replace('-', '_')}")
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] == "wavealign":
            raise
        print(f"wavealign {name} needs the sweep tools, which are not installed (no module {exc.name!r}): "
              "pip install 'wavealign[sweep]'", file=sys.stderr)
        return 2
    try:
        return int(module.main(argv[1:]) or 0)
    except ValueError as exc:  # the library's argument checks: their message names the argument and the value
        if os.environ.get("WAVEALIGN_TRACEBACK"):
            raise
        print(f"wavealign {name}: {exc}\n(WAVEALIGN_TRACEBACK=1 shows where it was raised)", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
