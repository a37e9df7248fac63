"""The checkout's import reader (``docs/structure/import_reader.py``, which lives in no package) loaded by its file,
for the tests of the library's shape (no import cycle) and of its import contract (no sweep package imported)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_SPEC = importlib.util.spec_from_file_location(
    "import_reader", Path(__file__).resolve().parents[1] / "docs" / "structure" / "import_reader.py")
import_reader = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(import_reader)
