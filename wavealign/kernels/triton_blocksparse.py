"""Backend ``triton``: the project's block-sparse FlashAttention forward, with WaveAlign inside the kernel.

Each program computes ``block_m`` query rows of one head against that query block's selected K/V blocks
(per-head ``(kv_num_blocks, kv_indices)``), with the online softmax of FlashAttention-2. The program in
launch slot ``p`` of head ``h`` computes query block ``order.perm[h, p]`` and reads Q / writes O at that
block's own position, so a row order costs no gather of Q and no scatter of O. Programs launch
query-blocks-fastest with heads one after another (``head_order="sequential"``, as FA4) or heads-fastest
(``head_order="parallel"``, FlashInfer's native order), to reproduce the paper's O vs O+Seq comparison.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

import torch

from wavealign import blockmask, launch_order
from wavealign.kernels import Backend, ExecutionFacts, LaunchShape, keyword_defaults, register

try:
    import triton
    import triton.language as tl
except ImportError:  # the CPU build of torch on a machine without triton
    triton = None

HEAD_ORDERS = ("sequential", "parallel")
KV_EVICTIONS = ("", "evict_first", "evict_last")
HEAD_DIMS = (64, 128)
DTYPES = (torch.bfloat16, torch.float16)


@dataclass(frozen=True)
class KernelConfig:
    """Launch parameters; ``block_m`` and ``block_n`` divide the mask's block size (one mask block is
    ``block_size // block_m`` programs and ``block_size // block_n`` inner K/V tiles)."""

    block_m: int = 128
    block_n: int = 128
    num_warps: int = 8
    num_stages: int = 3
    # Hopper's bulk tensor copy (TMA) for Q/K/V loads and the O store, instead of per-thread loads
    use_tma: bool = True
    # Triton's automatic warp specialisation of the K/V loop (producer/consumer warps)
    warp_specialize: bool = False
    # TMA loads through 2-D (B*H*N, D) descriptors instead of per-head 3-D ones (the O store stays 3-D,
    # clipped at each head's end); safe because rows past a head's end are never used
    flat_loads: bool = False
    # L2 eviction hint for pointer loads of K/V ("" or "evict_last"): K/V blocks are re-read by other rows
    kv_eviction: str = ""


# Chosen on the H200 (benchmarks/results/kernels-h200/TUNING.md), per head dim.
TUNED = {
    128: KernelConfig(block_m=128, block_n=128, num_warps=8, num_stages=3, use_tma=True, flat_loads=True),
    64: KernelConfig(block_m=128, block_n=128, num_warps=4, num_stages=3, use_tma=True, flat_loads=True),
}


def default_config(head_dim: int) -> KernelConfig:
    """The tuned launch parameters for ``head_dim``; TMA only on Hopper and newer."""
    cfg = TUNED[head_dim]
    if cfg.use_tma and not _has_tma():
        cfg = replace(cfg, use_tma=False)
    return cfg


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def _has_tma() -> bool:
    if _interpreting() or not torch.cuda.is_available():
        return False
    return torch.cuda.get_device_capability()[0] >= 9


if triton is not None:

    @triton.jit
    def _softmax_tile(acc, l_i, m_i, q, k, v, offs_n, n_kv, qk_scale, MASK_KV: tl.constexpr):
        """One K/V tile of the online softmax (FlashAttention-2, Alg. 1 lines 8-10), in base 2."""
        qk = tl.dot(q, tl.trans(k))
        if MASK_KV:
            qk = tl.where(offs_n[None, :] < n_kv, qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        # scale and shift in one FMA per score, rather than a multiply then a subtract
        p = tl.math.exp2(qk * qk_scale - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        # accumulate P V into the rescaled accumulator inside the matrix instruction
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        return acc, l_i, m_new

    @triton.jit
    def _globaltimer():
        """The GPU's global nanosecond timer (PTX ``%globaltimer``)."""
        return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False,
                                         pack=1)

    @triton.jit
    def _smid():
        """The SM this program runs on (PTX ``%smid``)."""
        return tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], dtype=tl.int32, is_pure=True, pack=1)

    @triton.jit
    def _block_sparse_attn_fwd(
        Q, K, V, O, KV_NUM, KV_IDX, PERM, TIMELINE,
        q_desc, k_desc, v_desc, o_desc,
        stride_qb, stride_qh, stride_qn,
        stride_kb, stride_kh, stride_kn,
        stride_vb, stride_vh, stride_vn,
        stride_ob, stride_oh, stride_on,
        stride_cb, stride_ch,
        stride_ib, stride_ih, stride_im,
        stride_pb, stride_ph,
        H, N_Q, N_KV, NB, qk_scale, TILES_PER_HEAD, NUM_TILES,
        HEAD_DIM: tl.constexpr, BLOCK_SIZE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
        HAS_PERM: tl.constexpr, HEADS_FASTEST: tl.constexpr, USE_TMA: tl.constexpr,
        WARP_SPECIALIZE: tl.constexpr, FLAT_LOADS: tl.constexpr, KV_EVICTION: tl.constexpr,
        PERSISTENT: tl.constexpr, RECORD_TIMELINE: tl.constexpr,
    ):
        """One program per tile (a streaming grid: SMs take the next tile as they free), or, ``PERSISTENT``, one
        program per SM running tiles p, p + G, p + 2G, ... of the queue numbered slot fastest, then (batch, head):
        FA4's SM100 ``StaticPersistentTileScheduler``. Either way a tile computes the same rows the same way.
        ``RECORD_TIMELINE`` (persistent only) writes each tile's start and end (ns) and SM into ``TIMELINE``."""
        if PERSISTENT:
            # the tile loop itself is not pipelined (its K/V loop is): one tile's buffers in shared memory at a time
            for tile in tl.range(tl.program_id(0), NUM_TILES, tl.num_programs(0), num_stages=1):
                if RECORD_TIMELINE:
                    started = _globaltimer()
                _attend_tile(
                    tile % TILES_PER_HEAD, tile // TILES_PER_HEAD,
                    Q, K, V, O, KV_NUM, KV_IDX, PERM, q_desc, k_desc, v_desc, o_desc,
                    stride_qb, stride_qh, stride_qn, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh,
                    stride_vn, stride_ob, stride_oh, stride_on, stride_cb, stride_ch, stride_ib, stride_ih, stride_im,
                    stride_pb, stride_ph, H, N_Q, N_KV, NB, qk_scale,
                    HEAD_DIM, BLOCK_SIZE, BLOCK_M, BLOCK_N, HAS_PERM, USE_TMA, WARP_SPECIALIZE, FLAT_LOADS,
                    KV_EVICTION)
                if RECORD_TIMELINE:
                    tl.store(TIMELINE + tile * 3, started)
                    tl.store(TIMELINE + tile * 3 + 1, _globaltimer())
                    tl.store(TIMELINE + tile * 3 + 2, _smid().to(tl.int64))
        else:
            if HEADS_FASTEST:
                bh = tl.program_id(0)
                slot = tl.program_id(1)
            else:
                slot = tl.program_id(0)
                bh = tl.program_id(1)
            _attend_tile(
                slot, bh, Q, K, V, O, KV_NUM, KV_IDX, PERM, q_desc, k_desc, v_desc, o_desc,
                stride_qb, stride_qh, stride_qn, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
                stride_ob, stride_oh, stride_on, stride_cb, stride_ch, stride_ib, stride_ih, stride_im,
                stride_pb, stride_ph, H, N_Q, N_KV, NB, qk_scale,
                HEAD_DIM, BLOCK_SIZE, BLOCK_M, BLOCK_N, HAS_PERM, USE_TMA, WARP_SPECIALIZE, FLAT_LOADS, KV_EVICTION)

    @triton.jit
    def _attend_tile(
        slot, bh, Q, K, V, O, KV_NUM, KV_IDX, PERM,
        q_desc, k_desc, v_desc, o_desc,
        stride_qb, stride_qh, stride_qn,
        stride_kb, stride_kh, stride_kn,
        stride_vb, stride_vh, stride_vn,
        stride_ob, stride_oh, stride_on,
        stride_cb, stride_ch,
        stride_ib, stride_ih, stride_im,
        stride_pb, stride_ph,
        H, N_Q, N_KV, NB, qk_scale,
        HEAD_DIM: tl.constexpr, BLOCK_SIZE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
        HAS_PERM: tl.constexpr, USE_TMA: tl.constexpr, WARP_SPECIALIZE: tl.constexpr, FLAT_LOADS: tl.constexpr,
        KV_EVICTION: tl.constexpr,
    ):
        """Launch slot ``slot`` (of ``block_m`` rows) of (batch, head) ``bh``: its query block's rows against that
        block's selected K/V blocks."""
        b = (bh // H).to(tl.int64)
        h = (bh % H).to(tl.int64)
        SPLIT: tl.constexpr = BLOCK_SIZE // BLOCK_M
        TILES: tl.constexpr = BLOCK_SIZE // BLOCK_N
        row_slot = slot // SPLIT
        # WaveAlign: launch slot p of head h runs query block perm[h, p]
        if HAS_PERM:  # noqa: SIM108 (a constexpr branch: no load is emitted without a perm)
            q_blk = tl.load(PERM + b * stride_pb + h * stride_ph + row_slot).to(tl.int32)
        else:
            q_blk = row_slot
        start_m = q_blk * BLOCK_SIZE + (slot % SPLIT) * BLOCK_M
        offs_m = start_m + tl.arange(0, BLOCK_M)
        offs_d = tl.arange(0, HEAD_DIM)
        offs_n0 = tl.arange(0, BLOCK_N)

        q_base = Q + b * stride_qb + h * stride_qh
        k_base = K + b * stride_kb + h * stride_kh
        v_base = V + b * stride_vb + h * stride_vh
        row = bh  # = b * H + h, the row of the (B*H, N, D) descriptor views
        if USE_TMA and FLAT_LOADS:
            q = q_desc.load([row * N_Q + start_m, 0])
        elif USE_TMA:
            q = q_desc.load([row, start_m, 0]).reshape(BLOCK_M, HEAD_DIM)
        else:
            q = tl.load(q_base + offs_m[:, None] * stride_qn + offs_d[None, :],
                        mask=offs_m[:, None] < N_Q, other=0.0)

        n_sel = tl.load(KV_NUM + b * stride_cb + h * stride_ch + q_blk)
        idx_ptr = KV_IDX + b * stride_ib + h * stride_ih + q_blk * stride_im
        # kv_indices ascend, so the ragged last K/V block can only be a row's last entry
        last_blk = tl.load(idx_ptr + n_sel - 1, mask=n_sel > 0, other=0)
        has_tail = (n_sel > 0) & (last_blk == NB - 1) & (N_KV % BLOCK_SIZE != 0)
        n_full = n_sel - has_tail.to(tl.int32)

        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
        for t in tl.range(0, n_full * TILES, warp_specialize=WARP_SPECIALIZE):
            kv_blk = tl.load(idx_ptr + t // TILES)
            start_n = kv_blk * BLOCK_SIZE + (t % TILES) * BLOCK_N
            if USE_TMA and FLAT_LOADS:
                k = k_desc.load([row * N_KV + start_n, 0])
                v = v_desc.load([row * N_KV + start_n, 0])
            elif USE_TMA:
                k = k_desc.load([row, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)
                v = v_desc.load([row, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)
            else:
                offs_n = start_n + offs_n0
                k = tl.load(k_base + offs_n[:, None] * stride_kn + offs_d[None, :], eviction_policy=KV_EVICTION)
                v = tl.load(v_base + offs_n[:, None] * stride_vn + offs_d[None, :], eviction_policy=KV_EVICTION)
            acc, l_i, m_i = _softmax_tile(acc, l_i, m_i, q, k, v, offs_n0, N_KV, qk_scale, MASK_KV=False)
        if has_tail:
            tail_start = (NB - 1) * BLOCK_SIZE
            for s in range(0, tl.cdiv(N_KV - tail_start, BLOCK_N)):
                offs_n = tail_start + s * BLOCK_N + offs_n0
                k = tl.load(k_base + offs_n[:, None] * stride_kn + offs_d[None, :],
                            mask=offs_n[:, None] < N_KV, other=0.0)
                v = tl.load(v_base + offs_n[:, None] * stride_vn + offs_d[None, :],
                            mask=offs_n[:, None] < N_KV, other=0.0)
                acc, l_i, m_i = _softmax_tile(acc, l_i, m_i, q, k, v, offs_n, N_KV, qk_scale, MASK_KV=True)

        # a row with no selected blocks has l_i = 0 and acc = 0: its output is zeros
        l_safe = tl.where(l_i == 0.0, 1.0, l_i)
        out = (acc / l_safe[:, None]).to(O.dtype.element_ty)
        if USE_TMA:
            o_desc.store([row, start_m, 0], out.reshape(1, BLOCK_M, HEAD_DIM))
        else:
            o_base = O + b * stride_ob + h * stride_oh
            tl.store(o_base + offs_m[:, None] * stride_on + offs_d[None, :], out, mask=offs_m[:, None] < N_Q)


def _kv_index_form(mask, batch: int, heads: int, mb: int, nb: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(kv_num_blocks, kv_indices) int32 on ``device`` from either mask form, with its shape checked."""
    if isinstance(mask, tuple):
        kv_num, kv_idx = blockmask.kv_pair(mask)
    else:
        kv_num, kv_idx = blockmask.to_kv_indices(blockmask.check_mask(mask))
    lead = tuple(kv_num.shape[:-1])
    if lead == (1, heads):  # one pattern for every batch element, as the other backends accept
        kv_num, kv_idx, lead = kv_num[0], kv_idx[0], (heads,)
    if lead not in ((heads,), (batch, heads)) or kv_num.shape[-1] != mb or kv_idx.shape[:-1] != kv_num.shape:
        raise ValueError(f"mask must cover (H={heads}, MB={mb}) query blocks (optionally with B={batch} first), "
                         f"got kv_num_blocks {tuple(kv_num.shape)} and kv_indices {tuple(kv_idx.shape)}")
    if not isinstance(mask, tuple) and mask.shape[-1] != nb:
        raise ValueError(f"mask must have NB={nb} kv blocks, got {mask.shape[-1]}")
    kv_num = kv_num.to(device=device, dtype=torch.int32).contiguous()
    kv_idx = kv_idx.to(device=device, dtype=torch.int32).contiguous()
    return kv_num, kv_idx


def check_options(options: Mapping[str, Any], block_size: int) -> None:
    """Raise ValueError naming the first launch option ``plan`` would refuse for masks of ``block_size``:
    ``head_order`` and the fields of ``KernelConfig`` (None keeps the tuned value), with their types and ranges."""
    head_order = options.get("head_order", "sequential")
    if head_order not in HEAD_ORDERS:
        raise ValueError(f"head_order must be one of {HEAD_ORDERS}, got {head_order!r}")
    defaults = {f.name: f.default for f in fields(KernelConfig)}
    unknown = sorted(set(options) - set(defaults) - {"head_order"})
    if unknown:
        raise ValueError(f"unknown triton option(s) {unknown}; expected fields of KernelConfig {sorted(defaults)} "
                         "or head_order")
    for name, value in options.items():
        if name == "head_order" or value is None:
            continue
        kind = type(defaults[name])
        if type(value) is not kind:  # exact: a bool is not an int here, nor an int a bool
            expected = {int: "an integer", bool: "true or false", str: "a string"}[kind]
            raise ValueError(f"{name} must be {expected}, got {value!r}")
    given = {k: v for k, v in options.items() if k != "head_order" and v is not None}
    for name in ("block_m", "block_n"):  # a tile not given is the tuned 128, shrunk to a smaller mask block
        _check_tile(name, given.get(name, min(defaults[name], block_size)), block_size)
    if "num_warps" in given and given["num_warps"] not in (1, 2, 4, 8, 16):
        raise ValueError(f"num_warps must be 1, 2, 4, 8 or 16, got {given['num_warps']}")
    if "num_stages" in given and given["num_stages"] < 1:
        raise ValueError(f"num_stages must be >= 1, got {given['num_stages']}")
    _check_eviction(given.get("kv_eviction", ""))


def _check_eviction(value: str) -> None:
    if value not in KV_EVICTIONS:
        raise ValueError(f"kv_eviction must be one of {KV_EVICTIONS}, got {value!r}")


def _check_tile(name: str, value: int, block_size: int) -> None:
    if value < 16 or block_size % value or value & (value - 1):
        raise ValueError(f"{name} must be a power of two >= 16 dividing block_size={block_size}, got {value}")


def _check_config(shape: LaunchShape, cfg: KernelConfig) -> None:
    if triton is None:
        raise ValueError("backend 'triton' needs the triton package, which is not installed")
    if shape.dtype not in DTYPES:
        raise ValueError(f"q/k/v must be bfloat16 or float16, got {shape.dtype}")
    if shape.head_dim not in HEAD_DIMS:
        raise ValueError(f"head dim must be one of {HEAD_DIMS}, got {shape.head_dim}")
    _check_eviction(cfg.kv_eviction)  # a KernelConfig passed whole skips check_options
    for name, value in (("block_m", cfg.block_m), ("block_n", cfg.block_n)):
        _check_tile(name, value, shape.block_size)


def _check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """What this kernel adds to ``LaunchShape``'s checks (which every caller runs first): 4-D bf16/fp16 tensors
    with a contiguous last dim, and k/v of one shape."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise ValueError(f"{name} must be (B, H, N, D), got shape {tuple(t.shape)}")
        if t.dtype not in DTYPES:
            raise ValueError(f"{name} must be bfloat16 or float16, got {t.dtype}")
        if t.stride(-1) != 1:
            raise ValueError(f"{name} must have a contiguous last dim, got strides {t.stride()}")
    if k.shape != v.shape or q.shape[:2] != k.shape[:2] or q.shape[3] != k.shape[3]:
        raise ValueError(f"q, k, v must share B, H and D, got {tuple(q.shape)}, {tuple(k.shape)}, "
                         f"{tuple(v.shape)}")


@dataclass(frozen=True)
class TritonLaunch:
    """The mask in int32 kv-index form and the launch order on the device, and the resolved config."""

    shape: LaunchShape
    config: KernelConfig
    head_order: str
    kv_num: torch.Tensor
    kv_idx: torch.Tensor
    perm: torch.Tensor | None
    # None: a grid of one program per tile; else that many persistent programs on the static stride (triton-static)
    persistent_grid: int | None = None

    def run(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return self._launch(q, k, v, None)

    def timeline(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A persistent launch (``triton-static``) that also records, per tile of the queue (slot fastest, then
        head), its start and end on the GPU's global timer (ns) and the SM that ran it: (output, int64 (tiles, 3)).
        What the simulator's static-scheduler replay assumes of the programs' drift, measured."""
        if self.persistent_grid is None:
            raise ValueError("a timeline is recorded by the persistent launch only (backend 'triton-static')")
        record = torch.zeros(self.slots * self.shape.batch * self.shape.heads, 3, dtype=torch.int64, device=q.device)
        return self._launch(q, k, v, record), record

    @property
    def slots(self) -> int:
        """Launch slots (tiles of ``block_m`` query rows) per (batch, head)."""
        return self.shape.q_blocks * (self.shape.block_size // self.config.block_m)

    def _launch(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, record: torch.Tensor | None) -> torch.Tensor:
        self.shape.check_qkv(q, k, v)
        _check_qkv(q, k, v)
        cfg, shape = self.config, self.shape
        out = torch.empty_like(q)
        slots, bh = self.slots, shape.batch * shape.heads
        if self.persistent_grid is not None:
            grid = (min(self.persistent_grid, slots * bh),)
        else:
            grid = (bh, slots) if self.head_order == "parallel" else (slots, bh)
        use_tma = cfg.use_tma and all(t.is_contiguous() for t in (q, k, v))
        descs = _descriptors(q, k, v, out, cfg) if use_tma else (None,) * 4
        perm = self.kv_num if self.perm is None else self.perm  # any tensor: unread when HAS_PERM is False
        _block_sparse_attn_fwd[grid](
            q, k, v, out, self.kv_num, self.kv_idx, perm, record, *descs,
            *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *out.stride()[:3],
            *_lead_strides(self.kv_num, 2), *_lead_strides(self.kv_idx, 3), *_lead_strides(perm, 2),
            shape.heads, shape.q_len, shape.kv_len, shape.kv_blocks,
            (1.0 / math.sqrt(shape.head_dim)) * 1.4426950408889634, slots, slots * bh,
            **kernel_constants(shape, cfg, self.head_order, has_perm=self.perm is not None, use_tma=use_tma,
                               persistent=self.persistent_grid is not None, timeline=record is not None),
        )
        return out


def kernel_constants(shape: LaunchShape, cfg: KernelConfig, head_order: str, *, has_perm: bool,
                     use_tma: bool, persistent: bool = False, timeline: bool = False) -> dict[str, object]:
    """The kernel's compile-time parameters and launch options for a launch of ``shape`` under ``cfg``: what
    ``TritonLaunch.run`` passes, and what an offline compile (benchmarks/results/kernels-h200/sass_sm90.py)
    must pass to build the same kernel."""
    return dict(HEAD_DIM=shape.head_dim, BLOCK_SIZE=shape.block_size, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
                HAS_PERM=has_perm, HEADS_FASTEST=head_order == "parallel", USE_TMA=use_tma,
                WARP_SPECIALIZE=cfg.warp_specialize, FLAT_LOADS=cfg.flat_loads, KV_EVICTION=cfg.kv_eviction,
                PERSISTENT=persistent, RECORD_TIMELINE=timeline, num_warps=cfg.num_warps, num_stages=cfg.num_stages)


def plan(mask, order, shape: LaunchShape, *, head_order: str = "sequential", config: KernelConfig | None = None,
         persistent_grid: int | None = None, **params) -> TritonLaunch:
    """Resolve the launch config and put ``mask`` (dense bool or kv-index form) and ``order`` on the device,
    int32; ``params`` override fields of the config (None keeps the tuned value). ``persistent_grid``: launch that
    many persistent programs on the static stride instead of one per tile (``triton-static``)."""
    bs = shape.block_size
    check_options({"head_order": head_order, **params}, bs)
    base = config or (default_config(shape.head_dim) if shape.head_dim in HEAD_DIMS else KernelConfig())
    # a tuned tile larger than the mask block shrinks to it (e.g. 64x64 masks)
    base = replace(base, block_m=min(base.block_m, bs), block_n=min(base.block_n, bs))
    cfg = replace(base, **{k: v for k, v in params.items() if v is not None})
    _check_config(shape, cfg)
    kv_num, kv_idx = _kv_index_form(mask, shape.batch, shape.heads, shape.q_blocks, shape.kv_blocks, shape.device)
    perm = None
    order = launch_order.check_launch_order(order, shape.heads, shape.q_blocks)  # as the registered backend's plan does
    if order is not None:
        perm = order.perm
        if perm.dim() == 3 and perm.shape[0] != shape.batch:
            raise ValueError(f"order.perm must be (H={shape.heads}, MB={shape.q_blocks}) or (B={shape.batch}, H, MB), "
                             f"got {tuple(perm.shape)}")
        perm = perm.to(shape.device).contiguous()
    return TritonLaunch(shape, cfg, head_order, kv_num, kv_idx, perm, persistent_grid)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask, order=None, block_size: int = 128,
              **options) -> torch.Tensor:
    """Plan and run once: block-sparse attention of q/k/v (B, H, N, D) under ``mask`` in ``order``."""
    shape = LaunchShape.of(q, k, block_size, v=v)
    _check_qkv(q, k, v)
    return plan(mask, order, shape, **options).run(q, k, v)


def _lead_strides(t: torch.Tensor, count: int) -> tuple[int, ...]:
    """Strides of all but the last dim, with a 0 batch stride for a mask or order shared by the batch."""
    lead = tuple(t.stride()[:-1])
    return (0,) * (count - len(lead)) + lead


def _descriptors(q, k, v, out, cfg: KernelConfig):
    """TMA descriptors over (B*H, N, D) views, whose per-head N bound zero-fills loads and clips stores, or
    over flat (B*H*N, D) views for the loads."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    def desc(t: torch.Tensor, rows: int, flat: bool) -> TensorDescriptor:
        b, h, n, d = t.shape
        if flat:
            return TensorDescriptor(t, [b * h * n, d], [d, 1], [rows, d])
        return TensorDescriptor(t, [b * h, n, d], [n * d, d, 1], [1, rows, d])

    flat = cfg.flat_loads
    return (desc(q, cfg.block_m, flat), desc(k, cfg.block_n, flat), desc(v, cfg.block_n, flat),
            desc(out, cfg.block_m, False))


# the streaming kernel's speed as the simulator models it (round figures, not fitted: ExecutionFacts)
EXECUTION = ExecutionFacts(128, 128, mma_efficiency=0.55, block_overhead_s=40e-9)
# the KernelConfig fields a sweep tunes (None keeps the tuned value for the head dim: TUNING.md)
TUNED_OPTIONS = ("block_m", "block_n", "num_warps", "num_stages", "use_tma")
# their types: any value, for check_options to say what each takes (a field's type, a tile's rules)
TUNED_TYPES = dict.fromkeys(TUNED_OPTIONS, Any)


def is_available() -> bool:
    return triton is not None and torch.cuda.is_available()


BACKEND = register(Backend(
    name="triton",
    plan=plan,
    description="WaveAlign's own block-sparse FlashAttention-2 forward in Triton; row order read in-kernel",
    # ncu launch__occupancy_limit_* on the H200: 228 regs x 256 threads -> 1 CTA/SM
    # (benchmarks/results/kernels-h200/TUNING.md); 2 on the A40's 64x64 tiles (the paper's Sec. V)
    ctas_per_sm={"h100": 1, "h200": 1, "a100": 1, "b200": 1, "a40": 2},
    execution=EXECUTION,
    ncu_kernels=r"_block_sparse_attn_fwd",
    is_available=is_available,
    # head_order (sequential: query blocks fastest, heads one after another; parallel: heads fastest), and the
    # KernelConfig fields a sweep tunes
    params={"head_order": keyword_defaults(plan)["head_order"], **dict.fromkeys(TUNED_OPTIONS)}, types=TUNED_TYPES,
    check_options=check_options,
))
