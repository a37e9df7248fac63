"""XAttention (Xu et al., 2025): antidiagonal block scoring and cumulative-threshold block selection.

Per head: tokens are grouped by ``stride`` S; each (query group, key group) pair is scored by the sum of
its S x S tile's antidiagonal, q[iS+S-1-s] . k[jS+s] over s, scaled by 1/(sqrt(d) S). A softmax over all
key groups of each query group, summed over block_size/S x block_size/S tiles, gives each (query block,
kv block) an estimated attention mass. Each row then keeps blocks in descending mass until the kept mass
reaches ``threshold`` x the row's total, **including the block that crosses it**.

Bidirectional port: the softmax runs over every key (no causal mask), which is upstream's non-causal path.
That path forces nothing into the threshold count: each row is a plain descending selection, and a side
effect of upstream's index bookkeeping then turns kv-block 0 on in every row without counting its mass.
``keep_first_block`` (on by default) reproduces that; ``keep_diagonal`` (off by default, as upstream without
causal masking or ``keep_recent``) adds the diagonal block the same way. Default stride 8 (the paper's video
setting; 16 is the other published value). ``docs/methods.md`` compares every step with upstream.

On a GPU the scoring runs as one fused Triton kernel and the selection as another (``masks._kernels``); the torch
code here is the reference they are tested against, and the CPU path.
"""

from __future__ import annotations

import math
from functools import partial

import torch

from wavealign import masks
from wavealign.blockmask import check_int
from wavealign.masks import _kernels
from wavealign.masks._common import (
    check_flag,
    check_fraction,
    check_qkv,
    logits_f32,
    num_blocks,
    per_head,
    rows_per_chunk,
)

PARAMS = {"threshold": 0.9, "stride": 8, "keep_first_block": True, "keep_diagonal": False}


def _antidiagonal_groups(x: torch.Tensor, stride: int, reverse: bool) -> torch.Tensor:
    """(N, D) -> (ceil(N/S), S*D): group g concatenates rows gS..gS+S-1, reversed for queries."""
    n, d = x.shape
    groups = math.ceil(n / stride)
    xp = torch.nn.functional.pad(x, (0, 0, 0, groups * stride - n)).view(groups, stride, d)
    if reverse:
        xp = xp.flip(1)
    return xp.reshape(groups, stride * d)


def block_scores(q: torch.Tensor, k: torch.Tensor, block_size: int, stride: int) -> torch.Tensor:
    """The estimated attention mass of each (query block, kv block) of one head, fp32 (MB, NB)."""
    n, d = q.shape
    if block_size % stride:
        raise ValueError(f"block_size must be a multiple of stride, got block_size={block_size}, stride={stride}")
    per_block = block_size // stride
    nb = num_blocks(n, block_size)
    # bf16 logits of |x| ~ 30 would be off by ~0.1, enough to move blocks across the threshold, so logits are
    # float32 (``logits_f32``: on a GPU through the tensor cores, as upstream's Triton kernel computes them)
    qg = _antidiagonal_groups(q, stride, reverse=True)
    kg = _antidiagonal_groups(k, stride, reverse=False)
    groups = qg.shape[0]
    # pad groups up to whole blocks; padded key groups are excluded from the softmax
    kg = torch.nn.functional.pad(kg, (0, 0, 0, nb * per_block - groups))
    scale = 1.0 / (math.sqrt(d) * stride)
    out = torch.empty(nb, nb, device=q.device)
    blocks_per_chunk = max(rows_per_chunk(nb * per_block, q.device) // per_block, 1)
    for b0 in range(0, nb, blocks_per_chunk):
        b1 = min(b0 + blocks_per_chunk, nb)
        rows = qg[b0 * per_block: min(b1 * per_block, groups)]
        logits = logits_f32(rows, kg)
        logits *= scale  # in place, as the fill below: each pass over a chunk is ~1 GiB on a GPU
        logits[:, groups:] = float("-inf")
        probs = torch.softmax(logits, dim=-1)
        if rows.shape[0] < (b1 - b0) * per_block:  # the ragged last block's missing query groups
            probs = torch.nn.functional.pad(probs, (0, 0, 0, (b1 - b0) * per_block - rows.shape[0]))
        out[b0:b1] = probs.view(b1 - b0, per_block, nb, per_block).sum((1, 3))
    return out


def select_blocks(scores: torch.Tensor, threshold: float, keep_first_block: bool = True,
                  keep_diagonal: bool = False) -> torch.Tensor:
    """Per row of ``scores`` (MB, NB): blocks in descending mass (ties in index order), each kept while the
    cumulative mass before it is still below ``threshold`` x the row total (so the crossing block is kept); then
    kv-block 0 and the diagonal are added when asked, their mass not counted (upstream's non-causal path)."""
    mb, nb = scores.shape
    s = scores.double()
    required = s.sum(-1, keepdim=True) * threshold
    ordered, order = torch.sort(s, dim=-1, descending=True, stable=True)
    before = torch.cumsum(ordered, dim=-1) - ordered
    mask = torch.zeros(mb, nb, dtype=torch.bool, device=scores.device)
    mask.scatter_(-1, order, before < required)
    if keep_first_block:
        mask[:, 0] = True
    if keep_diagonal:
        diag = torch.arange(min(mb, nb), device=scores.device)
        mask[diag, diag] = True
    return mask


def build(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int = 128, *, threshold: float,
          stride: int, keep_first_block: bool, keep_diagonal: bool) -> torch.Tensor:
    """XAttention block mask (B, H, MB, NB) at cumulative-mass ``threshold`` (paper: 0.9): by the GPU kernels where
    they run, else by ``reference``."""
    _check(q, k, v, block_size, stride)
    if not (_kernels.enabled(q) and _kernels.xattention_supports(block_size, stride)):
        return _reference(q, k, v, block_size, threshold, stride, keep_first_block, keep_diagonal)
    b, h, n, d = q.shape
    scores = _kernels.xattention_scores(q.reshape(b * h, n, d), k.reshape(b * h, n, d), block_size, stride)
    mask = _kernels.select_by_mass(scores, threshold, keep_first_block, keep_diagonal)
    return mask.view(b, h, *mask.shape[-2:])


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int = 128, *, threshold: float,
              stride: int, keep_first_block: bool, keep_diagonal: bool) -> torch.Tensor:
    """``build`` by this module's torch code, head by head, on any device."""
    _check(q, k, v, block_size, stride)
    return _reference(q, k, v, block_size, threshold, stride, keep_first_block, keep_diagonal)


def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int, stride: int) -> None:
    check_qkv(q, k, v, block_size)
    if block_size % stride:
        raise ValueError(f"block_size must be a multiple of stride, got block_size={block_size}, stride={stride}")


def _reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int, threshold: float, stride: int,
               keep_first_block: bool, keep_diagonal: bool) -> torch.Tensor:
    return per_head(q, k, v, block_size, lambda _h, qh, kh, _v: select_blocks(
        block_scores(qh, kh, block_size, stride), threshold, keep_first_block, keep_diagonal))


masks.register("xattention", build, PARAMS, "antidiagonal scoring + cumulative threshold (XAttention)",
               checks={"threshold": check_fraction, "stride": partial(check_int, lo=1),
                       "keep_first_block": check_flag, "keep_diagonal": check_flag}, reference=reference)

if __name__ == "__main__":
    from wavealign.masks._draw import main

    raise SystemExit(main("xattention"))
