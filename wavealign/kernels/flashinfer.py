"""Backend ``flashinfer``: FlashInfer's block-sparse prefill (flashinfer-python, FA2 kernels, JIT-built).

Written against flashinfer-python==0.7.2.post1 (pinned and checked). FlashInfer's block-sparse wrappers
plan onto its paged prefill: a query block row is a request and a K/V block a page. This backend plans
that directly with ``BatchPrefillWithPagedKVCacheWrapper(backend="fa2")``, one request per (head, query
block), because the wrappers cannot express what our masks need at scale:
- ``BlockSparseAttentionWrapper`` shares one pattern across heads and sets every last page to a full
  block, so a ragged last K/V block would read past the sequence;
- ``VariableBlockSparseAttentionWrapper`` has a pattern per head but lists K/V *tokens* (page size 1),
  about 2 GB of indices per head at 364K tokens and ρ = 0.25.
``backend="fa2"`` is forced: the fa3 path re-sorts requests by length, undoing any row order.

Head orders (the paper's A40 study): ``native`` is one launch over all heads, in FlashInfer's own
order (its work list runs head after head, waves straddling head boundaries); ``sequential`` is one
launch per head, so only that head's K/V competes for L2. WaveAlign permutes each head's requests and
gathers Q's blocks into that order (``block_gather``, whole blocks), then scatters O back.

``plan`` does the host-side scheduling and loads the JIT-built kernel: nvcc compiles it on first use
(about 24 s), into ``$FLASHINFER_WORKSPACE_BASE/.cache/flashinfer`` ($HOME by default), reused by later
processes; within a process the loaded module is cached. Time the first call apart from kernel time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from wavealign import blockmask, launch_order
from wavealign.kernels import Backend, ExecutionFacts, LaunchShape, register
from wavealign.kernels.sparse_formats import (
    KernelRequirement,
    LastBuilt,
    PagedBSR,
    paged_bsr,
    permute_paged_bsr,
    split_heads,
)
from wavealign.launch_order import block_gather

FLASHINFER_VERSION = "0.7.2.post1"
REQUIREMENT = KernelRequirement(backend="flashinfer", distribution="flashinfer-python", version=FLASHINFER_VERSION,
                                min_capability=(8, 0), extra="flashinfer")
HEAD_ORDERS = ("native", "sequential")
# FlashInfer's recommended float workspace (split-KV partial outputs); one buffer serves a plan's launches,
# which run one after another on one stream
WORKSPACE_BYTES = 128 << 20

# the wrapper's own int workspace; its schedule needs 5 int32 per work item (one per request without split-KV)
DEFAULT_INT_WORKSPACE_BYTES = 8 << 20

@dataclass
class FlashInferLaunch:
    """Planned launches for one mask, order and shape: plan once, then ``run`` many times."""

    wrappers: list[Any]  # BatchPrefillWithPagedKVCacheWrapper, one per launch
    order: launch_order.RowOrder | None
    shape: LaunchShape
    workspace: torch.Tensor = field(repr=False)
    # K/V as pages, made once per (k, v) tensors: a ragged tail is padded, a copy a caller with paged K/V avoids
    pages: LastBuilt = field(default_factory=LastBuilt, repr=False)

    def run(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Attention of q (B, H, N, D) against k/v in the planned order; the output in the original order."""
        self.shape.check_qkv(q, k, v)
        batch, heads, n_q, d = q.shape
        bs = self.shape.block_size
        if self.order is not None:
            q = block_gather.gather_blocks(q, self.order, bs)  # whole blocks, as planned
        rows = q.shape[2]
        q_tokens = q.reshape(batch * heads * rows, 1, d)
        k_pages, v_pages = self.pages.get((k, v), (bs,), lambda: (_pages(k, bs), _pages(v, bs)))
        out = torch.empty_like(q_tokens)
        if len(self.wrappers) == 1:
            self.wrappers[0].run(q_tokens, (k_pages, v_pages), out=out)
        else:
            pages = k_pages.shape[0] // len(self.wrappers)
            for g, wrapper in enumerate(self.wrappers):
                tokens, head_pages = slice(g * rows, (g + 1) * rows), slice(g * pages, (g + 1) * pages)
                wrapper.run(q_tokens[tokens], (k_pages[head_pages], v_pages[head_pages]), out=out[tokens])
        out = out.reshape(batch, heads, rows, d)
        return out if self.order is None else block_gather.scatter_blocks(out, self.order, bs, n_q)


def _pages(x: torch.Tensor, block_size: int) -> torch.Tensor:
    """K or V (B, H, N, D) as pages (B*H*NB, block_size, 1, D); a ragged tail is zero-padded, never read."""
    batch, heads, n, d = x.shape
    padded = -(-n // block_size) * block_size
    if padded != n:
        x = F.pad(x, (0, 0, 0, padded - n))
    return x.reshape(batch * heads * (padded // block_size), block_size, 1, d)


def _int_workspace_bytes(bsr: PagedBSR) -> int:
    """Room for the schedule of ``bsr``'s requests, with headroom for alignment and split-KV work items."""
    return 32 * bsr.num_requests + (1 << 20)


def _flashinfer():
    REQUIREMENT.check()
    import flashinfer

    return flashinfer


def _check_head_order(head_order: str) -> None:
    if head_order not in HEAD_ORDERS:
        raise ValueError(f"head_order must be one of {HEAD_ORDERS}, got {head_order!r}")


def check_options(options: Mapping[str, Any], block_size: int) -> None:
    """The sweep's check of this backend's one launch option, ``head_order``."""
    _check_head_order(options.get("head_order", "native"))


def launch_structures(mask: torch.Tensor, order: launch_order.RowOrder | None, block_size: int, q_len: int,
                      kv_len: int, head_order: str = "native") -> list[PagedBSR]:
    """The paged-BSR structure of each launch: one for ``native``, one per (batch, head) for ``sequential``;
    rows in ``order``'s launch order when one is given. ``mask`` is bool (B, H, MB, NB) or (H, MB, NB)."""
    _check_head_order(head_order)
    bsr = paged_bsr(mask, block_size, q_len, kv_len)
    if order is not None:
        bsr = permute_paged_bsr(bsr, order)
    return [bsr] if head_order == "native" else split_heads(bsr)


def plan(mask: blockmask.MaskLike, order: launch_order.RowOrder | None, shape: LaunchShape,
         head_order: str = "native") -> FlashInferLaunch:
    """Schedule the launches for this shape, mask and order (the first call also JIT-builds the kernel)."""
    _check_head_order(head_order)
    flashinfer = _flashinfer()
    dense = blockmask.as_dense(mask).to(shape.device)
    expected = (shape.heads, shape.q_blocks, shape.kv_blocks)
    if tuple(dense.shape[-3:]) != expected or (dense.dim() == 4 and dense.shape[0] not in (1, shape.batch)):
        raise ValueError(f"mask has shape {tuple(dense.shape)}, but the planned q/k need (B, H, MB, NB) = "
                         f"{(shape.batch, *expected)}")
    dense = dense.reshape(-1, *expected) if dense.dim() == 4 else dense.unsqueeze(0)
    dense = dense.expand(shape.batch, *expected)
    # with an order, Q runs as whole blocks (block_gather), so a ragged last block cannot shift the others
    q_len = shape.q_len if order is None else shape.q_blocks * shape.block_size
    structures = launch_structures(dense, order, shape.block_size, q_len, shape.kv_len, head_order)
    workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=shape.device)
    wrappers = []
    for bsr in structures:
        wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(workspace, kv_layout="NHD", backend="fa2")
        if _int_workspace_bytes(bsr) > DEFAULT_INT_WORKSPACE_BYTES:
            wrapper.reset_workspace_buffer(workspace, torch.empty(_int_workspace_bytes(bsr), dtype=torch.uint8,
                                                                  device=shape.device))
        # heads are laid end to end as requests, so the kernel sees one head; the default scale is 1/sqrt(D)
        wrapper.plan(bsr.qo_indptr, bsr.kv_indptr, bsr.kv_indices, bsr.kv_last_page_len,
                     num_qo_heads=1, num_kv_heads=1, head_dim_qk=shape.head_dim, page_size=shape.block_size,
                     causal=False, q_data_type=shape.dtype, kv_data_type=shape.dtype)
        wrappers.append(wrapper)
    return FlashInferLaunch(wrappers=wrappers, order=order, shape=shape, workspace=workspace)


register(Backend(
    name="flashinfer",
    plan=plan,
    description=f"FlashInfer (flashinfer-python=={FLASHINFER_VERSION}) paged block-sparse prefill, FA2 kernels, "
                "head_order native|sequential; WaveAlign by permuted requests and Q gather",
    # ncu on the H200: 255 regs -> 2 CTAs/SM (benchmarks/results/fa4-flashinfer/h200-ncu-364k); the paper's
    # Sec. V for the A40 (64x64 tiles, wave 168)
    # (the H100 has the same SM); 1 on the A100 (no measurement yet)
    ctas_per_sm={"a40": 2, "a100": 1, "h100": 2, "h200": 2},
    execution=ExecutionFacts(64, 64, mma_efficiency=0.6, block_overhead_s=20e-9),
    ncu_kernels=r"BatchPrefillWithPagedKVCache",
    is_available=REQUIREMENT.is_met,
    check_options=check_options,
))
