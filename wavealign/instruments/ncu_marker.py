"""A one-thread kernel that opens each cell's profiled range when one program profiles several cells.

Nsight Compute's raw CSV does not say which profiler range a launch came from, and a cell's attention may be
several launches (FlashInfer's sequential heads): the marker's launch is where one cell's records end and the
next cell's begin (``ncu.split_at_markers``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def wavealign_ncu_cell_marker(ptr):
    tl.store(ptr, 1)


def buffer(device: torch.device | str = "cuda") -> torch.Tensor:
    """The marker's one-word target; allocate it before the profiled range, so no fill kernel lands inside."""
    return torch.zeros(1, dtype=torch.int32, device=device)


def launch(target: torch.Tensor) -> None:
    """Launch the marker kernel once, writing to ``target`` (from ``buffer``)."""
    wavealign_ncu_cell_marker[(1,)](target)
