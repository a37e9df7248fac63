"""Backend ``flex``: torch FlexAttention on a BlockMask built straight from the kv-index form (the baseline).

Every selected block is passed as a *full* block, so no mask_mod runs. WaveAlign is applied from outside
the kernel, as a library user would: gather the query blocks and the mask rows into launch order, run,
and scatter the output back (``block_gather.gather_blocks`` / ``reorder.permute_mask`` /
``block_gather.scatter_blocks``).
"""

from __future__ import annotations

import functools

import torch

from wavealign import block_gather, blockmask, reorder
from wavealign.kernels import Backend, register


@functools.cache
def _compiled_flex():
    # FlexAttention only runs its fused Triton kernel when compiled. Each sequence length is its own static
    # compile; past dynamo's default limit of 8 it would fall back to the eager path, which materialises
    # the full score matrix, so raise the limit.
    import torch._dynamo
    from torch.nn.attention.flex_attention import flex_attention

    for name in ("recompile_limit", "accumulated_recompile_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, max(getattr(torch._dynamo.config, name), 256))
    return torch.compile(flex_attention, dynamic=False)


def block_mask(kv_num_blocks: torch.Tensor, kv_indices: torch.Tensor, block_size: int, q_len: int, kv_len: int):
    """A FlexAttention ``BlockMask`` whose selected blocks are all full blocks (no mask_mod)."""
    from torch.nn.attention.flex_attention import BlockMask

    if kv_num_blocks.dim() == 2:  # (H, MB): one mask for the whole batch
        kv_num_blocks, kv_indices = kv_num_blocks.unsqueeze(0), kv_indices.unsqueeze(0)
    kv_num_blocks = kv_num_blocks.to(torch.int32).contiguous()
    kv_indices = kv_indices.to(torch.int32).contiguous()
    return BlockMask.from_kv_blocks(
        torch.zeros_like(kv_num_blocks), torch.zeros_like(kv_indices),
        full_kv_num_blocks=kv_num_blocks, full_kv_indices=kv_indices,
        BLOCK_SIZE=block_size, mask_mod=None, seq_lengths=(q_len, kv_len), compute_q_blocks=False)


def permuted_kv_form(mask: blockmask.MaskLike, order: reorder.RowOrder) -> tuple[torch.Tensor, torch.Tensor]:
    """The mask's rows in launch order, in kv-index form."""
    rows = reorder.permute_mask(mask, order)
    return rows if isinstance(rows, tuple) else blockmask.to_kv_indices(rows)


def flex_block_sparse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask, order=None, block_size: int = 128,
                      **kernel_options) -> torch.Tensor:
    """Block-sparse attention through FlexAttention; ``order`` is applied by gathering Q and mask rows.

    ``kernel_options`` go to FlexAttention unchanged (e.g. ``BLOCK_M``, ``BLOCK_N``, ``num_warps``).
    """
    if q.dim() != 4 or k.shape != v.shape or q.shape[:2] != k.shape[:2]:
        raise ValueError(f"q, k, v must be (B, H, N, D) sharing B and H, got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    n_q, n_kv = q.shape[2], k.shape[2]
    flex = _compiled_flex()
    if order is None:
        kv_num, kv_idx = mask if isinstance(mask, tuple) else blockmask.to_kv_indices(blockmask.check_mask(mask))
        bm = block_mask(kv_num.to(q.device), kv_idx.to(q.device), block_size, n_q, n_kv)
        return flex(q, k, v, block_mask=bm, kernel_options=kernel_options or None)
    # Q goes in as whole blocks, so a ragged last block cannot shift the blocks gathered after it
    q_blocks = block_gather.gather_blocks(q, order, block_size)
    kv_num, kv_idx = permuted_kv_form(mask, order)
    bm = block_mask(kv_num.to(q.device), kv_idx.to(q.device), block_size, q_blocks.shape[2], n_kv)
    out = flex(q_blocks, k, v, block_mask=bm, kernel_options=kernel_options or None)
    return block_gather.scatter_blocks(out, order, block_size, n_q)


register(Backend(
    name="flex",
    run=flex_block_sparse,
    description="torch FlexAttention (compiled Triton) with full-block BlockMask; WaveAlign by gather/scatter",
    is_available=torch.cuda.is_available,
))
