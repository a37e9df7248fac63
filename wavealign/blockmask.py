"""Block-mask formats and their checks: the dense bool form (…, MB, NB) and the kv-index form.

The kv-index form is what kernels consume: ``kv_num_blocks`` (…, MB) int32 counts and ``kv_indices``
(…, MB, NB) int32 with each row's selected kv blocks first, ascending, the tail unspecified. The width of
``kv_indices`` is read as NB, so lists trimmed to the longest row must come with ``num_kv_blocks``.
"""

from __future__ import annotations

import operator
import os
from typing import Any

import torch

from wavealign import nvrtc
from wavealign.records import MAX_SEED as MAX_SEED

KVIndices = tuple[torch.Tensor, torch.Tensor]
MaskLike = torch.Tensor | KVIndices
# the row counts on a CUDA GPU: one warp per row, 8 warps (256 threads) per block
ROW_NNZ = nvrtc.Program((nvrtc.MASK_BYTES,), ("row_nnz",))
ROW_NNZ_THREADS = 256


def check_int(name: str, value: Any, lo: int | None = None, hi: int | None = None) -> int:
    """``value`` as an int in [lo, hi], through ``operator.index``: 16 and numpy ints pass; 16.0, 1.5, "16" and
    True do not (``int()`` would truncate a float or parse a string, silently)."""
    try:
        index = None if isinstance(value, bool) else operator.index(value)
    except TypeError:
        index = None
    if index is None:
        raise ValueError(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
    if (lo is not None and index < lo) or (hi is not None and index > hi):
        expected = " and ".join(([f">= {lo}"] if lo is not None else []) + ([f"<= {hi}"] if hi is not None else []))
        raise ValueError(f"{name} must be {expected}, got {index}")
    return index


def memory_bytes(device: torch.device | str = "cpu") -> int:
    """What one allocation on ``device`` can at most hold: the GPU's total memory, or the host's physical memory."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_fits(name: str, nbytes: int, device: torch.device | str = "cpu") -> int:
    """``nbytes`` (what ``name`` would allocate) must fit in ``device``'s memory, checked before allocating:
    a size the machine cannot hold is a ValueError naming it, not minutes of swapping or an out-of-memory kill."""
    limit = memory_bytes(device)
    if nbytes > limit:
        raise ValueError(f"{name} needs {nbytes / 2**30:,.1f} GiB, more than the {limit / 2**30:,.1f} GiB "
                         f"{torch.device(device).type} memory of this machine")
    return nbytes


def check_seed(name: str, value: Any) -> int:
    """A seed must be an integer in [0, ``MAX_SEED``]."""
    return check_int(name, value, lo=0, hi=MAX_SEED)


def check_mask(mask: torch.Tensor, name: str = "mask") -> torch.Tensor:
    """Validate a dense block mask: bool, 3-D (H, MB, NB) or 4-D (B, H, MB, NB), non-empty."""
    if not isinstance(mask, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor of dtype bool, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise ValueError(f"{name} must have dtype torch.bool, got {mask.dtype}")
    if mask.dim() not in (3, 4):
        raise ValueError(f"{name} must be (H, MB, NB) or (B, H, MB, NB), got shape {tuple(mask.shape)}")
    if mask.numel() == 0:
        raise ValueError(f"{name} must not be empty, got shape {tuple(mask.shape)}")
    if mask.is_meta:
        raise ValueError(f"{name} is on the meta device (a shape without data); expected a mask on cpu or cuda")
    return mask


def check_kv_indices(kv_num_blocks: torch.Tensor, kv_indices: torch.Tensor) -> KVIndices:
    """A kv-index pair must be integer tensors, (…, MB) counts and (…, MB, K) lists: a float count would be
    truncated by every consumer, hence decoded wrongly."""
    for name, t in (("kv_num_blocks", kv_num_blocks), ("kv_indices", kv_indices)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be an integer torch.Tensor (int32 or int64), got {type(t).__name__}")
        if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
            raise ValueError(f"{name} must have an integer dtype (int32 or int64), got {t.dtype}")
    if kv_indices.dim() < 2 or kv_num_blocks.shape != kv_indices.shape[:-1]:
        raise ValueError(
            "kv_num_blocks must be (…, MB) and kv_indices (…, MB, K) with matching leading dims, got "
            f"{tuple(kv_num_blocks.shape)} and {tuple(kv_indices.shape)}")
    return kv_num_blocks, kv_indices


def kv_pair(mask: tuple, name: str = "mask") -> KVIndices:
    """The checked (kv_num_blocks, kv_indices) of a mask given in kv-index form."""
    if len(mask) != 2:
        raise ValueError(f"{name} as kv indices must be (kv_num_blocks, kv_indices), got {len(mask)} items")
    return check_kv_indices(*mask)


def from_kv_indices(kv_num_blocks: torch.Tensor, kv_indices: torch.Tensor,
                    num_kv_blocks: int | None = None) -> torch.Tensor:
    """The dense bool mask (…, MB, NB) of a kv-index pair; NB defaults to ``kv_indices.shape[-1]``."""
    check_kv_indices(kv_num_blocks, kv_indices)
    nb = check_int("num_kv_blocks", num_kv_blocks, lo=1) if num_kv_blocks is not None else kv_indices.shape[-1]
    k = kv_indices.shape[-1]
    if k and (int(kv_num_blocks.min()) < 0 or int(kv_num_blocks.max()) > k):
        raise ValueError(f"kv_num_blocks must lie in [0, {k}], got [{int(kv_num_blocks.min())}, "
                         f"{int(kv_num_blocks.max())}]")
    valid = torch.arange(k, device=kv_indices.device) < kv_num_blocks.unsqueeze(-1)
    idx = kv_indices.long()
    if valid.any() and (int(idx[valid].min()) < 0 or int(idx[valid].max()) >= nb):
        hint = ("" if num_kv_blocks is not None else f"; NB is read as kv_indices' width {k}: lists trimmed to the "
                "longest row need num_kv_blocks, or pass the dense mask")
        raise ValueError(f"kv_indices must lie in [0, {nb}) where selected, got [{int(idx[valid].min())}, "
                         f"{int(idx[valid].max())}]{hint}")
    # unselected slots scatter into a spare column nb, dropped afterwards
    mask = torch.zeros(*kv_indices.shape[:-1], nb + 1, dtype=torch.bool, device=kv_indices.device)
    mask.scatter_(-1, torch.where(valid, idx, nb), True)
    return mask[..., :nb]


def to_kv_indices(mask: torch.Tensor) -> KVIndices:
    """The kv-index form of a dense bool mask: counts (…, MB) and ascending indices (…, MB, NB), int32."""
    if mask.dtype != torch.bool:
        raise ValueError(f"mask must have dtype torch.bool, got {mask.dtype}")
    kv_num_blocks = row_nnz(mask)
    # a stable sort of "not selected" puts the selected columns first, in ascending order
    kv_indices = torch.argsort((~mask).to(torch.int8), dim=-1, stable=True).to(torch.int32)
    return kv_num_blocks, kv_indices


def row_nnz(mask: torch.Tensor) -> torch.Tensor:
    """Selected blocks per row, int32 (…, MB), of a bool (…, MB, NB) mask: on a CUDA GPU one read of the mask by the
    kernel of ``mask_bytes.cu`` (``torch``'s sums widen every entry first, to 4-8 times the mask's bytes)."""
    if not (mask.numel() and nvrtc.usable(mask)):
        return mask.sum(-1, dtype=torch.int32)
    flat = mask.contiguous().view(torch.uint8).reshape(-1, mask.shape[-1])
    nnz = torch.empty(flat.shape[0], dtype=torch.int32, device=mask.device)
    ROW_NNZ.launch("row_nnz", mask.device, -(-flat.shape[0] // (ROW_NNZ_THREADS // 32)), ROW_NNZ_THREADS, flat, nnz,
                   flat.shape[0], flat.shape[1])
    return nnz.reshape(mask.shape[:-1])


def as_dense(mask: MaskLike, name: str = "mask") -> torch.Tensor:
    """Accept either form and return the checked dense bool mask."""
    if isinstance(mask, tuple):
        return check_mask(from_kv_indices(*kv_pair(mask, name)), name)
    return check_mask(mask, name)


def density(mask: torch.Tensor) -> float:
    """Fraction of selected (query-block, kv-block) pairs."""
    return float(mask.float().mean())
