"""Backend ``flex``: torch FlexAttention on a BlockMask built straight from the kv-index form (the baseline).

Every selected block is passed as a *full* block, so no mask_mod runs. WaveAlign is applied from outside
the kernel, as a library user would: gather the query blocks and the mask rows into launch order, run,
and scatter the output back (``block_gather.gather_blocks`` / ``launch_order.permute_mask`` /
``block_gather.scatter_blocks``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import torch

from wavealign import blockmask, launch_order
from wavealign.kernels import Backend, ExecutionFacts, LaunchShape, register
from wavealign.launch_order import block_gather


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


def permuted_kv_form(mask: blockmask.MaskLike, order: launch_order.RowOrder) -> tuple[torch.Tensor, torch.Tensor]:
    """The mask's rows in launch order, in kv-index form."""
    rows = launch_order.permute_mask(mask, order)
    return rows if isinstance(rows, tuple) else blockmask.to_kv_indices(rows)


@dataclass(frozen=True)
class FlexLaunch:
    """A FlexAttention ``BlockMask`` of the mask's rows in launch order; ``run`` gathers Q's blocks into that
    order, runs the compiled kernel and scatters the output back."""

    shape: LaunchShape
    block_mask: Any
    order: launch_order.RowOrder | None
    kernel_options: dict[str, Any]

    def run(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        self.shape.check_qkv(q, k, v)
        flex = _compiled_flex()
        options = self.kernel_options or None
        if self.order is None:
            return flex(q, k, v, block_mask=self.block_mask, kernel_options=options)
        # Q goes in as whole blocks, so a ragged last block cannot shift the blocks gathered after it
        q_blocks = block_gather.gather_blocks(q, self.order, self.shape.block_size)
        out = flex(q_blocks, k, v, block_mask=self.block_mask, kernel_options=options)
        return block_gather.scatter_blocks(out, self.order, self.shape.block_size, self.shape.q_len)


def plan(mask: blockmask.MaskLike, order: launch_order.RowOrder | None, shape: LaunchShape,
         **kernel_options: Any) -> FlexLaunch:
    """The launch's ``BlockMask`` (rows permuted into ``order``); ``kernel_options`` go to FlexAttention
    unchanged (e.g. ``BLOCK_M``, ``BLOCK_N``, ``num_warps``)."""
    if order is None:
        kv_num, kv_idx = (blockmask.kv_pair(mask) if isinstance(mask, tuple)
                          else blockmask.to_kv_indices(blockmask.check_mask(mask)))
        q_len = shape.q_len
    else:
        kv_num, kv_idx = permuted_kv_form(mask, order)
        q_len = shape.q_blocks * shape.block_size  # the gathered Q is whole blocks
    if tuple(kv_num.shape[-2:]) != (shape.heads, shape.q_blocks):
        raise ValueError(f"mask covers {tuple(kv_num.shape)} query blocks; the planned q needs "
                         f"(H, MB) = {(shape.heads, shape.q_blocks)}")
    bm = block_mask(kv_num.to(shape.device), kv_idx.to(shape.device), shape.block_size, q_len, shape.kv_len)
    return FlexLaunch(shape, bm, order, dict(kernel_options))


register(Backend(
    name="flex",
    plan=plan,
    description="torch FlexAttention (compiled Triton) with full-block BlockMask; WaveAlign by gather/scatter",
    # ncu on the H200: 169-198 regs -> 1 CTA/SM (benchmarks/results/kernels-h200/TUNING.md)
    ctas_per_sm={"h100": 1, "h200": 1, "a100": 1, "b200": 1, "a40": 1},
    execution=ExecutionFacts(128, 128, mma_efficiency=0.55, block_overhead_s=40e-9),
    ncu_kernels=r"flex_attention",
    is_available=torch.cuda.is_available,
))
