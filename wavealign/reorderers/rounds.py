"""``rounds``: Stage 2 bucketed by a static persistent scheduler's global rounds (``launch_order.stage2``).

The whole launch order for a kernel whose CTA ``c`` runs tiles ``c, c + G, ...`` (``G`` = the wave): the ``base``
spatial order (``identity``, the original; or another reorderer, e.g. ``wavealign`` for Stage 1), then, within each
of the scheduler's rounds of ``G`` tiles, descending NNZ. Head ``g``'s slot 0 is tile ``g * MB``, so its buckets start
at offset ``g * MB mod G`` of a round instead of at its own slot 0 (which Alg. 2's per-head buckets assume).
"""

from __future__ import annotations

from typing import Any

import torch

from wavealign import reorderers
from wavealign.blockmask import row_nnz
from wavealign.launch_order import stage2

# the orders a scheduler-aware Stage 2 may refine: any reorderer but the scheduler-aware ones themselves
SCHEDULED = ("rounds", "balanced")


def check_base(name: str, value: Any) -> str:
    """``value`` names the spatial order a scheduler-aware Stage 2 starts from: a reorderer that is not one."""
    if not isinstance(value, str) or value in SCHEDULED or value not in reorderers.names():
        choices = [n for n in reorderers.names() if n not in SCHEDULED]
        raise ValueError(f"{name} must name the spatial order to refine, one of {choices}; got {value!r}")
    return value


def base_order(mask: torch.Tensor, base: str, wave_size: int, seed: int) -> torch.Tensor:
    """The ``base`` reorderer's order of ``mask`` (G, MB, NB) with its default parameters."""
    grouping = reorderers.get(base)
    return grouping.group(mask, wave_size=wave_size, seed=seed, **grouping.resolve({})).to(mask.device)


def group(mask: torch.Tensor, *, wave_size: int, seed: int, base: str) -> torch.Tensor:
    """``base``'s order, then descending NNZ within each round of ``wave_size`` tiles of the global queue."""
    return stage2.round_buckets(row_nnz(mask), base_order(mask, base, wave_size, seed), wave_size)


reorderers.register(
    "rounds", group, {"base": "identity"},
    "Stage 2 on a static persistent scheduler's global rounds (a head's buckets start where its tiles fall)",
    reference="WaveAlign Alg. 2 on FA4's StaticPersistentTileScheduler (flash_attn/cute/tile_scheduler.py)",
    checks={"base": check_base}, label="Round-aware S2", color="tab:olive")
