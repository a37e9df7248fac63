"""A script under ``benchmarks/results/`` imported as its own command would be (its folder first on the path, so it
finds its sibling scripts), its ``main`` not run: for the tests of the scripts themselves."""

from __future__ import annotations

import importlib.util
import re
import sys
import types
from pathlib import Path

import pytest

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"


def load(script: str, monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """``script`` (its path under ``RESULTS``) as a module, for the test's duration."""
    path = RESULTS / script
    monkeypatch.syspath_prepend(str(path.parent))
    name = "results_script_" + re.sub(r"\W", "_", script.removesuffix(".py"))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)  # dataclasses look their module up while it runs
    spec.loader.exec_module(module)
    return module
