"""The mask statistics the skip model reads: ``features(mask, hardware) -> SkipFeatures``.

``MODEL_FEATURES`` names, in order, the vector a fitted profile's models take (``SkipFeatures.model_inputs``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import torch

from wavealign import hardware as hw_registry
from wavealign.blockmask import MaskLike, as_dense, check_int, row_nnz

# the inputs of a fitted model, in this order; log of counts and ratios, raw for bounded features
MODEL_FEATURES = ("log_num_q_blocks", "log_density", "nnz_cv", "adjacent_jaccard", "log_working_set_over_l2",
                  "log_num_heads")


@dataclass(frozen=True)
class SkipFeatures:
    """What the skip model sees of one attention call, averaged over heads (and batch)."""

    num_q_blocks: int
    num_kv_blocks: int
    seq_len_tokens: int
    density: float
    nnz_mean: float
    nnz_cv: float
    adjacent_jaccard: float
    wave_working_set_bytes: float
    working_set_over_l2: float
    num_heads: int = 1  # heads x batch: the (MB, NB) masks one call runs

    def model_inputs(self) -> list[float]:
        """The feature vector ``MODEL_FEATURES`` (logs floored to stay finite)."""
        tiny = 1e-9
        return [math.log(max(self.num_q_blocks, 1)), math.log(max(self.density, tiny)), self.nnz_cv,
                self.adjacent_jaccard, math.log(max(self.working_set_over_l2, tiny)),
                math.log(max(self.num_heads, 1))]

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def _sizes(wave_size: Any, block_size: Any, head_dim: Any, dtype_bytes: Any) -> tuple[int, int, int, int]:
    """The four sizes as positive integers (``check_int``: 3.9, True and "132" are refused, not truncated)."""
    return tuple(check_int(name, value, lo=1) for name, value in (  # type: ignore[return-value]
        ("wave_size", wave_size), ("block_size", block_size), ("head_dim", head_dim), ("dtype_bytes", dtype_bytes)))


def wave_working_set_bytes(mask: MaskLike, wave_size: int, block_size: int = 128, head_dim: int = 128,
                           dtype_bytes: int = 2) -> float:
    """The mean, over waves of ``wave_size`` consecutive rows of one head, of the union of their K/V blocks in
    bytes (K and V, ``block_size x head_dim`` each): what one wave keeps live in L2, in the mask's row order. A wave
    of more rows than the mask has is one wave of all of them."""
    wave_size, block_size, head_dim, dtype_bytes = _sizes(wave_size, block_size, head_dim, dtype_bytes)
    dense = as_dense(mask)
    rows = dense.reshape(-1, *dense.shape[-2:])
    g, mb, nb = rows.shape
    wave = min(wave_size, mb)  # the padding below is under a wave: never more than the mask itself
    pad = (-mb) % wave
    padded = torch.cat([rows, rows.new_zeros(g, pad, nb)], dim=1) if pad else rows
    union_blocks = padded.reshape(g, -1, wave, nb).any(2).sum(-1, dtype=torch.float32).mean()
    return float(union_blocks) * 2 * block_size * head_dim * dtype_bytes


def features(mask: MaskLike, hardware: str | hw_registry.Hardware, block_size: int = 128,
             head_dim: int = 128, wave_size: int | None = None, dtype_bytes: int = 2) -> SkipFeatures:
    """Compute the skip features of a (H, MB, NB) or (B, H, MB, NB) mask on its own device.

    The working set is ``wave_working_set_bytes`` divided by the L2 size. ``wave_size`` is the backend's wave
    (``wavealign.kernels.get(backend).wave_size(hardware)``); None takes one CTA per SM.
    """
    hw = hw_registry.get(hardware)
    wave, block_size, head_dim, dtype_bytes = _sizes(hw.sm_count if wave_size is None else wave_size, block_size,
                                                     head_dim, dtype_bytes)
    dense = as_dense(mask)
    rows = dense.reshape(-1, *dense.shape[-2:])
    g, mb, nb = rows.shape
    nnz = row_nnz(rows).float()
    nnz_mean = float(nnz.mean())
    nnz_cv = float(nnz.std(correction=0) / nnz.mean()) if nnz_mean > 0 else 0.0
    if mb > 1:
        inter = (rows[:, 1:] & rows[:, :-1]).sum(-1, dtype=torch.float32)
        union = (rows[:, 1:] | rows[:, :-1]).sum(-1, dtype=torch.float32)
        # two empty rows are identical: overlap 1
        jaccard = float(torch.where(union > 0, inter / union.clamp_min(1), torch.ones_like(union)).mean())
    else:
        jaccard = 1.0
    working_set = wave_working_set_bytes(rows, wave, block_size, head_dim, dtype_bytes)
    return SkipFeatures(
        num_q_blocks=mb, num_kv_blocks=nb, seq_len_tokens=mb * block_size,
        density=float(nnz_mean / nb), nnz_mean=nnz_mean, nnz_cv=nnz_cv, adjacent_jaccard=jaccard,
        wave_working_set_bytes=working_set, working_set_over_l2=working_set / hw.l2_bytes, num_heads=g,
    )
