"""Backend ``fa4``: FlashAttention-4's block-sparse forward (flash-attn-4, CuTe DSL) on Hopper and Blackwell.

Written against flash-attn-4==4.0.0b36 (its API changes between betas, so the version is pinned and
checked). Q/K/V go in as (B, S, H, D) views of our (B, H, N, D) tensors; the mask goes in as
``BlockSparseTensorsTorch`` with every selected block in the *full* lists (``full_block_cnt`` /
``full_block_idx``), empty partial lists, and ``block_size=(block_size, block_size)`` stated explicitly.

Launch order: FA4's SM90 non-causal path uses ``SingleTileScheduler`` with grid (query block, head,
batch), so query blocks run fastest and heads one after another; a row walks its K/V list from the
last entry down (``kv_walk="reverse"``). WaveAlign is applied from outside, the reference way: gather
the query blocks (``block_gather``, whole blocks) and the mask rows into launch order, run, scatter the
output back.

On Blackwell FA4 runs two 128-row Q tiles per CTA, so there the query block must be a multiple of 256.
Compiled kernels are cached in-process per configuration; across processes set
``FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=1`` (and ``FLASH_ATTENTION_CUTE_DSL_CACHE_DIR``) before import.
"""

from __future__ import annotations

import torch

from wavealign import block_gather, blockmask, reorder
from wavealign.kernels import Backend, register
from wavealign.kernels.reference import check_qkv
from wavealign.kernels.sparse_formats import (
    BlockLists,
    KernelRequirement,
    LastBuilt,
    full_block_lists,
    mask_tensors,
    permute_block_lists,
)

FA4_VERSION = "4.0.0b36"
REQUIREMENT = KernelRequirement(backend="fa4", distribution="flash-attn-4", version=FA4_VERSION,
                                min_capability=(9, 0), extra="fa4")

_TENSORS = LastBuilt()  # the BlockSparseTensorsTorch of the last mask and order


def _flash_attn():
    """FA4's entry point and block-sparse container, after checking GPU, package and version."""
    REQUIREMENT.check()
    from flash_attn.cute import flash_attn_func
    from flash_attn.cute.block_sparsity import BlockSparseTensorsTorch

    return flash_attn_func, BlockSparseTensorsTorch


def launch_lists(mask: blockmask.MaskLike, order: reorder.RowOrder | None, batch: int = 1) -> BlockLists:
    """The full-block lists FA4 runs, (``batch``, H, MB[, K]) on the mask's device: the mask's rows, in
    ``order``'s launch order when one is given."""
    lists = full_block_lists(blockmask.as_dense(mask))
    if order is not None:
        lists = permute_block_lists(lists, order)
    # one list per batch element, laid out plainly rather than broadcast with a zero stride
    count, index = lists
    return BlockLists(count.expand(batch, *count.shape[1:]).contiguous(),
                      index.expand(batch, *index.shape[1:]).contiguous())


def fa4_block_sparse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: blockmask.MaskLike,
                     order: reorder.RowOrder | None = None, block_size: int = 128) -> torch.Tensor:
    """Block-sparse attention through FA4; rows with no block give zeros, a ragged last block is allowed.

    The inputs are checked and FA4's block-sparse tensors built only when ``mask``/``order`` or the shapes change (by
    identity or in-place edit), so timed repetitions measure the launch plus, with an order, the gather of Q
    and the scatter of O.
    """
    flash_attn_func, BlockSparseTensorsTorch = _flash_attn()

    def build():
        check_qkv(q, k, v, blockmask.as_dense(mask), block_size)
        count, index = launch_lists(_on_device(mask, q.device), order, q.shape[0])
        return BlockSparseTensorsTorch(mask_block_cnt=torch.zeros_like(count), mask_block_idx=index,
                                       full_block_cnt=count, full_block_idx=index,
                                       block_size=(block_size, block_size))

    perm = None if order is None else order.perm
    sparse = _TENSORS.get((*mask_tensors(mask), perm), (block_size, tuple(q.shape), tuple(k.shape), q.device),
                          build)
    n_q = q.shape[2]
    if order is not None:
        q = block_gather.gather_blocks(q, order, block_size)
    out, _ = flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                             block_sparse_tensors=sparse)
    out = out.transpose(1, 2)
    return out if order is None else block_gather.scatter_blocks(out, order, block_size, n_q)


def _on_device(mask: blockmask.MaskLike, device: torch.device) -> blockmask.MaskLike:
    return tuple(t.to(device) for t in mask) if isinstance(mask, tuple) else mask.to(device)


register(Backend(
    name="fa4",
    run=fa4_block_sparse,
    description=f"FlashAttention-4 (flash-attn-4=={FA4_VERSION}, CuTe DSL) block-sparse forward, full blocks only; "
                "WaveAlign by gather/scatter",
    is_available=REQUIREMENT.is_met,
    supported_hardware=("h100", "h200", "b200"),
    kv_walk="reverse",
))
