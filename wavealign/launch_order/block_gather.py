"""Whole query blocks moved into launch order and back, for backends that apply a WaveAlign order from
outside their kernel (flex, fa4).

Q is gathered into a buffer of whole blocks (MB x block_size rows; a ragged last block is zero-padded where
it lands, so it cannot shift the blocks after it) and the output is scattered back and trimmed to N rows.
On CUDA one Triton kernel copies each block once, reading and writing every byte a single time; elsewhere
torch gathers views of whole blocks. Both are plain copies, so the values are bitwise those of the input.
"""

from __future__ import annotations

from typing import Protocol

import torch
import torch.nn.functional as F

from wavealign.blockmask import check_int


class BlockOrder(Protocol):
    """What a copy reads of a ``launch_order.RowOrder`` (checked there; ``reorder`` builds on this module)."""

    perm: torch.Tensor  # (H, MB) or (B, H, MB): launch slot -> original block

    @property
    def num_q_blocks(self) -> int: ...


try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only installs
    triton = None

if triton is not None:

    @triton.jit
    def _copy_blocks_kernel(src, dst, perm, H, MB, N_SRC, N_DST, D,
                            s_b, s_h, s_n, d_b, d_h, d_n, p_b,
                            GATHER: tl.constexpr, BLOCK: tl.constexpr, BLOCK_D: tl.constexpr):
        """Copy block ``perm[b, h, slot]`` of ``src`` to block ``slot`` of ``dst`` (GATHER), or back."""
        slot, bh = tl.program_id(0), tl.program_id(1)
        b, h = bh // H, bh % H
        block = tl.load(perm + b * p_b + h * MB + slot)
        if GATHER:
            src_block, dst_block = block, slot
        else:
            src_block, dst_block = slot, block
        rows, cols = tl.arange(0, BLOCK), tl.arange(0, BLOCK_D)
        src_rows = src_block.to(tl.int64) * BLOCK + rows
        dst_rows = dst_block.to(tl.int64) * BLOCK + rows
        col_ok = cols[None, :] < D
        x = tl.load(src + b.to(tl.int64) * s_b + h.to(tl.int64) * s_h + src_rows[:, None] * s_n + cols[None, :],
                    mask=(src_rows[:, None] < N_SRC) & col_ok, other=0)
        tl.store(dst + b.to(tl.int64) * d_b + h.to(tl.int64) * d_h + dst_rows[:, None] * d_n + cols[None, :], x,
                 mask=(dst_rows[:, None] < N_DST) & col_ok)


def check_rows(x: torch.Tensor, order: BlockOrder, block_size: int, name: str) -> int:
    """``x`` must be a non-empty (B, H, N, D) tensor whose N tokens make the query blocks ``order`` covers;
    returns ``block_size`` as the int it must be."""
    block_size = check_int("block_size", block_size, lo=1)
    if not isinstance(x, torch.Tensor) or x.dim() != 4:
        raise ValueError(f"{name} must be a (B, H, N, D) tensor, got "
                         f"{tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}")
    if x.numel() == 0:
        raise ValueError(f"{name} must not be empty, got shape {tuple(x.shape)}")
    mb = -(-x.shape[2] // block_size)
    if mb != order.num_q_blocks:
        raise ValueError(
            f"{name} has N={x.shape[2]} tokens = {mb} blocks of block_size={block_size}, but the order "
            f"covers MB={order.num_q_blocks} query blocks")
    heads = order.perm.shape[-2]
    if x.shape[1] != heads:
        raise ValueError(f"{name} has H={x.shape[1]} heads, but the order has {heads}")
    if order.perm.dim() == 3 and order.perm.shape[0] != x.shape[0]:
        raise ValueError(f"{name} has B={x.shape[0]}, but the order is batched with B={order.perm.shape[0]}")
    return block_size


def _check(x: torch.Tensor, order: BlockOrder, block_size: int, name: str) -> int:
    block_size = check_rows(x, order, block_size, name)
    if x.stride(-1) != 1:  # the Triton copy reads rows of D contiguous elements
        raise ValueError(f"{name} must have unit stride along D, got strides {x.stride()}")
    return block_size


def copy_blocks_triton(src: torch.Tensor, dst: torch.Tensor, order: BlockOrder, block_size: int,
                       gather: bool) -> torch.Tensor:
    """The Triton copy: block ``perm[slot]`` of ``src`` to block ``slot`` of ``dst`` (``gather``), or back."""
    perm = order.perm.to(src.device).contiguous()
    batch, heads, _, d = src.shape
    _copy_blocks_kernel[(order.num_q_blocks, batch * heads)](
        src, dst, perm, heads, order.num_q_blocks, src.shape[2], dst.shape[2], d,
        src.stride(0), src.stride(1), src.stride(2), dst.stride(0), dst.stride(1), dst.stride(2),
        perm.stride(0) if perm.dim() == 3 else 0,
        GATHER=gather, BLOCK=block_size, BLOCK_D=triton.next_power_of_2(d))
    return dst


def copy_blocks_torch(src: torch.Tensor, dst: torch.Tensor, order: BlockOrder, block_size: int,
                      gather: bool) -> torch.Tensor:
    """The same copy with torch ops on views of whole blocks (any device)."""
    batch, heads, _, d = src.shape
    mb = order.num_q_blocks
    index = order.perm.to(src.device).expand(batch, heads, mb)[..., None, None].expand(batch, heads, mb,
                                                                                        block_size, d)
    whole = F.pad(src, (0, 0, 0, mb * block_size - src.shape[2])).view(batch, heads, mb, block_size, d)
    moved = torch.gather(whole, 2, index) if gather else whole.new_empty(whole.shape).scatter_(2, index, whole)
    return dst.copy_(moved.view(batch, heads, mb * block_size, d)[:, :, :dst.shape[2]])


def _copy(src: torch.Tensor, dst: torch.Tensor, order: BlockOrder, block_size: int, gather: bool) -> torch.Tensor:
    # the Triton tile is one block of rows: a power of two (16 and up, as every backend's block is)
    fast = src.is_cuda and triton is not None and block_size >= 16 and block_size & (block_size - 1) == 0
    copy = copy_blocks_triton if fast else copy_blocks_torch
    return copy(src, dst, order, block_size, gather)


def gather_blocks(x: torch.Tensor, order: BlockOrder, block_size: int = 128) -> torch.Tensor:
    """``x`` (B, H, N, D) with its query blocks in launch order: (B, H, MB * block_size, D), zero-padded."""
    block_size = _check(x, order, block_size, "x")
    b, h, _, d = x.shape
    return _copy(x, x.new_empty(b, h, order.num_q_blocks * block_size, d), order, block_size, gather=True)


def scatter_blocks(y: torch.Tensor, order: BlockOrder, block_size: int, seq_len: int) -> torch.Tensor:
    """Undo ``gather_blocks`` on an output (B, H, MB * block_size, D) in launch order: (B, H, seq_len, D)."""
    block_size = _check(y, order, block_size, "y")
    seq_len = check_int("seq_len", seq_len, lo=1)
    if y.shape[2] != order.num_q_blocks * block_size:
        raise ValueError(f"y has {y.shape[2]} rows, but the order's {order.num_q_blocks} blocks of {block_size} "
                         f"make {order.num_q_blocks * block_size}")
    if -(-seq_len // block_size) != order.num_q_blocks:
        raise ValueError(f"seq_len={seq_len} makes {-(-seq_len // block_size)} blocks of {block_size}, but the "
                         f"order covers MB={order.num_q_blocks}")
    b, h, _, d = y.shape
    return _copy(y, y.new_empty(b, h, seq_len, d), order, block_size, gather=False)
