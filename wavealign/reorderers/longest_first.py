"""``longest-first``: every head's rows by descending NNZ over the whole head, the longest processing time first.

This is the order FlashAttention-3's varlen scheduler hands its persistent CTAs: ``prepare_varlen_num_blocks``
sorts the batch entries by descending K/V block count before any tile is scheduled (``varlen_sort_batches``,
Dao-AILab/flash-attention ``hopper/flash_prepare_scheduler.cu``; the tile scheduler reads the sorted order through
``varlen_batch_idx_ptr``, ``hopper/tile_scheduler.hpp``), Graham's LPT rule (Graham, "Bounds on multiprocessing
timing anomalies", SIAM J. Appl. Math. 1969). Here the jobs are one head's query blocks and the length a row's NNZ:
unlike Stage 2, which sorts within each wave, the sort spans the head, so it also regroups rows across waves (by
length alone, not by which K/V blocks they read). Ties keep the original order.
"""

from __future__ import annotations

import torch

from wavealign import reorderers
from wavealign.blockmask import row_nnz


def group(mask: torch.Tensor, *, wave_size: int, seed: int) -> torch.Tensor:
    """Each head's rows by descending NNZ, stably."""
    return torch.sort(row_nnz(mask), dim=-1, descending=True, stable=True).indices


reorderers.register(
    "longest-first", group, {}, "each head's rows by descending NNZ over the whole head (LPT)",
    reference="FlashAttention-3 varlen scheduler (hopper/flash_prepare_scheduler.cu, varlen_sort_batches); "
              "Graham 1969 (LPT)",
    cuda_graph=True, label="Longest-first", color="goldenrod")
