"""``balanced``: a balanced Stage 2 for a static persistent scheduler (``launch_order.stage2.balanced``).

The ``base`` spatial order decides which rows share a round of the scheduler's ``G`` tiles (``identity``: the
original order; ``wavealign``: Stage 1's grouping); within each round the longest row goes to the CTA that has taken
the least work so far (Graham's LPT rule, Graham 1969, applied round by round), so CTAs stay in step and the rows of
a round keep running together.
"""

from __future__ import annotations

import torch

from wavealign import reorderers
from wavealign.blockmask import row_nnz
from wavealign.launch_order import stage2
from wavealign.reorderers.rounds import base_order, check_base


def group(mask: torch.Tensor, *, wave_size: int, seed: int, base: str) -> torch.Tensor:
    """``base``'s order, then each round's rows handed longest first to its least-loaded CTAs."""
    return stage2.balanced(row_nnz(mask), base_order(mask, base, wave_size, seed), wave_size)


reorderers.register(
    "balanced", group, {"base": "identity"},
    "balanced Stage 2: within each scheduler round, the longest row to the least-loaded CTA so far (LPT)",
    reference="Graham 1969 (LPT), per round of FA4's StaticPersistentTileScheduler (flash_attn/cute/tile_scheduler.py)",
    checks={"base": check_base}, label="Balanced S2", color="tab:cyan")
