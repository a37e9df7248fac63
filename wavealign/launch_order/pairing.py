"""Which mask blocks share a kernel's query unit, where its tile spans several (FA4 on SM100: ``q_stage = 2``).

Such a kernel runs a unit of ``q_stage`` query blocks against the union (OR) of their K/V lists (``wavealign.sim.
tiling``); each block's own rows stay exact (the blocks only one of them selects are partial blocks, masked for the
other), but the unit does ``q_stage x |OR|`` block-steps of work for ``sum |row|`` useful ones. Which blocks share a
unit is the planner's free choice, exact like any launch order: units are gathered and scattered as whole blocks.
``pair_blocks`` pairs blocks by K/V overlap; ``or_inflation`` is a pairing's work over the blocks' own.
"""

from __future__ import annotations

import torch

from wavealign import reorderers
from wavealign.blockmask import check_int, row_nnz


def paired_rows(mask: torch.Tensor, perm: torch.Tensor) -> torch.Tensor:
    """``mask`` (G, MB, NB) with each head's rows in ``perm`` (G, MB) order: consecutive ``q_stage`` rows are then
    the kernel's units (``sim.coarsen_rows`` makes them)."""
    return torch.gather(mask, 1, perm.to(mask.device).unsqueeze(-1).expand_as(mask))


def unit_steps(mask: torch.Tensor, perm: torch.Tensor, q_stage: int) -> torch.Tensor:
    """(G,) the block-steps each head's units take when consecutive ``q_stage`` slots of ``perm`` (G, MB) share a
    unit: ``q_stage x |OR|`` per unit (a ragged last unit runs its whole tile too)."""
    g, mb, nb = mask.shape
    rows = paired_rows(mask, perm)
    pad = (-mb) % q_stage
    if pad:
        rows = torch.cat([rows, rows.new_zeros(g, pad, nb)], dim=1)
    return rows.reshape(g, -1, q_stage, nb).any(2).sum((-2, -1)) * q_stage


def or_inflation(mask: torch.Tensor, perm: torch.Tensor, q_stage: int) -> float:
    """A pairing's work over its blocks' own: the units' block-steps (``unit_steps``) over the mask's selected
    blocks, all heads together; 1 where every unit's blocks select the same K/V blocks."""
    useful = int(row_nnz(mask).sum())
    return float(unit_steps(mask, perm, q_stage).sum()) / useful if useful else 1.0


def pair_blocks(mask: torch.Tensor, q_stage: int, seed: int = 0) -> torch.Tensor:
    """(G, MB) int64: the blocks of each head of ``mask`` (G, MB, NB) in an order whose consecutive ``q_stage``
    slots form the kernel's units, per head the cheaper of two pairings: token adjacency (the kernel's own) and
    adjacency in WaveAlign's Stage 1 order, which puts blocks with similar K/V sets side by side. Deterministic for
    a seed."""
    q_stage = check_int("q_stage", q_stage, lo=1)
    g, mb, _ = mask.shape
    adjacent = torch.arange(mb, device=mask.device).expand(g, mb)
    if q_stage == 1 or mb <= q_stage:
        return adjacent.contiguous()
    stage1 = reorderers.get("wavealign")
    similar = stage1.group(mask, wave_size=q_stage, seed=seed, **stage1.resolve({})).to(mask.device)
    cheaper = unit_steps(mask, similar, q_stage) < unit_steps(mask, adjacent, q_stage)
    return torch.where(cheaper.unsqueeze(-1), similar, adjacent).contiguous()
