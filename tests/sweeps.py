"""A real sweep for a test: a sweep YAML filed in a copy of ``conf/`` and run through the orchestrator on a fresh
embedded Ray."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from rich.console import Console

from orchestrator import config, sweep
from orchestrator.record import SweepOutcome


def run_test_sweep(folder: Path, name: str, text: str, *overrides: str, cpus: int = 2) -> tuple[Path, SweepOutcome]:
    """Sweep ``text`` (a ``conf/sweep`` YAML) as ``sweep=<name>`` with ``overrides``, its run root under ``folder``:
    the run root and the outcome. ``RAY_ADDRESS=local`` starts a fresh embedded Ray even where another cluster runs
    on this machine; it inherits this process's environment (``WAVEALIGN_PROFILE_DIR``, ...)."""
    conf = folder / "conf"
    shutil.copytree(config.CONF_DIR, conf)
    (conf / "sweep" / f"{name}.yaml").write_text(text)
    root = folder / "runs"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_ADDRESS", "local")
        cfg = config.load([f"sweep={name}", f"run_root={root}", "progress=false", f"ray.num_cpus={cpus}",
                           *overrides], conf_dir=conf)
        return root, sweep.run(cfg, Console(quiet=True))
