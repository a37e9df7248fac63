"""Seeded synthetic block masks for tests, demos and kernel benchmarks, independent of any Q/K.

``random_mask`` is the unstructured control: every block kept independently with probability ``density``
(iid Bernoulli), so row NNZ is binomial, as in the paper's random control and any mask users call random.
``fixed_nnz_mask`` keeps a set number of blocks per row (a lock-step control with no temporal skew).
``planted_mask`` draws rows from a few prototype K/V sets and shuffles them, the structure Stage 1 is meant
to recover. All are generated on the CPU from a ``torch.Generator`` so a seed gives the same mask on every
device.
"""

from __future__ import annotations

import torch

from wavealign.blockmask import check_fits, check_int

# each prototype is a (heads, kv_blocks) draw: 4,096 of them for a 40-head mask of 3,407 K/V blocks (436K tokens in
# 128-token blocks) are 2.2 GB of floats, and no mask has more distinct rows per head to copy them into
MAX_PROTOTYPES = 4096


def _check_shape(heads: int, q_blocks: int, kv_blocks: int, density: float) -> None:
    """Sizes of at least 1 whose draws fit this machine: every generator draws one float32 per block on the CPU."""
    for name, value in (("heads", heads), ("q_blocks", q_blocks), ("kv_blocks", kv_blocks)):
        check_int(name, value, lo=1)
    check_fits(f"a ({heads}, {q_blocks}, {kv_blocks}) synthetic mask's random draws", 4 * heads * q_blocks * kv_blocks)
    if not 0.0 < density <= 1.0:
        raise ValueError(f"density must be in (0, 1], got {density}")


def _select_per_row(scores: torch.Tensor, nnz: torch.Tensor) -> torch.Tensor:
    """Mark, in each row of ``scores``, its ``nnz`` highest-scoring columns."""
    rank = torch.argsort(torch.argsort(scores, dim=-1, descending=True), dim=-1)
    return rank < nnz.unsqueeze(-1)


def random_mask(heads: int, q_blocks: int, kv_blocks: int, density: float, *, seed: int = 0,
                device: str | torch.device = "cpu") -> torch.Tensor:
    """iid Bernoulli(``density``) blocks: row NNZ ~ Binomial(kv_blocks, density), rows may even be empty."""
    _check_shape(heads, q_blocks, kv_blocks, density)
    gen = torch.Generator().manual_seed(seed)
    return (torch.rand(heads, q_blocks, kv_blocks, generator=gen) < density).to(device)


def fixed_nnz_mask(heads: int, q_blocks: int, kv_blocks: int, density: float, *, nnz_spread: float = 0.0,
                   seed: int = 0, device: str | torch.device = "cpu") -> torch.Tensor:
    """Uniformly random columns with a chosen row NNZ: ``density * kv_blocks`` times U(1 - spread, 1 + spread)
    (``nnz_spread=0``: every row exactly the same NNZ)."""
    _check_shape(heads, q_blocks, kv_blocks, density)
    if not 0.0 <= nnz_spread < 1.0:
        raise ValueError(f"nnz_spread must be in [0, 1), got {nnz_spread}")
    gen = torch.Generator().manual_seed(seed)
    scale = 1.0 + nnz_spread * (2.0 * torch.rand(heads, q_blocks, generator=gen) - 1.0)
    nnz = (density * kv_blocks * scale).round().clamp(1, kv_blocks).long()
    mask = _select_per_row(torch.rand(heads, q_blocks, kv_blocks, generator=gen), nnz)
    return mask.to(device)


def planted_mask(heads: int, q_blocks: int, kv_blocks: int, density: float = 0.25, *, prototypes: int = 8,
                 noise: float = 0.002, shuffle: bool = True, seed: int = 0,
                 device: str | torch.device = "cpu") -> torch.Tensor:
    """Rows copied from ``prototypes`` random K/V sets (NNZ varying 0.5-1.5x between them), with
    ``noise`` of their entries flipped, then shuffled so that similar rows are scattered."""
    _check_shape(heads, q_blocks, kv_blocks, density)
    prototypes = check_int("prototypes", prototypes, lo=1, hi=MAX_PROTOTYPES)
    if not 0.0 <= noise < 0.5:
        raise ValueError(f"noise must be in [0, 0.5), got {noise}")
    gen = torch.Generator().manual_seed(seed)
    proto_density = density * (0.5 + torch.rand(heads, prototypes, generator=gen))
    proto_nnz = (proto_density * kv_blocks).round().clamp(1, kv_blocks).long()
    protos = _select_per_row(torch.rand(heads, prototypes, kv_blocks, generator=gen), proto_nnz)
    # contiguous runs of rows share a prototype, as neighbouring tokens do before the shuffle
    row_proto = (torch.arange(q_blocks) * prototypes // q_blocks).expand(heads, q_blocks)
    mask = torch.gather(protos, 1, row_proto.unsqueeze(-1).expand(heads, q_blocks, kv_blocks))
    mask = mask ^ (torch.rand(heads, q_blocks, kv_blocks, generator=gen) < noise)
    if shuffle:
        order = torch.argsort(torch.rand(heads, q_blocks, generator=gen), dim=-1)
        mask = torch.gather(mask, 1, order.unsqueeze(-1).expand_as(mask))
    return mask.contiguous().to(device)
