"""What ran a cell: GPU, driver, CUDA, torch, triton, host, Python and the code's git sha, captured once per
process (``capture``)."""

from __future__ import annotations

import functools
import os
import platform
import socket
import subprocess
from pathlib import Path

import torch

import wavealign
from wavealign.records import Environment


@functools.lru_cache(maxsize=1)
def capture() -> Environment:
    """This process's ``Environment``."""
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    cuda = torch.cuda.is_available()
    import wavealign

    return Environment(
        gpu_name=torch.cuda.get_device_name() if cuda else None,
        driver_version=_nvidia_driver() if cuda else None,
        cuda_version=torch.version.cuda,
        torch_version=torch.__version__,
        triton_version=triton_version,
        python_version=platform.python_version(),
        host=socket.gethostname(),
        git_sha=git_sha(),
        wavealign_version=wavealign.__version__,
    )


def _run_quiet(args: list[str], cwd: Path | None = None) -> str | None:
    try:
        out = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.stdout.strip() else None


def _nvidia_driver() -> str | None:
    return _run_quiet(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])


def git_sha() -> str | None:
    """The checkout's HEAD (``WAVEALIGN_GIT_SHA`` wins, for copies without ``.git``); None when installed from a
    wheel, whose folder may lie inside some other repository."""
    if os.environ.get("WAVEALIGN_GIT_SHA"):
        return os.environ["WAVEALIGN_GIT_SHA"]
    if wavealign.CHECKOUT is None:
        return None
    return _run_quiet(["git", "rev-parse", "HEAD"], cwd=wavealign.CHECKOUT)
