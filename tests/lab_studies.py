"""The lab's studies (``lab/<name>.py``, run as scripts, not shipped in the wheel) for their tests: ``study(name)``
is the script as a module, ``run(name, argv)`` runs it as ``python lab/<name>.py ARGV`` does (a bad input one stderr
line, exit 2)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

LAB = Path(__file__).resolve().parent.parent / "lab"


def study(name: str) -> ModuleType:
    """``lab/<name>.py`` as the module ``<name>``, ``lab/`` on the path as running the script puts it there (so a
    study's worker processes import it by that name too)."""
    if str(LAB) not in sys.path:
        sys.path.insert(0, str(LAB))
    return importlib.import_module(name)


def run(name: str, argv: list[str]) -> int:
    """The exit status of ``python lab/<name>.py ARGV``, run in this process."""
    return study("common").run_study(name, study(name).main, argv)


def refusal(name: str, argv: list[str], capsys) -> str:
    """``python lab/<name>.py ARGV`` refuses with exit 2 and one stderr line naming the script (no traceback); that
    line."""
    assert run(name, argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"lab/{name}.py: "), err
    return err
