"""Analysis of sweep results: load the Parquet dataset, draw the paper's figures and tables, fit skip profiles.

    import analysis
    df = analysis.load("wavealign-runs")            # or an MLflow experiment name
    fig = analysis.kernel_latency(df)                 # one function per figure, each returns a Figure
    analysis.write_report(df, "wavealign-runs/report")

The package depends on the library and ``orchestrator``, never the other way round. Its names are imported
when first read (PEP 562), so that a job reading the light ``analysis.paper`` does not load pandas and matplotlib.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

# each public name and the module that defines it
_HOMES = {
    "FIGURES": "figures", "ablation": "figures", "adaptive_skip": "figures", "cache_behaviour": "figures",
    "kernel_latency": "figures", "mask_pictures": "figures", "roofline": "figures", "speedup_vs_bound": "figures",
    "load": "load", "write_report": "report",
    "TABLES": "tables", "ncu_characterisation": "tables", "table2": "tables",
}
__all__ = sorted(_HOMES)


class _Package(types.ModuleType):
    """This package, whose ``load`` stays the function: importing the submodule ``load`` would set the package's
    attribute of that name to the module (the import system's ``setattr(parent, child, module)``); a public name's
    submodule is reached through ``sys.modules`` instead, as ``from analysis.load import ...`` does."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _HOMES and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
    globals()[name] = value
    return value
