"""Attempt (issue 17 item 3, 2026-12-01): FlashAttention-3's intra-warpgroup overlap written in plain Triton.

Each iteration issues the NEXT K/V tile's Q K^T before this tile's softmax, hoping that Hopper's asynchronous
wgmma runs under the exp2s. Compiled only, for its SASS (``sass_sm90.py --kernel``): Triton 3.6 waits for every
wgmma right after issuing it (``WARPGROUP.DEPBAR.LE gsb0, 0x0`` before the softmax), so nothing overlaps, and the
extra live tile takes the kernel to 255 registers. Not a backend: full rows only (no ragged tail), one launch
order, a permutation always given. The arguments are the backend kernel's, so the same compile applies.
"""
import triton
import triton.language as tl


@triton.jit
def _softmax_p(qk, m_i, l_i, qk_scale):
    m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
    p = tl.math.exp2(qk * qk_scale - m_new[:, None])
    alpha = tl.math.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    return p, alpha, l_i, m_new


@triton.jit
def overlap_fwd(
    Q, K, V, O, KV_NUM, KV_IDX, PERM,
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
    HAS_PERM: tl.constexpr, HEADS_FASTEST: tl.constexpr, USE_TMA: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr, FLAT_LOADS: tl.constexpr, KV_EVICTION: tl.constexpr,
):
    slot = tl.program_id(0)
    bh = tl.program_id(1)
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    TILES: tl.constexpr = BLOCK_SIZE // BLOCK_N
    q_blk = tl.load(PERM + b * stride_pb + h * stride_ph + slot).to(tl.int32)
    start_m = q_blk * BLOCK_SIZE
    row = bh
    q = q_desc.load([row * N_Q + start_m, 0])
    n_sel = tl.load(KV_NUM + b * stride_cb + h * stride_ch + q_blk)
    idx_ptr = KV_IDX + b * stride_ib + h * stride_ih + q_blk * stride_im
    n_t = n_sel * TILES
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    kv0 = tl.load(idx_ptr)
    k = k_desc.load([row * N_KV + kv0 * BLOCK_SIZE, 0])
    qk = tl.dot(q, tl.trans(k))
    for t in tl.range(0, n_t - 1):
        kv_blk = tl.load(idx_ptr + t // TILES)
        v = v_desc.load([row * N_KV + kv_blk * BLOCK_SIZE + (t % TILES) * BLOCK_N, 0])
        nxt = tl.load(idx_ptr + (t + 1) // TILES)
        k_next = k_desc.load([row * N_KV + nxt * BLOCK_SIZE + ((t + 1) % TILES) * BLOCK_N, 0])
        qk_next = tl.dot(q, tl.trans(k_next))
        p, alpha, l_i, m_i = _softmax_p(qk, m_i, l_i, qk_scale)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        qk = qk_next
    last = tl.load(idx_ptr + (n_t - 1) // TILES)
    v = v_desc.load([row * N_KV + last * BLOCK_SIZE + ((n_t - 1) % TILES) * BLOCK_N, 0])
    p, alpha, l_i, m_i = _softmax_p(qk, m_i, l_i, qk_scale)
    acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    out = (acc / l_safe[:, None]).to(O.dtype.element_ty)
    o_desc.store([row, start_m, 0], out.reshape(1, BLOCK_M, HEAD_DIM))
