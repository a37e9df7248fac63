"""Run a test's Triton kernels under Triton's interpreter, on the CPU, in a child process.

The interpreter must be switched on before Triton compiles anything, and other tests of the same run may have used
Triton already, so the kernels run in one child Python with ``TRITON_INTERPRET=1`` that prints its results."""

import os
import subprocess
import sys
from pathlib import Path


def run_interpreted(code: str, timeout: int = 600) -> str:
    """``code`` run by a child Python with the interpreter on and this checkout importable; its standard output.
    A child that fails fails the calling test with the end of its stderr."""
    env = {**os.environ, "TRITON_INTERPRET": "1",
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout
