"""Radial Attention (Li et al., 2025): a static mask of spatiotemporal energy decay, the same for every head and step.

Follows mit-han-lab/radial-attention ``radial_attn/attn_mask.py`` (commit 72788d4: ``get_window_width``,
``get_diagonal_split_mask``, ``shrinkMaskStrict``, ``gen_log_mask_shrinked``), on the 128 x 128 grid of the
original frame-major token order. Its token-level rule, per pair of latent frames (i, j) at distance d = |i - j|,
with F tokens per frame and r, c a query's and a key's index within their frames:

- ``model_type="wan"``: frame 0 is an attention sink, every query sees all of it;
- d <= 1: the whole frame pair (the dense diagonal frame band);
- otherwise a spatial band |c - r| <= w(d), w(d) = max(2^bitlen(F) / 2^bitlen(d) * decay_factor, block_size): the
  window halves each time the temporal distance doubles;
- a frame pair is dropped unless d is a multiple of max(1, block_size // (2^bitlen(F) / 2^bitlen(d))) (the split:
  far frames are kept at a stride once their window is narrower than a block). Upstream applies it to every pair
  but the sink's, so at small F even adjacent frames can be dropped.

Each frame pair's token mask is shrunk to blocks on its own (``shrinkMaskStrict``): a block is kept if, of its
columns that hold any of the pair's entries, more than 60% have more than a third of the block's rows set; the
block mask is the OR over frame pairs. The counts have closed forms (a band's column counts form a trapezoid, so
the columns above each level are one interval), computed per (row segment, column segment), a segment being the
tokens of one frame within one block: O((MB + T)^2), no token-level mask.

Differences, stated: upstream crops each frame pair's tile to ceil(F / 128) blocks from the frame's first block,
so a frame whose offset pushes its tail into one more block loses that block's share of the pair; here every block
a frame touches counts. Upstream's mask covers floor(N / 128) blocks; here the ragged last block follows the same
rule (its missing rows count as empty). The split threshold is upstream's hard-coded 128, read as ``block_size``.
Defaults: ``decay_factor`` 1.0 (upstream's ``WanSparseAttnProcessor`` and CLI default; its 1x-length Wan script
passes 0.2), ``model_type`` "wan". Upstream's dense first layers and timesteps (``dense_layers``,
``dense_timesteps``) choose per call whether to use the mask at all, so they are not part of it.
"""

from __future__ import annotations

from fractions import Fraction
from functools import partial

import torch

from wavealign import masks
from wavealign.blockmask import check_int
from wavealign.masks._common import check_number, num_blocks, one_of, require_latent

PARAMS = {"decay_factor": 1.0, "model_type": "wan", "latent": None}
MODEL_TYPES = ("wan", "hunyuan")
# shrinkMaskStrict: a column is dense above 1/3 of the block's rows; a block is kept above 3/5 dense columns
DENSE_COLUMN = Fraction(1, 3)
KEPT_BLOCK = Fraction(3, 5)


def frame_rules(frames: int, tokens_per_frame: int, block_size: int,
                decay_factor: float) -> tuple[list[int], list[bool]]:
    """Per temporal distance d in [0, frames): the spatial band's half width in tokens (the whole frame for d <= 1)
    and whether the split keeps frame pairs at that distance (``get_window_width``, ``get_diagonal_split_mask``)."""
    base = 2 ** tokens_per_frame.bit_length()
    widths, kept = [], []
    for d in range(frames):
        decay = base / 2 ** d.bit_length()
        window = tokens_per_frame if d <= 1 else max(decay * decay_factor, block_size)
        widths.append(int(window))  # |c - r| <= window, r and c integers
        kept.append(decay >= block_size or d % int(block_size / decay) == 0)
    return widths, kept


def _segments(tokens: int, tokens_per_frame: int, block_size: int, device: torch.device) -> dict[str, torch.Tensor]:
    """The tokens cut at every frame and block boundary: each piece's frame, block, and [lo, hi) within its frame."""
    cuts = torch.cat([torch.arange(0, tokens, tokens_per_frame), torch.arange(0, tokens, block_size),
                      torch.tensor([tokens])]).unique()  # sorted
    start, end = cuts[:-1], cuts[1:]
    frame = start // tokens_per_frame
    return {name: t.to(device) for name, t in (("frame", frame), ("block", start // block_size),
                                               ("lo", start - frame * tokens_per_frame),
                                               ("hi", end - frame * tokens_per_frame))}


def _span(lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
    """How many integers lie in [lo, hi] (0 if none)."""
    return (hi - lo + 1).clamp_min(0)


def block_mask(latent: tuple[int, int, int], block_size: int, decay_factor: float, model_type: str,
               device: torch.device | str = "cpu") -> torch.Tensor:
    """Radial Attention's (MB, MB) bool mask of a (T, H, W) latent video, tokens frame-major."""
    frames, height, width = latent
    per_frame = height * width
    tokens = frames * per_frame
    blocks = num_blocks(tokens, block_size)
    widths, kept = frame_rules(frames, per_frame, block_size, decay_factor)
    seg = _segments(tokens, per_frame, block_size, torch.device(device))
    widths_t = torch.tensor(widths, device=device)
    kept_t = torch.tensor(kept, device=device)
    dense_rows = int(block_size * DENSE_COLUMN) + 1  # rows a column needs to be dense: count / block_size > 1/3
    out = torch.zeros(blocks, blocks, dtype=torch.int32, device=device)
    cols = {name: t.unsqueeze(0) for name, t in seg.items()}
    step = max(2**22 // len(seg["frame"]), 1)  # row segments per chunk: ~4M segment pairs at a time
    for s in range(0, len(seg["frame"]), step):
        rows = {name: t[s:s + step].unsqueeze(1) for name, t in seg.items()}
        dist = (rows["frame"] - cols["frame"]).abs()
        sink = (cols["frame"] == 0) if model_type == "wan" else torch.zeros_like(dist, dtype=torch.bool)
        w = torch.where(sink, per_frame, widths_t[dist])
        on = sink | kept_t[dist]
        r0, r1, c0, c1 = rows["lo"], rows["hi"], cols["lo"], cols["hi"]
        # columns c in [c0, c1) with any row r in [r0, r1) within w: the band's support
        nonzero = _span(torch.maximum(c0, r0 - w), torch.minimum(c1 - 1, r1 - 1 + w))
        # columns where min(r1 - 1, c + w) - max(r0, c - w) + 1 >= dense_rows: one interval, when the band and the
        # row segment are both that tall
        tall = (r1 - r0 >= dense_rows) & (2 * w + 1 >= dense_rows)
        dense = _span(torch.maximum(c0, r0 - w + dense_rows - 1), torch.minimum(c1 - 1, r1 + w - dense_rows)) * tall
        keep = on & (dense * KEPT_BLOCK.denominator > nonzero * KEPT_BLOCK.numerator)
        br, bc = torch.broadcast_tensors(rows["block"], cols["block"])
        out.index_put_((br[keep], bc[keep]), torch.ones((), dtype=torch.int32, device=device), accumulate=True)
    return out > 0


def from_shape(heads: int, q_blocks: int, kv_blocks: int, *, device: torch.device | str = "cpu", block_size: int,
               decay_factor: float, model_type: str, latent: tuple[int, int, int] | None) -> torch.Tensor:
    """The (heads, q_blocks, kv_blocks) mask: Radial Attention's, the same in every head."""
    check_int("heads", heads, lo=1)
    check_int("block_size", block_size, lo=1)
    latent = require_latent("radial", latent)
    tokens = latent[0] * latent[1] * latent[2]
    if (q_blocks, kv_blocks) != (num_blocks(tokens, block_size),) * 2:
        raise ValueError(f"q_blocks and kv_blocks must both be ceil(T * H * W / block_size) = "
                         f"{num_blocks(tokens, block_size)} for latent={latent} and block_size={block_size} "
                         f"(self-attention over the video), got ({q_blocks}, {kv_blocks})")
    mask = block_mask(latent, block_size, decay_factor, model_type, device)
    return mask.expand(heads, *mask.shape).contiguous()


masks.register("radial", None, PARAMS, "static spatiotemporal energy-decay mask (Radial Attention)",
               from_shape=from_shape,
               checks={"decay_factor": partial(check_number, lo=0.0, hi=1e6, lo_open=True),
                       "model_type": one_of(MODEL_TYPES)})

if __name__ == "__main__":
    from wavealign.masks._draw import main

    raise SystemExit(main("radial"))
