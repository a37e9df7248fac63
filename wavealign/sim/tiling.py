"""A kernel's launch rows on a GPU whose query tile spans several mask blocks: FA4's SM100 tiling.

FA4 (flash-attn-4 4.0.0b36) on Blackwell runs two 128-row query tiles per CTA against each K/V tile it loads
(``q_stage = 2``), so its block-sparse forward takes a sparse query block only as a multiple of
``q_stage x tile_m = 256`` rows (``flash_attn/cute/block_sparsity.py``, ``infer_block_sparse_expected_shapes``;
upstream issue Dao-AILab/flash-attention#2727). A method's 128-row mask is therefore launched there as 256-row
*units*: unit u is query blocks 2u and 2u + 1 (adjacent in the original token order), and it reads every K/V block
either of them selects, so its row is the OR of theirs. The two tiles share each K/V load, which halves the K/V
bytes per FLOP against a 128-row launch of the same mask (more where the two rows differ: the OR adds blocks).

A launch order there is a permutation of units, planned on the coarsened mask (``coarsen_rows``) with the GPU's
wave of units; it stays exact because whole units move (``launch_order.block_gather`` at the unit's token count) and
the output is scattered back the same way.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from wavealign.blockmask import check_int


def coarsen_rows(mask: torch.Tensor, factor: int) -> torch.Tensor:
    """``mask`` (..., MB, NB) bool with its query blocks grouped ``factor`` at a time: (..., ceil(MB / factor), NB),
    row u the OR of rows u*factor .. u*factor + factor - 1 (the last unit holds fewer where MB is not a multiple of
    ``factor``). ``factor`` 1 returns ``mask`` itself."""
    factor = check_int("factor", factor, lo=1)
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.dim() < 2:
        got = f"{mask.dtype} {tuple(mask.shape)}" if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise ValueError(f"mask must be a bool (..., MB, NB) tensor, got {got}")
    if factor == 1:
        return mask
    mb, nb = mask.shape[-2:]
    units = -(-mb // factor)
    padded = F.pad(mask, (0, 0, 0, units * factor - mb))  # False rows complete a ragged last unit
    return padded.reshape(*mask.shape[:-2], units, factor, nb).any(dim=-2)
