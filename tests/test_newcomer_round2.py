"""Issue 42, a newcomer's first hour, round 2: each trap between the README and what a command does, driven the way
the newcomer met it (the installed ``wavealign`` script, a fresh folder), one behaviour per test."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _wavealign(*args: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    script = BIN / "wavealign"
    argv = [str(script)] if script.is_file() else [sys.executable, "-m", "wavealign.jobs.cli"]
    return subprocess.run([*argv, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


# --- install and checkout hygiene ---------------------------------------------------------------------------------

def test_a_make_run_with_another_run_root_leaves_nothing_git_would_add():
    default = re.search(r"^RUN_ROOT \?= (\S+)", (ROOT / "Makefile").read_text(), re.MULTILINE).group(1)
    for run_root in (default, f"{default}-2"):
        ignored = subprocess.run(["git", "check-ignore", "-q", f"{run_root}/results/part.parquet"], cwd=ROOT)
        assert ignored.returncode == 0, f"make run RUN_ROOT={run_root} leaves a folder git does not ignore"


def test_building_the_metadata_prints_no_setuptools_deprecation(tmp_path):
    built = subprocess.run(
        [sys.executable, "-W", "always", "-c",
         f"from setuptools import build_meta; build_meta.prepare_metadata_for_build_wheel({str(tmp_path)!r})"],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr[-2000:]
    assert "SetuptoolsDeprecationWarning" not in built.stderr, built.stderr[-2000:]
