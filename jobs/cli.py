"""The ``wavealign`` console script: ``wavealign <command> [args...]`` runs ``jobs.<command>``;
``wavealign --version`` prints the package version and the checkout's git sha.

A command is any module of this package with a ``main(argv) -> int``; dashes in the command name
become underscores. Adding a command is adding one module. A module may declare ``EXTRAS``, the extras of
``pyproject.toml`` it needs: they are checked before it is imported, so a missing one stops it before any work.

Every command has one error path, here: bad input (a ``ValueError``, among them ``arguments.UsageError`` and the sweep
config's ``ConfigError``, or one of the module's ``refusals()``) and a missing extra are one line on stderr and
exit 2; ``WAVEALIGN_TRACEBACK=1`` raises them instead, to show where.
"""

from __future__ import annotations

import ast
import difflib
import functools
import importlib
import importlib.metadata
import importlib.util
import os
import re
import sys
import tomllib
from pathlib import Path

_NOT_COMMANDS = {"cli"}
EXIT_BAD_INPUT = 2


@functools.cache
def _modules() -> dict[str, ast.Module]:
    """Command name -> its module's syntax tree (read, not imported: a command's imports may need an extra); read
    once a process."""
    found = {}
    for path in sorted(Path(__file__).parent.glob("*.py")):
        if path.stem.startswith("_") or path.stem in _NOT_COMMANDS:
            continue
        tree = ast.parse(path.read_text())
        if any(isinstance(node, ast.FunctionDef) and node.name == "main" for node in tree.body):
            found[path.stem.replace("_", "-")] = tree
    return found


def summary(doc: str) -> str:
    """A docstring's first sentence, whole: its first paragraph up to the first full stop that ends a sentence (one
    before the end or a capital, so that "e.g. this" goes on)."""
    paragraph = " ".join(doc.strip().split("\n\n")[0].split())
    sentence = re.match(r"(.+?[.!?])(?=\s+[A-Z`]|$)", paragraph)
    return sentence.group(1) if sentence else paragraph


def commands() -> dict[str, str]:
    """Command name -> the first sentence of its module docstring."""
    return {name: summary(ast.get_docstring(tree) or "") for name, tree in _modules().items()}


def declared_extras(name: str) -> tuple[str, ...]:
    """The extras command ``name`` declares it needs (its module's ``EXTRAS``), read without importing it."""
    for node in _modules()[name].body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "EXTRAS" for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    return ()


def extra_requirements(extra: str) -> list[str]:
    """The distributions ``pip install 'wavealign[extra]'`` brings, its nested extras expanded: from the checkout's
    ``pyproject.toml`` when this is a checkout (the installed metadata may be older), else the installed metadata."""
    if (extras := _checkout_extras()) is not None:
        declared = extras.get(extra, [])
    else:
        marker = re.compile(rf"""extra\s*==\s*["']{re.escape(extra)}["']""")
        declared = [r.split(";")[0].strip() for r in importlib.metadata.requires("wavealign") or [] if marker.search(r)]
    names = []
    for requirement in declared:
        name, _, nested = re.match(r"([A-Za-z0-9_.-]+)(\[([^\]]*)\])?", requirement).groups()
        if name == "wavealign":
            names += [n for inner in nested.split(",") for n in extra_requirements(inner.strip())]
        else:
            names.append(name)
    return names


def missing_requirement(extra: str) -> str | None:
    """The first distribution of ``extra`` that is not installed, or whose modules cannot be found, or None. One that
    is not installed but whose module of its own name is (``mlflow`` from ``mlflow-skinny``) counts as there."""
    for name in extra_requirements(extra):
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            try:
                provided = importlib.util.find_spec(_canonical(name).replace("-", "_")) is not None
            except (ImportError, ValueError):
                provided = False
            if not provided:
                return name
            continue
        try:
            if any(importlib.util.find_spec(module) is None for module in _top_level_modules(dist)):
                return name
        except (ImportError, ValueError):  # a finder that refuses the module (tests/test_core_install.py's)
            return name
    return None


def _top_level_modules(dist: importlib.metadata.Distribution) -> set[str]:
    """The importable top-level names a distribution installs (none for a meta-package such as ``mlflow``)."""
    listed = dist.read_text("top_level.txt")
    names = set(listed.split()) if listed else {
        str(f).split("/")[0].removesuffix(".py") for f in dist.files or [] if str(f).endswith(".py")}
    return {n for n in names if n.isidentifier() and not n.startswith("_")}


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def version() -> str:
    """``wavealign <version>``, with the checkout's git sha where there is one (a wheel has none)."""
    import wavealign
    from wavealign.environment import git_sha

    sha = git_sha()
    return f"wavealign {wavealign.__version__}" + (f" (git {sha})" if sha else "")


def _usage() -> str:
    lines = ["usage: wavealign <command> [args...]     (wavealign <command> --help: its arguments)",
             "       wavealign --version", "", "commands:"]
    lines += [f"  {name:<20} {doc}" for name, doc in sorted(commands().items())]
    return "\n".join(lines)


def refuse(name: str, message: object) -> int:
    """Print ``wavealign <name>: <message>`` as one line on stderr (never through markup), a URI's password in it
    redacted; the exit status 2."""
    from orchestrator.redact import redact

    text = redact(" ".join(str(message).split()))
    print(f"wavealign {name}: {text}" if name else f"wavealign: {text}", file=sys.stderr)
    return EXIT_BAD_INPUT


def _needs(extra: str, what: str) -> str:
    return f"needs the [{extra}] extra, which is not installed ({what}): pip install 'wavealign[{extra}]'"


def main(argv: list[str] | None = None) -> int:
    """Run ``wavealign <command>``. Ctrl-C and SIGTERM are handled from the first line on (``orchestrator.stop``),
    so a command stopped while it starts (finding its extras, importing) says so in one line and exits 130 or 143,
    as one stopped later does, instead of dying silently."""
    from orchestrator import stop

    try:  # around the handlers' block: a signal the moment they are installed is caught here too
        with stop.handling():
            return _run(sys.argv[1:] if argv is None else argv)
    except Exception as exc:
        # a library's clean-up that fails on the way out of the stopped phase replaces the stop's KeyboardInterrupt
        # with its own error (Hydra's config reader: UnboundLocalError in a `finally`); the stop is still the cause
        if not _stopped_during(exc):
            raise
    except KeyboardInterrupt:
        pass
    print(f"wavealign {(argv or sys.argv[1:] or [''])[0]}: stopped by {stop.requested or 'SIGINT'}", file=sys.stderr)
    return stop.exit_code() or 130


def _stopped_during(exc: BaseException) -> bool:
    """Whether ``exc`` was raised while a stop signal's ``KeyboardInterrupt`` was being handled (its context)."""
    seen = exc.__context__
    while seen is not None:
        if isinstance(seen, KeyboardInterrupt):
            return True
        seen = seen.__context__
    return False


def _run(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0
    if argv[0] in ("-V", "--version"):
        print(version())
        return 0
    name = argv[0]
    if name not in commands():
        close = difflib.get_close_matches(name, list(commands()), n=1)
        expected = f"did you mean {close[0]}?" if close else f"expected one of {sorted(commands())}"
        return refuse("", f"unknown command {name!r}; {expected} (wavealign --help)")
    for extra in declared_extras(name):
        if (absent := missing_requirement(extra)) is not None:
            return refuse(name, _needs(extra, f"no {absent}"))
    module = None
    try:
        module = importlib.import_module(f"jobs.{name.replace('-', '_')}")
        return int(module.main(argv[1:]) or 0)
    except ModuleNotFoundError as exc:  # a package the command's EXTRAS do not name: say which extra brings it
        if os.environ.get("WAVEALIGN_TRACEBACK") or not exc.name or exc.name.split(".")[0] == "wavealign":
            raise
        return refuse(name, _needs(_extra_of(exc.name) or "all", f"no module {exc.name!r}"))
    except Exception as exc:
        if os.environ.get("WAVEALIGN_TRACEBACK") or not _refused(exc, module):
            raise
        return refuse(name, exc)


def _refused(exc: Exception, module: object) -> bool:
    """Whether a command's failure is a refusal (one line, exit 2): a ``ValueError``, or one of its module's
    ``refusals()``, asked only then (they may import Ray, which a mistyped argument need not wait for)."""
    if isinstance(exc, ValueError):
        return True
    return isinstance(exc, getattr(module, "refusals", tuple)())


def _extra_of(module: str) -> str | None:
    """The extra with the fewest distributions that provides ``module`` (by its top-level name), or None."""
    top = module.split(".")[0]
    dists = {_canonical(d) for d in importlib.metadata.packages_distributions().get(top, [top])}
    brought = {extra: {_canonical(n) for n in extra_requirements(extra)} for extra in extra_names()}
    providing = [(len(names), extra) for extra, names in brought.items() if dists & names]
    return min(providing)[1] if providing else None


def extra_names() -> list[str]:
    """The extras ``pyproject.toml`` declares (a checkout's, else the installed metadata's)."""
    if (extras := _checkout_extras()) is not None:
        return list(extras)
    return importlib.metadata.metadata("wavealign").get_all("Provides-Extra") or []


def _checkout_extras() -> dict[str, list[str]] | None:
    """The checkout's ``pyproject.toml`` extras (the installed metadata may be older), or None outside a checkout."""
    import wavealign

    if wavealign.CHECKOUT is None:
        return None
    return tomllib.loads((wavealign.CHECKOUT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


if __name__ == "__main__":
    sys.exit(main())
