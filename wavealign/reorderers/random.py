"""``random``: every head's rows in a seeded random order, the control a mask-dependent order must beat.

A permutation drawn without looking at the mask keeps the rows' work but scatters which K/V blocks a wave shares:
what any order gains over it is what the mask's structure gives. Draws come from the CPU generator
(``reorderers.cpu_generator``), so a seed gives the same order on every device. The order depends on the shape and
the seed alone, so it is drawn once per (heads, rows, seed) and kept, as a live model would keep it across steps.
"""

from __future__ import annotations

import functools

import torch

from wavealign import reorderers


@functools.lru_cache(maxsize=16)
def permutations(heads: int, rows: int, seed: int) -> torch.Tensor:
    """(heads, rows) int64 on the CPU: a uniform random permutation of range(rows) per head, from ``seed`` (kept:
    callers copy it)."""
    keys = torch.rand(heads, rows, generator=reorderers.cpu_generator(seed), dtype=torch.float64)
    return torch.argsort(keys, dim=-1, stable=True)


def group(mask: torch.Tensor, *, wave_size: int, seed: int) -> torch.Tensor:
    """A uniform random permutation of each head's rows, one draw per head, reproducible from ``seed``."""
    g, mb, _ = mask.shape
    return permutations(g, mb, seed).to(mask.device, copy=True)


reorderers.register("random", group, {}, "a seeded uniform random permutation of each head's rows (the control)",
                    reference="-", label="Random", color="tab:pink")
