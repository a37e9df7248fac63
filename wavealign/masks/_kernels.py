"""GPU kernels of the mask methods (Triton), so that building a live layer's mask costs a fraction of its attention.

Each method's torch code is its reference (the CPU path, and what these kernels are tested against under
``TRITON_INTERPRET=1``); on a GPU ``masks.build`` runs these instead:

- ``xattention_scores``: XAttention's strided group GEMM (upstream ``xattn/src/kernels.py`` runs it in two Triton
  kernels that round-trip the (N/S)^2 logits through HBM) with the softmax folded into its epilogue: each tile
  stores, per query group, its row maximum, its exp-sum and the exp-sums of its kv blocks against that maximum,
  so a second kernel gives the exact row softmax summed per block from (N/S) x (N/block) numbers instead of
  (N/S)^2.
- ``select_by_mass``: one row per program, the blocks of highest mass kept until a cumulative threshold, found by
  bisecting the cut-off value on its float bits (31 masked sums in float64) instead of sorting the row.
- ``spargeattn_select``: SpargeAttn's masked softmax of pooled scores, its cdf cut, and the blocks its
  self-similarity test forces on, one row per program.
- ``block_stats``: per block, the mean token (after subtracting a per-head mean) and the mean pairwise cosine of
  its tokens, in one read of Q or K.
- ``diagonal_mass``: the mass of the last rows' attention per diagonal distance, summed over rows in a fixed order
  (deterministic, no atomics).
- ``keep_by_mass``: a whole head's selection of the same kind over many rows at once (FlexPrefill's global
  query-aware selection), 16 candidate cut-offs per pass.

Ties are taken in index order, as the references' stable sorts take them, so a mask differs from its reference only
where a cumulative sum rounds to the other side of its threshold (the sums here are float64).
"""

from __future__ import annotations

import math
import os

import torch

from wavealign.masks._common import logits_f32

try:
    import triton
    import triton.language as tl
except ImportError:  # the CPU build of torch on a machine without triton: the torch reference runs
    triton = None

# bytes of float32 working memory the batched paths take at once on a GPU (a CPU under the interpreter: tests)
GPU_BUDGET_BYTES = 6 << 30
CPU_BUDGET_BYTES = 64 << 20


def enabled(x: torch.Tensor) -> bool:
    """Whether the kernels run for tensors like ``x``: Triton is there and ``x`` is on a GPU, or Triton's
    interpreter is on (``TRITON_INTERPRET=1``, how the CPU tests run them)."""
    return triton is not None and (x.is_cuda or os.environ.get("TRITON_INTERPRET") == "1")


def heads_per_chunk(bytes_per_head: int, device: torch.device) -> int:
    """How many heads a batched step may take at once within the working-memory budget (at least one)."""
    budget = GPU_BUDGET_BYTES if device.type == "cuda" else CPU_BUDGET_BYTES
    return max(1, budget // max(bytes_per_head, 1))


def _pow2(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()


if triton is not None:

    @triton.jit
    def _xattn_partials_kernel(QG, KG, q_desc, k_desc, PART, TMAX, TSUM, G, KD, qk_scale,
                               s_qh, s_qg, s_kh, s_kg, s_ph, s_pg, s_th, s_tg,
                               BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, PB: tl.constexpr,
                               USE_TMA: tl.constexpr):
        """One (BM query groups x BN key groups) tile of the group logits q_g . k_g' (scaled, in base 2), reduced in
        its epilogue to the tile's row maxima, its row sums of exp2(logit - max), and those sums per kv block of PB
        key groups. With USE_TMA the tiles are loaded through (H, G, S*D) tensor descriptors (zero past G)."""
        pid_m = tl.program_id(0)
        pid_n = tl.program_id(1)
        h = tl.program_id(2).to(tl.int64)
        rows = pid_m * BM + tl.arange(0, BM)
        cols = pid_n * BN + tl.arange(0, BN)
        offs_k = tl.arange(0, BK)
        q_ptrs = QG + h * s_qh + rows[:, None].to(tl.int64) * s_qg + offs_k[None, :]
        k_ptrs = KG + h * s_kh + cols[:, None].to(tl.int64) * s_kg + offs_k[None, :]
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, KD, BK):
            if USE_TMA:
                a = q_desc.load([h.to(tl.int32), pid_m * BM, k0]).reshape(BM, BK)
                b = k_desc.load([h.to(tl.int32), pid_n * BN, k0]).reshape(BN, BK)
            else:
                in_k = (k0 + offs_k) < KD
                a = tl.load(q_ptrs, mask=(rows[:, None] < G) & in_k[None, :], other=0.0)
                b = tl.load(k_ptrs, mask=(cols[:, None] < G) & in_k[None, :], other=0.0)
                q_ptrs += BK
                k_ptrs += BK
            acc = tl.dot(a, tl.trans(b), acc, input_precision="ieee")  # float32 operands stay float32
        # key groups past the sequence (the padding up to whole blocks) are left out of the softmax
        logits = tl.where(cols[None, :] < G, acc * qk_scale, float("-inf"))
        row_max = tl.max(logits, 1)
        e = tl.math.exp2(logits - tl.where(row_max == float("-inf"), 0.0, row_max)[:, None])
        part = tl.sum(tl.reshape(e, (BM, BN // PB, PB)), 2)
        kb = pid_n * (BN // PB) + tl.arange(0, BN // PB)
        in_rows = rows < G
        tl.store(PART + h * s_ph + rows[:, None].to(tl.int64) * s_pg + kb[None, :], part, mask=in_rows[:, None])
        stat = h * s_th + rows.to(tl.int64) * s_tg + pid_n
        tl.store(TMAX + stat, row_max, mask=in_rows)
        tl.store(TSUM + stat, tl.sum(e, 1), mask=in_rows)

    @triton.jit
    def _xattn_combine_kernel(PART, TMAX, TSUM, OUT, G, NB, NT, s_ph, s_pg, s_th, s_tg, s_oh, s_or,
                              PB: tl.constexpr, KPT: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_KB: tl.constexpr):
        """One query block of one head: its PB groups' exact softmax over every key group, from the tiles' row maxima
        and sums (the row's maximum over all tiles, each tile's sums rescaled to it), summed per kv block."""
        qb = tl.program_id(0)
        h = tl.program_id(1).to(tl.int64)
        rows = qb * PB + tl.arange(0, PB)
        in_rows = rows < G  # the ragged last block's missing groups add nothing
        t = tl.arange(0, BLOCK_T)
        stats = h * s_th + rows[:, None].to(tl.int64) * s_tg
        in_t = in_rows[:, None] & (t[None, :] < NT)
        tile_max = tl.load(TMAX + stats + t[None, :], mask=in_t, other=float("-inf"))
        tile_sum = tl.load(TSUM + stats + t[None, :], mask=in_t, other=0.0)
        row_max = tl.max(tile_max, 1)
        row_max = tl.where(row_max == float("-inf"), 0.0, row_max)
        total = tl.sum(tl.math.exp2(tile_max - row_max[:, None]) * tile_sum, 1)
        inv = tl.where(total > 0, 1.0 / total, 0.0)
        for kb0 in range(0, NB, BLOCK_KB):
            kb = kb0 + tl.arange(0, BLOCK_KB)
            live = in_rows[:, None] & (kb[None, :] < NB)
            part = tl.load(PART + h * s_ph + rows[:, None].to(tl.int64) * s_pg + kb[None, :], mask=live, other=0.0)
            own_max = tl.load(TMAX + stats + (kb // KPT)[None, :], mask=live, other=float("-inf"))
            weight = tl.math.exp2(own_max - row_max[:, None]) * inv[:, None]
            tl.store(OUT + h * s_oh + qb * s_or + kb, tl.sum(part * weight, 0), mask=kb < NB)

    @triton.jit
    def _exceeds(x, xd, cut, target, INCLUSIVE: tl.constexpr):
        """Whether the mass of ``x`` above ``cut`` (at or above it, with INCLUSIVE) exceeds ``target`` (reaches it,
        without INCLUSIVE), summed in float64."""
        if INCLUSIVE:
            return tl.sum(tl.where(x >= cut, xd, 0.0)) > target
        return tl.sum(tl.where(x > cut, xd, 0.0)) >= target

    @triton.jit
    def _keep_by_mass(x, valid, target, INCLUSIVE: tl.constexpr):
        """Which of a row's values ``x`` (>= 0; lanes not ``valid`` hold 0) a descending cumulative sum keeps, ties
        in index order (a stable sort's): without INCLUSIVE each value while the mass before it is below ``target``
        (the crossing value kept: XAttention), with it each value while the mass up to it stays within ``target``
        (SpargeAttn's cdf). The cut-off value is bisected on its float bits, one masked float64 sum a bit; only the
        tie group at the cut-off can be taken in part, and the prefix count of its members says which."""
        xd = x.to(tl.float64)
        bits = x.to(tl.int32, bitcast=True)
        t = tl.full((), 0, tl.int32)
        for bit in tl.static_range(30, -1, -1):
            c = t | (1 << bit)
            t = tl.where(_exceeds(x, xd, c.to(tl.float32, bitcast=True), target, INCLUSIVE), c, t)
        # whole: values all of whose ties are kept (bits above the largest t at which the mass still exceeds)
        whole = (bits > tl.where(_exceeds(x, xd, 0.0, target, INCLUSIVE), t, -1)) & valid
        if INCLUSIVE:  # the partial group lies just below the whole ones; ties up to the budget join
            edge = tl.max(tl.where(~whole & valid, x, -1.0), 0)
            room = target - tl.sum(tl.where(whole, xd, 0.0))
            count = tl.where(edge > 0.0, tl.floor(room / edge), 2147483647.0)
            ties = (x == edge) & valid & ~whole
        else:  # the partial group is the smallest whole one: its later ties may start past the target
            edge = tl.min(tl.where(whole, x, float("inf")), 0)
            room = target - tl.sum(tl.where(x > edge, xd, 0.0))
            count = tl.where(edge > 0.0, tl.ceil(room / edge), 2147483647.0)
            ties = (x == edge) & whole
        rank = tl.cumsum(ties.to(tl.int32), 0)
        in_part = ties & (rank.to(tl.float64) <= count)
        if INCLUSIVE:
            return whole | in_part
        return (whole & ~ties) | in_part

    @triton.jit
    def _select_by_mass_kernel(S, OUT, THRESHOLD, NB, s_sh, s_sr, s_oh, s_or,
                               KEEP_FIRST: tl.constexpr, KEEP_DIAGONAL: tl.constexpr, BLOCK: tl.constexpr):
        """XAttention's selection of one row: blocks in descending mass while the mass before them is below
        THRESHOLD (a float64) x the row's total (the crossing block kept), then kv-block 0 and the diagonal if
        asked."""
        r = tl.program_id(0)
        h = tl.program_id(1).to(tl.int64)
        cols = tl.arange(0, BLOCK)
        valid = cols < NB
        x = tl.load(S + h * s_sh + r * s_sr + cols, mask=valid, other=0.0)
        keep = _keep_by_mass(x, valid, tl.sum(x.to(tl.float64)) * tl.load(THRESHOLD), False)
        if KEEP_FIRST:
            keep = keep | (cols == 0)
        if KEEP_DIAGONAL:
            keep = keep | (cols == r)
        tl.store(OUT + h * s_oh + r * s_or + cols, keep.to(tl.int8), mask=valid)

    @triton.jit
    def _spargeattn_select_kernel(S, SIMQ, SIMK, SIMTHR, CDF, OUT, NB, s_sh, s_sr, s_qh, s_kh, s_oh, s_or,
                                  SINK: tl.constexpr, BLOCK: tl.constexpr):
        """SpargeAttn's prediction of one row: softmax over its self-similar kv blocks, the highest kept while their
        cumulative mass stays within the head's cdf threshold of the row's total (at least one), then every block
        of a non-self-similar query or kv block, and kv-block 0 with SINK."""
        r = tl.program_id(0)
        h = tl.program_id(1).to(tl.int64)
        cols = tl.arange(0, BLOCK)
        valid = cols < NB
        sim_thr = tl.load(SIMTHR + h)
        k_sim = (tl.load(SIMK + h * s_kh + cols, mask=valid, other=0.0) > sim_thr) & valid
        q_sim = tl.load(SIMQ + h * s_qh + r) > sim_thr
        s = tl.load(S + h * s_sh + r * s_sr + cols, mask=valid, other=0.0)
        logits = tl.where(k_sim, s, float("-inf"))
        row_max = tl.max(logits, 0)
        e = tl.exp(logits - tl.where(row_max == float("-inf"), 0.0, row_max))
        total = tl.sum(e, 0)
        p = tl.where(total > 0, e / total, 0.0)  # no self-similar kv block: torch's softmax is NaN, taken as 0
        keep = _keep_by_mass(p, valid, tl.load(CDF + h).to(tl.float64) * tl.sum(p.to(tl.float64), 0), True)
        first_max = tl.min(tl.where((p == tl.max(p, 0)) & valid, cols, BLOCK), 0)
        keep = keep | ((tl.sum(keep.to(tl.int32), 0) == 0) & (cols == first_max))
        keep = tl.where(q_sim, keep | ~k_sim, True)
        if SINK:
            keep = keep | (cols == 0)
        tl.store(OUT + h * s_oh + r * s_or + cols, (keep & valid).to(tl.int8), mask=valid)

    @triton.jit
    def _block_stats_kernel(X, MEAN, POOLED, SIM, N, s_xh, s_xn, s_mh, s_ph, s_pb, s_sh,
                            HAS_MEAN: tl.constexpr, WITH_SIM: tl.constexpr, BLOCK_SIZE: tl.constexpr,
                            D: tl.constexpr):
        """One block of one head: the mean of its tokens and the mean pairwise cosine of its tokens (self-pairs
        included: |sum of unit vectors|^2 / n^2), after subtracting the head's MEAN when given."""
        b = tl.program_id(0)
        h = tl.program_id(1).to(tl.int64)
        rows = b * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        offs_d = tl.arange(0, D)
        valid = rows < N
        x = tl.load(X + h * s_xh + rows[:, None].to(tl.int64) * s_xn + offs_d[None, :], mask=valid[:, None],
                    other=0.0).to(tl.float32)
        if HAS_MEAN:
            x = tl.where(valid[:, None], x - tl.load(MEAN + h * s_mh + offs_d)[None, :], 0.0)
        count = tl.minimum(N - b * BLOCK_SIZE, BLOCK_SIZE).to(tl.float32)
        tl.store(POOLED + h * s_ph + b * s_pb + offs_d, tl.sum(x, 0) / count)
        if WITH_SIM:
            norm = tl.sqrt(tl.sum(x * x, 1))
            unit_sum = tl.sum(x / tl.maximum(norm, 1e-6)[:, None], 0)
            tl.store(SIM + h * s_sh + b, tl.sum(unit_sum * unit_sum, 0) / (count * count))

    @triton.jit
    def _diagonal_mass_kernel(P, OUT, R, N, s_ph, s_pr, s_oh, BLOCK: tl.constexpr):
        """Per distance d, the mass of the last R rows' attention P (rows N-R..N-1) on the keys d before and d
        after each row's own position, summed over rows in order."""
        pid = tl.program_id(0)
        h = tl.program_id(1).to(tl.int64)
        d = pid * BLOCK + tl.arange(0, BLOCK)
        in_range = d < N
        acc = tl.zeros((BLOCK,), dtype=tl.float32)
        for r in range(R):
            i = N - R + r
            row = P + h * s_ph + r * s_pr
            before = tl.load(row + (i - d), mask=in_range & (d <= i), other=0.0)
            after = tl.load(row + (i + d), mask=in_range & (d > 0) & (i + d < N), other=0.0)
            acc += after + before
        tl.store(OUT + h * s_oh + d, acc, mask=in_range)

    @triton.jit
    def _candidate_mass_kernel(X, PREFIX, PARTIAL, L, SHIFT, s_xh, s_ph, s_ch,
                               CAND: tl.constexpr, BLOCK: tl.constexpr):
        """For CAND cut-offs PREFIX[h] | (c << SHIFT), c = 0..CAND-1, the mass of this chunk of head h's values at or
        above each, in float64 (one partial sum per program and cut-off)."""
        pid = tl.program_id(0)
        h = tl.program_id(1).to(tl.int64)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(X + h * s_xh + offs, mask=offs < L, other=0.0)
        xd = x.to(tl.float64)
        prefix = tl.load(PREFIX + h)
        for c in tl.static_range(CAND):
            cut = (prefix | (c << SHIFT)).to(tl.float32, bitcast=True)
            tl.store(PARTIAL + h * s_ch + pid * CAND + c, tl.sum(tl.where(x >= cut, xd, 0.0), 0))

    @triton.jit
    def _whole_chunk(X, CUT, L, s_xh, pid, h, BLOCK: tl.constexpr):
        """A chunk of head h's values: their offsets, which are in range, the values, and which are *whole* (their
        float bits exceed CUT[h])."""
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        live = offs < L
        x = tl.load(X + h * s_xh + offs, mask=live, other=0.0)
        return offs, live, x, (x.to(tl.int32, bitcast=True) > tl.load(CUT + h)) & live

    @triton.jit
    def _whole_mass_kernel(X, CUT, EDGE, WHOLE, L, s_xh, s_ph, BLOCK: tl.constexpr):
        """Per chunk of head h's values: the mass (float64) of the whole ones and the largest of the others (-1 where
        there are none)."""
        pid = tl.program_id(0)
        h = tl.program_id(1).to(tl.int64)
        _, live, x, whole = _whole_chunk(X, CUT, L, s_xh, pid, h, BLOCK)
        tl.store(EDGE + h * s_ph + pid, tl.max(tl.where(whole | ~live, -1.0, x), 0))
        tl.store(WHOLE + h * s_ph + pid, tl.sum(tl.where(whole, x.to(tl.float64), 0.0), 0))

    @triton.jit
    def _edge_ties(X, CUT, EDGE, L, s_xh, pid, h, BLOCK: tl.constexpr):
        """This chunk's offsets, which are in range, which are whole, and which are ties of the edge value."""
        offs, live, x, whole = _whole_chunk(X, CUT, L, s_xh, pid, h, BLOCK)
        return offs, live, whole, (x == tl.load(EDGE + h)) & live & ~whole

    @triton.jit
    def _tie_count_kernel(X, CUT, EDGE, TIES, L, s_xh, s_th, BLOCK: tl.constexpr):
        """Per chunk of head h's values, how many are ties of the edge value."""
        pid = tl.program_id(0)
        h = tl.program_id(1).to(tl.int64)
        _, _, _, ties = _edge_ties(X, CUT, EDGE, L, s_xh, pid, h, BLOCK)
        tl.store(TIES + h * s_th + pid, tl.sum(ties.to(tl.int32), 0))

    @triton.jit
    def _keep_whole_and_ties_kernel(X, CUT, EDGE, COUNT, BEFORE, OUT, L, s_xh, s_th, s_oh, BLOCK: tl.constexpr):
        """The kept values of a chunk: the whole ones, and the edge's ties whose rank over the head (BEFORE[h, pid]
        ties in earlier chunks) is within COUNT[h]."""
        pid = tl.program_id(0)
        h = tl.program_id(1).to(tl.int64)
        offs, live, whole, ties = _edge_ties(X, CUT, EDGE, L, s_xh, pid, h, BLOCK)
        rank = tl.load(BEFORE + h * s_th + pid) + tl.cumsum(ties.to(tl.int64), 0)
        keep = whole | (ties & (rank <= tl.load(COUNT + h)))
        tl.store(OUT + h * s_oh + offs, keep.to(tl.int8), mask=live)


def xattention_scores(q: torch.Tensor, k: torch.Tensor, block_size: int, stride: int,
                      config: dict[str, int] | None = None) -> torch.Tensor:
    """XAttention's block masses of heads q, k (H, N, D), float32 (H, MB, NB): the row softmax over every key group
    of the antidiagonal group scores, summed per (query block, kv block); the same figures as
    ``xattention.block_scores`` per head. Groups are formed as there; the GEMM reads q and k in their own dtype
    (bf16 on the tensor cores) with float32 products and sums. ``config`` overrides the tiling
    (``xattention_config``)."""
    h, n, d = q.shape
    groups = math.ceil(n / stride)
    per_block = block_size // stride
    nb = math.ceil(n / block_size)
    pad = groups * stride - n
    if pad:
        q, k = (torch.nn.functional.pad(t, (0, 0, 0, pad)) for t in (q, k))
    qg = q.reshape(h, groups, stride, d).flip(2).reshape(h, groups, stride * d)  # reversed: the antidiagonal
    kg = k.reshape(h, groups, stride * d).contiguous()
    cfg = {**xattention_config(q.device), **(config or {})}
    # a TMA row must start on 16 bytes
    cfg["USE_TMA"] = cfg["USE_TMA"] and (stride * d * q.element_size()) % 16 == 0
    bn = max(cfg["BN"], per_block)
    tiles = math.ceil(nb * per_block / bn)
    kb_padded = tiles * (bn // per_block)
    out = torch.empty(h, nb, nb, device=q.device)
    qk_scale = 1.0 / (math.sqrt(d) * stride) * math.log2(math.e)
    step = heads_per_chunk(groups * (kb_padded + 2 * tiles) * 4, q.device)
    for h0 in range(0, h, step):
        h1 = min(h0 + step, h)
        part = torch.empty(h1 - h0, groups, kb_padded, device=q.device)
        tile_max, tile_sum = (torch.empty(h1 - h0, groups, tiles, device=q.device) for _ in range(2))
        descriptors = _group_descriptors(qg[h0:h1], kg[h0:h1], cfg["BM"], bn, cfg["BK"]) if cfg["USE_TMA"] \
            else (None, None)
        _xattn_partials_kernel[(triton.cdiv(groups, cfg["BM"]), tiles, h1 - h0)](
            qg[h0:h1], kg[h0:h1], *descriptors, part, tile_max, tile_sum, groups, stride * d, qk_scale,
            qg.stride(0), qg.stride(1), kg.stride(0), kg.stride(1), part.stride(0), part.stride(1),
            tile_max.stride(0), tile_max.stride(1),
            BM=cfg["BM"], BN=bn, BK=cfg["BK"], PB=per_block, USE_TMA=bool(cfg["USE_TMA"]),
            num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
        chunk = out[h0:h1]
        _xattn_combine_kernel[(nb, h1 - h0)](
            part, tile_max, tile_sum, chunk, groups, nb, tiles, part.stride(0), part.stride(1), tile_max.stride(0),
            tile_max.stride(1), chunk.stride(0), chunk.stride(1), PB=per_block, KPT=bn // per_block,
            BLOCK_T=_pow2(tiles), BLOCK_KB=256 if q.is_cuda else 32, num_warps=4)
    return out


def _group_descriptors(qg: torch.Tensor, kg: torch.Tensor, bm: int, bn: int, bk: int) -> tuple:
    """TMA descriptors over the (H, G, S*D) query and key groups, whose per-head bound zero-fills past G."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    def desc(t: torch.Tensor, rows: int) -> TensorDescriptor:
        return TensorDescriptor(t, list(t.shape), list(t.stride()), [1, rows, bk])

    return desc(qg, bm), desc(kg, bn)


def xattention_config(device: torch.device) -> dict[str, int]:
    """Tile sizes of the group GEMM: the fastest of those tried on the H200 (``benchmarks/results/mask-build-h200/``:
    128 x 256 tiles, 4 stages, TMA loads where the GPU has them, sm_90 on), small under the interpreter."""
    if device.type == "cuda":
        tma = torch.cuda.get_device_capability(device)[0] >= 9
        return {"BM": 128, "BN": 256, "BK": 64, "num_warps": 8, "num_stages": 4, "USE_TMA": tma}
    return {"BM": 16, "BN": 32, "BK": 32, "num_warps": 4, "num_stages": 1, "USE_TMA": False}


def xattention_supports(block_size: int, stride: int) -> bool:
    """The kernels' tiling: whole groups per block, in a power-of-two count no larger than a tile."""
    per_block = block_size // stride if block_size % stride == 0 else 0
    return per_block > 0 and per_block & (per_block - 1) == 0 and per_block <= 128


def select_by_mass(scores: torch.Tensor, threshold: float, keep_first_block: bool,
                   keep_diagonal: bool) -> torch.Tensor:
    """XAttention's selection (``xattention.select_blocks``) of every row of ``scores`` (H, MB, NB) at once."""
    h, mb, nb = scores.shape
    scores = scores.contiguous()
    out = torch.empty(h, mb, nb, dtype=torch.bool, device=scores.device)
    view = out.view(torch.int8)
    threshold = torch.tensor([threshold], dtype=torch.float64, device=scores.device)  # a float64, as the reference's
    _select_by_mass_kernel[(mb, h)](scores, view, threshold, nb, scores.stride(0), scores.stride(1),
                                    view.stride(0), view.stride(1), KEEP_FIRST=bool(keep_first_block),
                                    KEEP_DIAGONAL=bool(keep_diagonal), BLOCK=_pow2(nb), num_warps=_row_warps(nb))
    return out


def _row_warps(nb: int) -> int:
    return 8 if nb > 2048 else 4


def spargeattn_select(scores: torch.Tensor, sim_q: torch.Tensor, sim_k: torch.Tensor, simthreshd1: torch.Tensor,
                      cdfthreshd: torch.Tensor, attention_sink: bool) -> torch.Tensor:
    """SpargeAttn's (H, MB, NB) mask from pooled scores (H, MB, NB), block self-similarities sim_q (H, MB) and
    sim_k (H, NB), and each head's thresholds (H,)."""
    h, mb, nb = scores.shape
    scores, sim_q, sim_k = scores.contiguous(), sim_q.contiguous(), sim_k.contiguous()
    out = torch.empty(h, mb, nb, dtype=torch.bool, device=scores.device)
    view = out.view(torch.int8)
    _spargeattn_select_kernel[(mb, h)](
        scores, sim_q, sim_k, simthreshd1.float().contiguous(), cdfthreshd.float().contiguous(), view, nb,
        scores.stride(0), scores.stride(1), sim_q.stride(0), sim_k.stride(0), view.stride(0), view.stride(1),
        SINK=bool(attention_sink), BLOCK=_pow2(nb), num_warps=_row_warps(nb))
    return out


def block_stats(x: torch.Tensor, block_size: int, mean: torch.Tensor | None = None,
                with_similarity: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per block of ``block_size`` tokens of each head of x (H, N, D): the mean token (H, NB, D) and, with
    ``with_similarity``, the mean pairwise cosine (H, NB), both float32, after subtracting ``mean`` (H, D)."""
    h, n, d = x.shape
    nb = math.ceil(n / block_size)
    x = x.contiguous()
    pooled = torch.empty(h, nb, d, device=x.device)
    sim = torch.empty(h, nb, device=x.device) if with_similarity else pooled
    centre = mean.float().contiguous() if mean is not None else pooled
    _block_stats_kernel[(nb, h)](x, centre, pooled, sim, n, x.stride(0), x.stride(1), centre.stride(0),
                                 pooled.stride(0), pooled.stride(1), sim.stride(0), HAS_MEAN=mean is not None,
                                 WITH_SIM=with_similarity, BLOCK_SIZE=block_size, D=d,
                                 num_warps=8 if block_size * d >= 8192 else 4)
    return pooled, sim if with_similarity else None


def block_stats_supports(block_size: int, head_dim: int) -> bool:
    """The stats kernel holds a whole block: power-of-two block size and head dim."""
    return all(v > 0 and v & (v - 1) == 0 for v in (block_size, head_dim)) and block_size * head_dim <= 32768


def diagonal_mass(probs: torch.Tensor, n: int) -> torch.Tensor:
    """``_common.diagonal_mass`` for every head of probs (H, R, n) at once: (H, n) float32."""
    h, rows, _ = probs.shape
    probs = probs.contiguous()
    out = torch.empty(h, n, device=probs.device)
    block = 1024 if probs.is_cuda else 128
    _diagonal_mass_kernel[(triton.cdiv(n, block), h)](probs, out, rows, n, probs.stride(0), probs.stride(1),
                                                      out.stride(0), BLOCK=block, num_warps=4)
    return out


def last_rows_mass(q: torch.Tensor, k: torch.Tensor, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The attention softmax(q_last k^T / sqrt(d)) of each head's last ``rows`` queries (q, k (H, N, D)), summed per
    key and per diagonal distance (``diagonal_mass``): (H, N) float32 each, the heads taken a working-memory budget
    at a time. What FlexPrefill and MInference estimate their patterns from."""
    h, n, d = k.shape
    rows = min(rows, n)
    per_key, per_distance = torch.empty(h, n, device=k.device), torch.empty(h, n, device=k.device)
    step = heads_per_chunk(2 * rows * n * 4, k.device)
    for h0 in range(0, h, step):
        h1 = min(h0 + step, h)
        probs = torch.softmax(logits_f32(q[h0:h1, -rows:], k[h0:h1]).div_(math.sqrt(d)), dim=-1)
        per_key[h0:h1], per_distance[h0:h1] = probs.sum(1), diagonal_mass(probs, n)
    return per_key, per_distance


# candidate cut-offs per pass of ``keep_by_mass``: 4 bits of the cut-off decided per read of the values
_CANDIDATE_BITS = 4


def keep_by_mass(values: torch.Tensor, fraction: float) -> torch.Tensor:
    """Per head of ``values`` (H, L) float32 >= 0, what a descending cumulative sum within ``fraction`` of the head's
    total keeps, ties in index order (a stable sort's): a bool (H, L). The cut-off is bisected on its float bits over
    all of a head's values at once, four bits a read (16 candidate cut-offs summed in float64 per pass); the values
    kept are then marked in three more reads, with no sort or scan over the values."""
    h, length = values.shape
    values = values.contiguous()
    cand = 1 << _CANDIDATE_BITS
    block = 4096 if values.is_cuda else 256
    programs = triton.cdiv(length, block)
    partial = torch.empty(h, programs * cand, dtype=torch.float64, device=values.device)
    prefix = torch.zeros(h, dtype=torch.int32, device=values.device)
    grid, warps = (programs, h), 8 if values.is_cuda else 4
    budget = None
    # bits 30..0 of a non-negative float, four at a time from the top (the first pass decides bits 30..28)
    for shift in range(28, -1, -_CANDIDATE_BITS):
        _candidate_mass_kernel[grid](values, prefix, partial, length, shift, values.stride(0), prefix.stride(0),
                                     partial.stride(0), CAND=cand, BLOCK=block, num_warps=warps)
        mass = partial.view(h, programs, cand).sum(1)  # (H, CAND): the mass at or above each candidate
        if budget is None:  # the first pass: candidate 0 is t = 0, the whole mass
            budget = fraction * mass[:, :1]
        fails = mass > budget
        if shift == 28:  # candidates with the sign bit set are not non-negative floats
            fails[:, 8:] = False
            fails_at_zero = fails[:, 0].clone()
        prefix = prefix | ((fails * torch.arange(cand, device=values.device)).amax(1).to(torch.int32) << shift)
    cut = torch.where(fails_at_zero, prefix, torch.full_like(prefix, -1))
    # the tie group just below the whole values joins in index order while the budget allows: its value (the edge),
    # how many of it fit (count), and each chunk's ties before it (a scan over chunks, not over the values)
    edge_part = torch.empty(h, programs, device=values.device)
    whole_part = torch.empty(h, programs, dtype=torch.float64, device=values.device)
    _whole_mass_kernel[grid](values, cut, edge_part, whole_part, length, values.stride(0), edge_part.stride(0),
                             BLOCK=block, num_warps=warps)
    edge = edge_part.amax(1)
    room = budget[:, 0] - whole_part.sum(1)
    # clamped while still a float: a count past the values means all of the ties, and never overflows the int64
    count = torch.where(edge > 0, torch.floor(room / edge.double().clamp_min(1e-45)), float(length))
    count = count.clamp_max(length).long()
    ties = torch.empty(h, programs, dtype=torch.int64, device=values.device)
    _tie_count_kernel[grid](values, cut, edge, ties, length, values.stride(0), ties.stride(0), BLOCK=block,
                            num_warps=warps)
    before = ties.cumsum(1) - ties
    out = torch.empty(h, length, dtype=torch.bool, device=values.device)
    view = out.view(torch.int8)
    _keep_whole_and_ties_kernel[grid](values, cut, edge, count, before, view, length, values.stride(0),
                                      before.stride(0), view.stride(0), BLOCK=block, num_warps=warps)
    return out
