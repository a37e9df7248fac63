"""The exact block-sparse attention in plain torch: the ground truth every other backend is checked against.

Each query block is computed on its own (gathered K/V of its selected blocks, float32 softmax), as a whole
block of ``block_size`` rows (a ragged last one zero-padded, as a GPU kernel's fixed tile holds it), so its
result depends neither on which other blocks run beside it nor on where it lands: a reorder leaves the output
bitwise equal, also when N is not a multiple of the block.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from wavealign import launch_order
from wavealign.blockmask import MaskLike, as_dense, check_int
from wavealign.kernels import ALL_HARDWARE, Backend, ExecutionFacts, LaunchShape, check_qkv_tensors, register


def check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
              block_size: int) -> torch.Tensor:
    """Validate attention inputs against the block mask; return the mask as (B, H, MB, NB)."""
    check_qkv_tensors(q=q, k=k, v=v)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise ValueError(f"{name} must be a (B, H, N, D) tensor, got {tuple(t.shape)}")
        if t.numel() == 0:
            raise ValueError(f"{name} must not be empty, got shape {tuple(t.shape)}")
    if k.shape != v.shape or q.shape[:2] != k.shape[:2] or q.shape[3] != k.shape[3]:
        raise ValueError(f"q {tuple(q.shape)}, k {tuple(k.shape)} and v {tuple(v.shape)} must share B, H "
                         "and D, and k and v must have the same shape")
    block_size = check_int("block_size", block_size, lo=1)
    if mask.dim() == 3:
        mask = mask.unsqueeze(0)
    mb, nb = -(-q.shape[2] // block_size), -(-k.shape[2] // block_size)
    expected = (q.shape[0], q.shape[1], mb, nb)
    if mask.shape[1:] != expected[1:] or mask.shape[0] not in (1, q.shape[0]):
        raise ValueError(f"mask has shape {tuple(mask.shape)}, but q/k of shapes {tuple(q.shape)}/"
                         f"{tuple(k.shape)} with block_size={block_size} need (B, H, MB, NB) = {expected}")
    return mask.expand(*expected)


def _block(x: torch.Tensor, index: int, block_size: int) -> torch.Tensor:
    return x[..., index * block_size:(index + 1) * block_size, :]


def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: MaskLike,
                        order: launch_order.RowOrder | None = None, block_size: int = 128) -> torch.Tensor:
    """softmax(q k^T / sqrt(D)) v restricted to the selected blocks; rows with no block give zeros."""
    mask = check_qkv(q, k, v, as_dense(mask), block_size)
    batch, heads, mb, _ = mask.shape
    order = launch_order.check_launch_order(order, heads, mb)
    perm = (order.perm if order is not None else launch_order.RowOrder.identity(heads, mb).perm).to("cpu")
    scale = 1.0 / math.sqrt(q.shape[-1])
    seq_len = q.shape[2]
    q = torch.nn.functional.pad(q, (0, 0, 0, mb * block_size - seq_len))  # whole query blocks
    out = torch.zeros_like(q)
    selected = mask.to("cpu")
    for b in range(batch):
        head_perm = perm[b] if perm.dim() == 3 else perm
        for h in range(heads):
            for slot in range(mb):  # launch order; each block writes its own original position
                qb = int(head_perm[h, slot])
                kv = torch.nonzero(selected[b, h, qb]).flatten().tolist()
                if not kv:
                    continue
                keys = torch.cat([_block(k[b, h], j, block_size) for j in kv]).float()
                values = torch.cat([_block(v[b, h], j, block_size) for j in kv]).float()
                scores = (_block(q[b, h], qb, block_size).float() @ keys.T) * scale
                out[b, h, qb * block_size:(qb + 1) * block_size] = (
                    torch.softmax(scores, dim=-1) @ values).to(q.dtype)
    return out[:, :, :seq_len].contiguous()


@dataclass(frozen=True)
class ReferenceLaunch:
    """The dense mask and order, checked against the planned shape; ``run`` is ``reference_attention``."""

    mask: torch.Tensor
    order: launch_order.RowOrder | None
    shape: LaunchShape

    def run(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        self.shape.check_qkv(q, k, v)
        return reference_attention(q, k, v, self.mask, self.order, self.shape.block_size)


def plan(mask: MaskLike, order: launch_order.RowOrder | None, shape: LaunchShape) -> ReferenceLaunch:
    dense = as_dense(mask)
    expected = (shape.heads, shape.q_blocks, shape.kv_blocks)
    if tuple(dense.shape[-3:]) != expected:
        raise ValueError(f"mask has shape {tuple(dense.shape)}, but the planned q/k need (H, MB, NB) = {expected}")
    return ReferenceLaunch(dense, order, shape)


register(Backend(
    name="reference",
    plan=plan,
    description="exact block-sparse attention in plain torch, one query block at a time (CPU or GPU)",
    ctas_per_sm=ALL_HARDWARE,
    execution=ExecutionFacts(128, 128, mma_efficiency=0.5, block_overhead_s=40e-9),
    needs_gpu=False,
))
