"""``curve``: query blocks along a 3D Hilbert curve over their latent (t, h, w) position, a static locality order.

A block's position is the mean (t, h, w) of its tokens, tokens flattened frame-major (token (t * H + h) * W + w of a
``latent`` = (T, H, W) video; a ragged last block averages the tokens it has). Blocks are sorted by the Hilbert
index of that position, so blocks that run together lie close in space and time: the order a reviewer would try
before any mask-dependent one. It reads only the shape, never the mask, and is the same for every head.

The index is Skilling's transpose form ("Programming the Hilbert curve", AIP Conf. Proc. 707, 381, 2004): undo the
excess work of each bit level by inverting or exchanging the low bits of the axes, Gray-encode, then read the bits
out level by level. Positions are taken at half-token resolution (twice the mean, rounded down) in the smallest
power-of-two cube holding them; blocks that share a cell keep their original order.
"""

from __future__ import annotations

import functools

import torch

from wavealign import reorderers
from wavealign.blockmask import check_int
from wavealign.masks import check_latent

AXES = 3


def hilbert_index(coords: torch.Tensor, bits: int) -> torch.Tensor:
    """The Hilbert index (n,) int64 of points ``coords`` (n, 3), integers in [0, 2**bits): a bijection of the cube
    onto [0, 2**(3 * bits)) in which consecutive indices are neighbouring cells."""
    bits = check_int("bits", bits, lo=0, hi=20)  # 3 * 20 bits fit an int64
    x = [coords[:, axis].long().clone() for axis in range(AXES)]
    # Skilling's AxestoTranspose: per bit level q from the top, invert (q set on axis i) or exchange with axis 0
    q = 1 << (bits - 1) if bits else 0
    while q > 1:
        low = q - 1
        for i in range(AXES):
            on = (x[i] & q) != 0
            swap = (x[0] ^ x[i]) & low
            x[0] = torch.where(on, x[0] ^ low, x[0] ^ swap)
            if i:
                x[i] = torch.where(on, x[i], x[i] ^ swap)
        q >>= 1
    for i in range(1, AXES):  # Gray encode
        x[i] = x[i] ^ x[i - 1]
    flips = torch.zeros_like(x[0])
    q = 1 << (bits - 1) if bits else 0
    while q > 1:
        flips = torch.where((x[AXES - 1] & q) != 0, flips ^ (q - 1), flips)
        q >>= 1
    x = [axis ^ flips for axis in x]
    index = torch.zeros_like(x[0])
    for level in reversed(range(bits)):  # bit ``level`` of axis 0, 1, 2: the next 3 bits of the index
        for axis in x:
            index = (index << 1) | ((axis >> level) & 1)
    return index


def block_positions(latent: tuple[int, int, int], block_size: int) -> torch.Tensor:
    """(MB, 3) int64: twice the mean (t, h, w) of each block's tokens (exact: the integer part of 2 * sum / count),
    tokens flattened frame-major, the last block holding what is left."""
    frames, height, width = latent
    seq_len = frames * height * width
    token = torch.arange(seq_len)
    pos = torch.stack((token // (height * width), token // width % height, token % width), dim=-1)
    block = token // block_size
    mb = -(-seq_len // block_size)
    sums = torch.zeros(mb, AXES, dtype=torch.long).index_add_(0, block, pos)
    counts = torch.bincount(block, minlength=mb).unsqueeze(-1)
    return 2 * sums // counts


@functools.lru_cache(maxsize=16)
def curve_order(latent: tuple[int, int, int], block_size: int) -> torch.Tensor:
    """(MB,) the query blocks of a ``latent`` video in Hilbert order of their mean position (ties: block order);
    static per shape, so computed once per (latent, block_size) and kept (callers must not write into it)."""
    positions = block_positions(latent, block_size)
    bits = max(int(2 * extent - 1).bit_length() for extent in latent)
    return torch.sort(hilbert_index(positions, bits), stable=True).indices


def group(mask: torch.Tensor, *, wave_size: int, seed: int, latent: tuple[int, int, int] | None,
          block_size: int) -> torch.Tensor:
    """Every head's blocks in the curve's order; ``latent`` must be the video the mask's MB blocks cut."""
    g, mb, _ = mask.shape
    if latent is None:
        raise ValueError("reorderer 'curve' needs latent=(T, H, W), the latent video in tokens (a sweep cell's model "
                         "preset or captured grid gives it; a bare-shape workload has none), got None")
    blocks = -(-latent[0] * latent[1] * latent[2] // block_size)
    if blocks != mb:
        raise ValueError(f"reorderer 'curve': latent={latent} cut in block_size={block_size} makes {blocks} query "
                         f"blocks, but the mask has MB={mb}")
    # a new tensor every call (repeat copies, for one head too): the cached order is shared by every later plan of
    # this latent, and a caller may write into the order it gets (an expand(1, MB).contiguous() was the cache itself)
    return curve_order(latent, block_size).to(mask.device).repeat(g, 1)


reorderers.register(
    # latent and block_size are facts of the step (reorderers.STEP_PARAMS), filled by its plan
    "curve", group, {"latent": None, "block_size": 128},
    "query blocks along a 3D Hilbert curve over their mean latent (t, h, w) position (static, mask-blind)",
    reference="Skilling, Programming the Hilbert curve, AIP Conf. Proc. 707 (2004)",
    checks={"latent": check_latent, "block_size": functools.partial(check_int, lo=1)}, label="Hilbert curve",
    color="teal", types={"latent": list[int] | None})
