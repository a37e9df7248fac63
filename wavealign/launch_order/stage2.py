"""Stage 2 (Alg. 2), and Stage 2 for a static persistent tile scheduler: rows bucketed by the scheduler's global
rounds, and balanced. A leaf module: the reorderers that refine an order with it import it without the package.

``temporal_order`` is Alg. 2 as the paper writes it: within consecutive wave-sized buckets of each head's order,
descending NNZ.

A static persistent kernel (FA4 4.0.0b36's ``StaticPersistentTileScheduler`` on SM100, ``flash_attn/cute/
tile_scheduler.py``; the ``triton-static`` backend here) launches a grid of ``G`` CTAs, and CTA ``c`` runs tiles ``c,
c + G, c + 2G, ...`` of one queue numbered query block fastest, then head (then batch). Launch slot ``p`` of the
``g``-th (batch, head) is tile ``t = g * MB + p``: it runs in global round ``t // G`` on CTA ``t % G``, whatever the
rows before it cost. Stage 2 as written (Alg. 2) buckets each head's slots from the head's own position 0, so under
a fixed stride its buckets straddle rounds and the same CTA draws the longest row of every bucket: CTAs drift apart
and the rows meant to share the L2 no longer run together.

- ``round_buckets``: Stage 2 with its buckets on the scheduler's rounds (head ``g``'s first slot sits at offset
  ``g * MB mod G`` of its round), descending NNZ inside each;
- ``balanced``: inside each round, the rows of that round (the ones the spatial step put there) go to its CTAs by
  Graham's LPT rule against the work each CTA has taken so far: the longest row to the least-loaded CTA. The set of
  rows in a round is unchanged, so Stage 1's grouping is kept; only which CTA runs which changes.

Both are permutations within each head, so they stay exact: only the launch slot of a row moves.
"""

from __future__ import annotations

import numpy as np
import torch


def first_tiles(heads: int, q_blocks: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """The tile index of each (batch, head)'s launch slot 0 in the scheduler's queue: ``g * MB`` for the ``g``-th of
    ``heads`` flattened (batch, head) rows of ``q_blocks`` query blocks each."""
    return torch.arange(heads, device=device, dtype=torch.long) * q_blocks


def temporal_order(nnz: torch.Tensor, order: torch.Tensor, wave_size: int,
                   first_tile: torch.Tensor | None = None) -> torch.Tensor:
    """Stage 2 (Alg. 2): within consecutive ``wave_size`` buckets of ``order``, descending NNZ, stably. Buckets start
    at each head's slot 0, or, given ``first_tile`` (one per leading row of ``order``: the queue index of its slot 0),
    where the scheduler's global rounds of ``wave_size`` tiles cut it (``round_buckets``)."""
    mb = order.shape[-1]
    nnz_in_order = torch.gather(nnz.long(), -1, order)
    slots = torch.arange(mb, device=order.device)
    bucket = slots // wave_size if first_tile is None else (first_tile.unsqueeze(-1) + slots) // wave_size
    # one stable sort on (bucket ascending, nnz descending) keeps the Stage-1 order among ties; a row's NNZ is
    # below 2^31, so the bucket's weight needs no look at the data (and no wait for the GPU)
    key = (bucket << 31) - nnz_in_order
    return torch.gather(order, -1, torch.sort(key, dim=-1, stable=True).indices)


def round_buckets(nnz: torch.Tensor, order: torch.Tensor, grid: int) -> torch.Tensor:
    """Stage 2 on the scheduler's rounds: within each round of ``grid`` consecutive tiles of the global queue, the
    rows of ``order`` (G', MB) by descending ``nnz`` (G', MB), stably. A head's slots are cut where the rounds cut
    them, so bucket ``b`` of head ``g`` is the slots whose tile ``g * MB + p`` falls in round ``b``."""
    return temporal_order(nnz, order, grid, first_tile=first_tiles(order.shape[0], order.shape[-1], order.device))


def balanced(nnz: torch.Tensor, order: torch.Tensor, grid: int) -> torch.Tensor:
    """Balanced Stage 2: within each round of ``grid`` tiles, the rows ``order`` (G', MB) puts in that round are
    handed to the round's CTAs longest first, each to the CTA with the least work (summed ``nnz``) so far; ties go
    to the lower CTA. Where a round spans two heads, each head's rows stay in that head's slots of the round.

    Runs on the host (a loop over rounds, each a few small sorts): the row lengths are (G', MB) integers, and the
    result goes back to ``order``'s device."""
    heads, mb = order.shape
    lengths = torch.gather(nnz.long(), -1, order).cpu().numpy()
    rows = order.cpu().numpy()
    out = rows.copy()
    load = np.zeros(grid, dtype=np.int64)
    total = heads * mb
    for start in range(0, total, grid):
        stop = min(total, start + grid)
        for head in range(start // mb, (stop - 1) // mb + 1):  # the heads this round spans
            lo, hi = max(start, head * mb) - head * mb, min(stop, (head + 1) * mb) - head * mb
            ctas = (head * mb + np.arange(lo, hi)) % grid
            longest = np.argsort(-lengths[head, lo:hi], kind="stable")
            freest = np.argsort(load[ctas], kind="stable")  # CTAs ascend within a round: ties to the lower one
            out[head, lo + freest] = rows[head, lo + longest]
            load[ctas[freest]] += lengths[head, lo + longest]
    return torch.from_numpy(out).to(order.device)
