"""Video Sparse Attention (Zhang et al., 2025), its training-free coarse stage: cube-mean pooled Q and K, and per query
cube the top-k key cubes, in the cube token order.

Follows hao-ai-lab/FastVideo ``fastvideo-kernel``: ``vsa_utils.py`` (``get_tile_partition_indices``,
``construct_variable_block_sizes``; the same tiling as ``triton_kernels/vsa_tile_layout.py``), ``ops.py``
(``video_sparse_attn``: ``fused_block_mean`` of Q and K, scores ``q_c k_c^T / sqrt(D)``, ``fused_topk_mask``) and
``fastvideo/attention/backends/video_sparse_attn.py`` (``_compute_cur_topk``: k = ceil((1 - sparsity) * cubes),
clamped to [1, cubes]).

- Token order (``token_order``): the latent video (T, H, W) cut into ``cube`` = (2, 8, 8) tiles of 128 tokens, one
  per 128-token block of our kernels (upstream tiles 4 x 4 x 4 = 64 or 4 x 8 x 8 = 256), each tile's tokens
  contiguous in raster order within it, tiles in raster order. The same order for Q and K/V and for every head;
  ``q_labels`` / ``kv_labels`` give each position's tile (upstream's tile index).
- Scores: each block's Q and K mean (summed in float32, cast back to the input dtype, as ``fused_block_mean``), their
  product in the input dtype divided by sqrt(D), as upstream's bf16 ``matmul``.
- Selection: per query block the ``k`` highest-scoring key blocks, ties in index order (``fused_topk_mask``'s
  threshold with its at-threshold positions taken first to last). Default ``sparsity`` 0.9, the VSA training and
  inference scripts' ``--VSA_sparsity`` (FastVideo's argument default, 0.0, keeps every tile).
- Left out: the compressed (coarse) attention output VSA adds to the sparse one, and its learned gate: they do not
  change which blocks the sparse kernel computes.

Ragged edges, stated: upstream pads every edge tile to the full tile with zero tokens and passes each tile's real
size to its kernel (``variable_block_sizes``); our kernels take N tokens on a fixed 128-token grid, so nothing can
be padded. Here the full tiles come first, one block each; the edge tiles (cut short by T, H or W) follow, in tile
raster order, packed back to back, so a block at the tail may hold parts of two or three neighbouring edge tiles and
is pooled and selected as one (the mean of its real tokens, as upstream's mean over a tile's real tokens). With
(T, H, W) multiples of the cube every block is one tile, as upstream's.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import torch

from wavealign import masks
from wavealign.blockmask import check_int
from wavealign.masks._common import (
    check_number,
    check_qkv,
    num_blocks,
    require_latent,
)
from wavealign.masks._token_order import TokenOrder

PARAMS = {"sparsity": 0.9, "cube": (2, 8, 8), "latent": None}


def check_cube(name: str, value: Any) -> tuple[int, int, int]:
    """A tile shape: (t, h, w), three positive integers, in latent tokens."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or len(value) != 3:
        raise ValueError(f"{name} must be (t, h, w), three positive integers (a tile in latent tokens), got {value!r}")
    return tuple(check_int(f"{name}[{i}]", size, lo=1) for i, size in enumerate(value))  # type: ignore[return-value]


def check_sparsity(name: str, value: Any) -> float:
    """The fraction of key tiles left out, in [0, 1) (at least one is kept)."""
    return check_number(name, value, 0.0, 1.0, hi_open=True)


def top_k(tiles: int, sparsity: float) -> int:
    """Key tiles each query tile keeps: ceil((1 - sparsity) * tiles), at least one (``_compute_cur_topk``)."""
    return max(1, min(math.ceil((1.0 - sparsity) * tiles), tiles))


@functools.lru_cache(maxsize=8)
def tile_order(latent: tuple[int, int, int], cube: tuple[int, int, int],
               device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(perm, labels), int64 (N,): position p of the cube order holds token ``perm[p]`` of the frame-major order, in
    tile ``labels[p]`` (tiles numbered in raster order); full tiles first, then the edge tiles, each tile's tokens in
    raster order."""
    (t, h, w), (ct, ch, cw) = latent, cube
    tiles_t, tiles_h, tiles_w = math.ceil(t / ct), math.ceil(h / ch), math.ceil(w / cw)
    token = torch.arange(t * h * w, device=device)
    tt, hh, ww = token // (h * w), token // w % h, token % w
    tile = ((tt // ct) * tiles_h + hh // ch) * tiles_w + ww // cw
    # a tile is cut short where it starts within one tile of an edge that does not divide
    edge = ((tt // ct == tiles_t - 1) & (t % ct > 0)) | ((hh // ch == tiles_h - 1) & (h % ch > 0)) | \
           ((ww // cw == tiles_w - 1) & (w % cw > 0))
    tiles = tiles_t * tiles_h * tiles_w
    # within a tile the frame-major token index grows with the tile's own raster order
    perm = torch.argsort((edge.long() * tiles + tile) * token.numel() + token)
    return perm, tile[perm]


def token_order(q: torch.Tensor, k: torch.Tensor, *, block_size: int, sparsity: float, cube: tuple[int, int, int],
                latent: tuple[int, int, int] | None) -> TokenOrder:
    """The cube order of q, k (B, H, N, D): one permutation for Q and K/V, shared by every batch element and head."""
    check_qkv(q, k, k, block_size, finite=False)
    b, heads, n, _ = q.shape
    latent = require_latent("vsa", latent, n)
    _check_cube(cube, block_size)
    perm, labels = tile_order(latent, cube, q.device)
    perm, labels = perm.view(1, 1, n).expand(b, heads, n), labels.view(1, 1, n).expand(b, heads, n)
    return TokenOrder(q_perm=perm, kv_perm=perm, q_labels=labels, kv_labels=labels)


def _check_cube(cube: Sequence[int], block_size: int) -> None:
    if math.prod(cube) != block_size:
        raise ValueError(f"cube must hold one block of tokens: t * h * w = block_size = {block_size}, got "
                         f"cube={tuple(cube)} ({math.prod(cube)} tokens)")


def block_means(x: torch.Tensor, block_size: int) -> torch.Tensor:
    """Mean over each block of ``block_size`` positions of x (..., N, D), summed in float32 and cast back to x's
    dtype (``fused_block_mean``); the ragged last block averages its real positions: (..., ceil(N / bs), D)."""
    n = x.shape[-2]
    full = n // block_size
    sums = [x[..., :full * block_size, :].unflatten(-2, (full, block_size)).sum(-2, dtype=torch.float32) / block_size]
    if n > full * block_size:
        sums.append(x[..., full * block_size:, :].sum(-2, keepdim=True, dtype=torch.float32) / (n - full * block_size))
    return torch.cat(sums, dim=-2).to(x.dtype)


def select_top_k(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Per row of ``scores`` (..., NB), the ``k`` highest, ties taken in index order: every score above the k-th
    value, then the positions equal to it, first to last, until k are kept (``fused_topk_mask``)."""
    kth = scores.topk(k, dim=-1).values[..., -1:]
    above = scores > kth
    at = scores == kth
    needed = k - above.sum(-1, keepdim=True)
    return above | (at & (at.cumsum(-1) <= needed))


def build(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int = 128, *, token_order: TokenOrder,
          sparsity: float, cube: tuple[int, int, int], latent: tuple[int, int, int] | None) -> torch.Tensor:
    """The (B, H, MB, NB) mask of q, k, v (B, H, N, D) already in the cube order: top-k key blocks per query block by
    pooled q . k. Heads go a few at a time, so 364K tokens x 40 heads fit."""
    check_qkv(q, k, v, block_size)
    b, heads, n, d = q.shape
    blocks = num_blocks(n, block_size)
    keep = top_k(blocks, sparsity)
    mask = torch.empty(b, heads, blocks, blocks, dtype=torch.bool, device=q.device)
    step = max(1, 2**27 // (blocks * blocks * b))  # 128M scores at a time: ~1 GiB in the selection's int64 count
    for h0 in range(0, heads, step):
        q_c = block_means(q[:, h0:h0 + step], block_size)
        k_c = block_means(k[:, h0:h0 + step], block_size)
        scores = (q_c @ k_c.transpose(-1, -2)) / math.sqrt(d)  # in the input dtype, as upstream's matmul
        mask[:, h0:h0 + step] = select_top_k(scores, keep)
    return mask


masks.register("vsa", build, PARAMS, "top-k key cubes per query cube by cube-mean Q . K, in cube order (VSA)",
               checks={"sparsity": check_sparsity, "cube": check_cube},
               token_order=token_order, types={"cube": list[int]})

if __name__ == "__main__":
    import sys

    from wavealign.masks._draw import main

    # a cube of the default shape holds 128 tokens: drawn on 128-token blocks unless --block-size says otherwise
    raise SystemExit(main("vsa", ["--block-size", "128", *sys.argv[1:]]))
