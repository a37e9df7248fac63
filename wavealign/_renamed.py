"""The sweep's packages were ``wavealign.orchestrator``, ``wavealign.jobs`` and ``wavealign.analysis`` until 0.1.x;
they are now named as their folders (``orchestrator``, ``jobs``, ``analysis``). Their old names stay for one release
as deprecated aliases of the new modules: ``from wavealign import analysis`` and ``python -m wavealign.jobs.cli``
still work, with a warning that names the new module. To be removed in 0.2."""

from __future__ import annotations

import importlib
import sys
import warnings


def alias(old: str, new: str) -> None:
    """Make ``old`` (the module being imported) the module ``new``, after a DeprecationWarning naming ``new``."""
    warnings.warn(f"{old} is deprecated: import {new} instead (each sweep package is named as its folder)",
                  DeprecationWarning, stacklevel=3)
    sys.modules[old] = importlib.import_module(new)
