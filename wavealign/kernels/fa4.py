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

On Blackwell FA4 runs two 128-row Q tiles per CTA (``q_stage = 2``), so there the sparse query block must be a
multiple of 256 (4.0.0b36 ``flash_attn/cute/block_sparsity.py``, ``infer_block_sparse_expected_shapes``; upstream
issue Dao-AILab/flash-attention#2727), and its non-causal forward runs the ``StaticPersistentTileScheduler``
(``flash_attn/cute/tile_scheduler.py``: one CTA per SM, each taking tiles CTA, CTA + grid, ...; tiles numbered query
block fastest, then head). Those are the facts the simulator models on b200 (``execution_by_hardware``,
``wavealign.sim.tiling``); this launch path passes a 128-row mask as it is, which FA4 refuses on SM100.
Compiled kernels are cached in-process per configuration; across processes set
``FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=1`` (and ``FLASH_ATTENTION_CUTE_DSL_CACHE_DIR``) before import.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from wavealign import blockmask, launch_order
from wavealign.kernels import Backend, ExecutionFacts, LaunchShape, register
from wavealign.kernels.sparse_formats import (
    BlockLists,
    KernelRequirement,
    full_block_lists,
    permute_block_lists,
)
from wavealign.launch_order import block_gather

FA4_VERSION = "4.0.0b36"
REQUIREMENT = KernelRequirement(backend="fa4", distribution="flash-attn-4", version=FA4_VERSION,
                                min_capability=(9, 0), extra="fa4")

def _flash_attn():
    """FA4's entry point and block-sparse container, after checking GPU, package and version."""
    REQUIREMENT.check()
    from flash_attn.cute import flash_attn_func
    from flash_attn.cute.block_sparsity import BlockSparseTensorsTorch

    return flash_attn_func, BlockSparseTensorsTorch


def launch_lists(mask: blockmask.MaskLike, order: launch_order.RowOrder | None, batch: int = 1) -> BlockLists:
    """The full-block lists FA4 runs, (``batch``, H, MB[, K]) on the mask's device: the mask's rows, in
    ``order``'s launch order when one is given."""
    lists = full_block_lists(blockmask.as_dense(mask))
    if order is not None:
        lists = permute_block_lists(lists, order)
    # one list per batch element, laid out plainly rather than broadcast with a zero stride
    count, index = lists
    return BlockLists(count.expand(batch, *count.shape[1:]).contiguous(),
                      index.expand(batch, *index.shape[1:]).contiguous())


@dataclass(frozen=True)
class FA4Launch:
    """FA4's block-sparse tensors for the mask's rows in launch order; ``run`` gathers Q's blocks into that
    order, runs FA4 and scatters the output back."""

    shape: LaunchShape
    sparse: Any  # flash_attn.cute.block_sparsity.BlockSparseTensorsTorch
    order: launch_order.RowOrder | None

    def run(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        self.shape.check_qkv(q, k, v)
        flash_attn_func, _ = _flash_attn()
        if self.order is not None:
            q = block_gather.gather_blocks(q, self.order, self.shape.block_size)
        out, _ = flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                 block_sparse_tensors=self.sparse)
        out = out.transpose(1, 2)
        if self.order is None:
            return out
        return block_gather.scatter_blocks(out, self.order, self.shape.block_size, self.shape.q_len)


def plan(mask: blockmask.MaskLike, order: launch_order.RowOrder | None, shape: LaunchShape) -> FA4Launch:
    """Block-sparse attention through FA4; rows with no block give zeros, a ragged last block is allowed."""
    _, BlockSparseTensorsTorch = _flash_attn()
    dense = blockmask.as_dense(mask).to(shape.device)
    expected = (shape.heads, shape.q_blocks, shape.kv_blocks)
    if tuple(dense.shape[-3:]) != expected or (dense.dim() == 4 and dense.shape[0] not in (1, shape.batch)):
        raise ValueError(f"mask has shape {tuple(dense.shape)}, but the planned q/k need (B, H, MB, NB) = "
                         f"{(shape.batch, *expected)}")
    count, index = launch_lists(dense, order, shape.batch)
    sparse = BlockSparseTensorsTorch(mask_block_cnt=torch.zeros_like(count), mask_block_idx=index,
                                     full_block_cnt=count, full_block_idx=index,
                                     block_size=(shape.block_size, shape.block_size))
    return FA4Launch(shape, sparse, order)


# The SM90 kernel's speed, fitted to the H200 (table1-fa4-h200: ten timed cells, original and WaveAlign, five masks at
# 363,600 tokens x 40 heads, against the simulator's makespans and HBM bytes of the same cells): 67.6% of the bf16 peak
# in the inner loop, and 21% of the HBM time left exposed beside it; held out one mask at a time, time within 1.0% and
# speedup within 0.02 (benchmarks/results/beyond-sim/fit_fa4_time.py)
SM90_EXECUTION = ExecutionFacts(128, 128, mma_efficiency=0.676, block_overhead_s=20e-9, kv_walk="reverse",
                                exposed_memory_fraction=0.21)
# SM100: two Q tiles per CTA against each K/V tile, the static persistent scheduler, the same reverse K/V walk
# (block_sparse_utils.py, load_block_list_sm100); the inner loop at FA4's published dense rate on the B200 (1613 of
# 2250 TFLOP/s, FlashAttention-4 paper, arXiv 2603.05451), the exposed HBM share assumed the H200's (not measured)
SM100_EXECUTION = ExecutionFacts(128, 128, mma_efficiency=0.71, block_overhead_s=20e-9, kv_walk="reverse",
                                 q_stage=2, scheduler="static-persistent", exposed_memory_fraction=0.21)

register(Backend(
    name="fa4",
    plan=plan,
    description=f"FlashAttention-4 (flash-attn-4=={FA4_VERSION}, CuTe DSL) block-sparse forward, full blocks only; "
                "WaveAlign by gather/scatter",
    # ncu on the H200: 168 regs -> 1 CTA/SM (benchmarks/results/fa4-flashinfer/h200-ncu-364k); the paper's
    # Sec. V for the H100 (128x128 tiles, wave 132)
    ctas_per_sm={"h100": 1, "h200": 1, "b200": 1},
    execution=SM90_EXECUTION,
    execution_by_hardware={"b200": SM100_EXECUTION},
    ncu_kernels=r"FlashAttentionForward|flash_fwd",
    is_available=REQUIREMENT.is_met,
))
