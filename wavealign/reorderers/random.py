"""``random``: every head's rows in a seeded random order, the control a mask-dependent order must beat.

A permutation drawn without looking at the mask keeps the rows' work but scatters which K/V blocks a wave shares:
what any order gains over it is what the mask's structure gives. Draws come from the CPU generator
(``reorderers.cpu_generator``), so a seed gives the same order on every device.
"""

from __future__ import annotations

import torch

from wavealign import reorderers


def group(mask: torch.Tensor, *, wave_size: int, seed: int) -> torch.Tensor:
    """A uniform random permutation of each head's rows, one draw per head, reproducible from ``seed``."""
    g, mb, _ = mask.shape
    keys = torch.rand(g, mb, generator=reorderers.cpu_generator(seed), dtype=torch.float64)
    return torch.argsort(keys, dim=-1, stable=True).to(mask.device)


reorderers.register("random", group, {}, "a seeded uniform random permutation of each head's rows (the control)",
                    reference="-")
