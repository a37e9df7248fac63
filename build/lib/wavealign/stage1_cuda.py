"""Stage 1 of WaveAlign (paper Alg. 1) on a CUDA mask: packed bits and tensor-core products.

The mask is bit-packed (40 heads x 2841^2 bits = 40 MB, L2-resident on H100/H200) and both products of
Alg. 1 run on tensor cores: the 0/1 bits are exact in bfloat16, and each 2-column block is split into three
bfloat16 limbs (~24 mantissa bits, as float32), so one 16-wide MMA carries both columns at fp32 accuracy.
Centering (lines 4-5) and the orthonormalisation (line 6, as Cholesky-QR: Y depends on Z only through
span(Z), so Z = X R never needs forming) are folded into the kernels: two launches per iteration.
"""

from __future__ import annotations

import torch

from wavealign import subspace

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only installs
    triton = None

# launch shape of the packed matrix-vector kernels (rows per program, 32-bit words per step, warps)
FAST_BLOCKS = {"rows": 64, "words": 4, "warps": 4}

if triton is not None:

    @triton.jit
    def _pack_bits_kernel(M, P, C, ROWS, COLS, W, stride_r, stride_c, BLOCK_R: tl.constexpr,
                          BLOCK_W: tl.constexpr):
        """Pack a (ROWS, COLS) bool matrix of one head into 32-bit words along COLS; add column sums to C."""
        pid_r, pid_w, g = tl.program_id(0), tl.program_id(1), tl.program_id(2).to(tl.int64)
        rows = pid_r * BLOCK_R + tl.arange(0, BLOCK_R)
        words = pid_w * BLOCK_W + tl.arange(0, BLOCK_W)
        bit = tl.arange(0, 32)
        cols = words[:, None] * 32 + bit[None, :]
        inside = (rows[:, None, None] < ROWS) & (cols[None, :, :] < COLS)
        m = tl.load(M + g * ROWS * COLS + rows[:, None, None] * stride_r + cols[None, :, :] * stride_c,
                    mask=inside, other=0).to(tl.int32)
        packed = tl.sum(m << bit[None, None, :], axis=2)  # distinct bits: the sum is their OR
        tl.store(P + g * ROWS * W + rows[:, None] * W + words[None, :], packed,
                 mask=(rows[:, None] < ROWS) & (words[None, :] < W))
        tl.atomic_add(C + g * COLS + cols, tl.sum(m, axis=0).to(tl.float32), mask=cols < COLS)

    @triton.jit
    def _unpack_bits(P, rows, words, ROWS, W, LIMB: tl.constexpr, ONE_BITS: tl.constexpr):
        """The (rows, 32 * words) 0/1 tile of packed bits in the limb dtype (1.0 built from its bit pattern)."""
        w = tl.load(P + rows[:, None] * W + words[None, :], mask=(rows[:, None] < ROWS) & (words[None, :] < W),
                    other=0)
        bits = (w[:, :, None] >> tl.arange(0, 32)[None, None, :]) & 1
        return (bits * ONE_BITS).to(tl.int16).to(LIMB, bitcast=True).reshape(rows.shape[0], words.shape[0] * 32)

    @triton.jit
    def _limbs(x0, x1, LIMB: tl.constexpr):
        """The (n, 16) operand [x0 hi, mid, lo, x1 hi, mid, lo, 0, ...] of two float32 columns."""
        lane = tl.arange(0, 16)[None, :]
        h0 = x0.to(LIMB).to(tl.float32)
        m0 = (x0 - h0).to(LIMB).to(tl.float32)
        l0 = (x0 - h0 - m0).to(LIMB).to(tl.float32)
        h1 = x1.to(LIMB).to(tl.float32)
        m1 = (x1 - h1).to(LIMB).to(tl.float32)
        l1 = (x1 - h1 - m1).to(LIMB).to(tl.float32)
        out = tl.where(lane == 0, h0[:, None], 0.0)
        out = tl.where(lane == 1, m0[:, None], out)
        out = tl.where(lane == 2, l0[:, None], out)
        out = tl.where(lane == 3, h1[:, None], out)
        out = tl.where(lane == 4, m1[:, None], out)
        out = tl.where(lane == 5, l1[:, None], out)
        return out.to(LIMB)

    @triton.jit
    def _limb_sum(acc, first: tl.constexpr):
        lane = tl.arange(0, 16)[None, :]
        return tl.sum(tl.where((lane >= first) & (lane < first + 3), acc, 0.0), axis=1)

    @triton.jit
    def _centered_matvec_kernel(P, U, C, OUT, ROWS, N_IN, W, BLOCK_R: tl.constexpr, BLOCK_W: tl.constexpr,
                                LIMB: tl.constexpr, ONE_BITS: tl.constexpr, TRANSPOSED: tl.constexpr):
        """OUT = A U for BLOCK_R rows of one head's packed A, centred. A = M: Z = M Y - 1 (c^T Y) / MB
        (Alg. 1 line 5). A = M^T (TRANSPOSED): Y = (M^T Z - c (1^T Z) / MB) R^-1 with Z^T Z = R^T R
        (lines 4 and 6: the Cholesky-QR of Z folded in)."""
        pid_r, g = tl.program_id(0), tl.program_id(1).to(tl.int64)
        rows = pid_r * BLOCK_R + tl.arange(0, BLOCK_R)
        acc = tl.zeros([BLOCK_R, 16], dtype=tl.float32)
        BC: tl.constexpr = BLOCK_W * 32
        t00 = tl.zeros([BC], dtype=tl.float32)
        t01 = tl.zeros([BC], dtype=tl.float32)
        t11 = tl.zeros([BC], dtype=tl.float32)
        t0 = tl.zeros([BC], dtype=tl.float32)
        t1 = tl.zeros([BC], dtype=tl.float32)
        for w0 in range(0, W, BLOCK_W):
            words = w0 + tl.arange(0, BLOCK_W)
            a = _unpack_bits(P + g * ROWS * W, rows, words, ROWS, W, LIMB, ONE_BITS)
            cols = (words[:, None] * 32 + tl.arange(0, 32)[None, :]).reshape(BC)
            u0 = tl.load(U + g * N_IN * 2 + cols * 2, mask=cols < N_IN, other=0.0)
            u1 = tl.load(U + g * N_IN * 2 + cols * 2 + 1, mask=cols < N_IN, other=0.0)
            acc = tl.dot(a, _limbs(u0, u1, LIMB), acc)
            if TRANSPOSED:  # Gram matrix and sums of Z's columns (every program sees all of Z)
                t00 += u0 * u0
                t01 += u0 * u1
                t11 += u1 * u1
                t0 += u0
                t1 += u1
            else:  # c^T Y
                c = tl.load(C + g * N_IN + cols, mask=cols < N_IN, other=0.0)
                t00 += c * u0
                t11 += c * u1
        o0 = _limb_sum(acc, 0)
        o1 = _limb_sum(acc, 3)
        if TRANSPOSED:
            c_rows = tl.load(C + g * ROWS + rows, mask=rows < ROWS, other=0.0)
            o0 -= c_rows * (tl.sum(t0, 0) / N_IN)
            o1 -= c_rows * (tl.sum(t1, 0) / N_IN)
            r11 = tl.sqrt(tl.maximum(tl.sum(t00, 0), 1e-30))
            r12 = tl.sum(t01, 0) / r11
            r22 = tl.sqrt(tl.maximum(tl.sum(t11, 0) - r12 * r12, 1e-30))
            o0 = o0 / r11
            o1 = (o1 - r12 * o0) / r22
        else:
            o0 -= tl.sum(t00, 0) / ROWS
            o1 -= tl.sum(t11, 0) / ROWS
        tl.store(OUT + g * ROWS * 2 + rows * 2, o0, mask=rows < ROWS)
        tl.store(OUT + g * ROWS * 2 + rows * 2 + 1, o1, mask=rows < ROWS)


def _pack_bits(mask: torch.Tensor, transpose: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Words (G, R, ceil(C/32)) int32 of ``mask`` (G, MB, NB) or its transpose, and their column sums (G, C)."""
    g, mb, nb = mask.shape
    rows, cols = (nb, mb) if transpose else (mb, nb)
    strides = (1, nb) if transpose else (nb, 1)
    words = -(-cols // 32)
    packed = torch.empty(g, rows, words, dtype=torch.int32, device=mask.device)
    sums = torch.zeros(g, cols, dtype=torch.float32, device=mask.device)
    grid = (triton.cdiv(rows, 32), triton.cdiv(words, 4), g)
    _pack_bits_kernel[grid](mask.view(torch.uint8), packed, sums, rows, cols, words, *strides, BLOCK_R=32,
                            BLOCK_W=4, num_warps=4)
    return packed, sums


def _eigh2(s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Eigenvalues (descending) and eigenvectors (as columns) of symmetric (G, 2, 2) matrices, in closed form."""
    a, b, d = s[:, 0, 0], s[:, 0, 1], s[:, 1, 1]
    mean, half = (a + d) / 2, torch.sqrt(((a - d) / 2) ** 2 + b * b)
    theta = 0.5 * torch.atan2(2 * b, a - d)
    cos, sin = torch.cos(theta), torch.sin(theta)
    vecs = torch.stack((torch.stack((cos, -sin), -1), torch.stack((sin, cos), -1)), -2)
    return torch.stack((mean + half, mean - half), -1), vecs


def centered_top2(mask: torch.Tensor, iters: int, seed: int, rayleigh_ritz: bool, *, limb=None,
                        rows: int | None = None, words: int | None = None, warps: int | None = None):
    """``centered_top2`` on a CUDA mask through the packed tensor-core kernels (same start, same iterations)."""
    g, mb, nb = mask.shape
    rows, words, warps = rows or FAST_BLOCKS["rows"], words or FAST_BLOCKS["words"], warps or FAST_BLOCKS["warps"]
    limb = limb or torch.bfloat16
    lt, one_bits = (tl.bfloat16, 0x3F80) if limb == torch.bfloat16 else (tl.float16, 0x3C00)
    mask = mask.contiguous()
    packed, c = _pack_bits(mask, transpose=False)
    packed_t, _ = _pack_bits(mask, transpose=True)
    z = subspace.start_block(g, mb, seed, mask.device).transpose(1, 2).contiguous()  # the CPU path's start
    y = torch.empty(g, nb, 2, dtype=torch.float32, device=mask.device)
    opts = {"BLOCK_R": rows, "BLOCK_W": words, "LIMB": lt, "ONE_BITS": one_bits, "num_warps": warps}

    def t_matvec(zz: torch.Tensor) -> None:  # y = centred M^T zz R^-1
        _centered_matvec_kernel[(triton.cdiv(nb, rows), g)](packed_t, zz, c, y, nb, mb, -(-mb // 32),
                                                            TRANSPOSED=True, **opts)

    for _ in range(iters):
        t_matvec(z)
        _centered_matvec_kernel[(triton.cdiv(mb, rows), g)](packed, y, c, z, mb, nb, -(-nb // 32),
                                                            TRANSPOSED=False, **opts)
    x = subspace.orth2(z.transpose(1, 2)).transpose(1, 2).contiguous()
    t_matvec(x)  # x is orthonormal, so R = I up to rounding: y = C^T x
    evals, evecs = _eigh2(torch.bmm(y.transpose(1, 2), y).double())
    if rayleigh_ritz:
        x = torch.bmm(x.double(), evecs).float()
    return x, evals.clamp_min(0).sqrt().float()


def usable(mask: torch.Tensor) -> bool:
    """Whether ``mask`` can take this path: a CUDA tensor on an sm_80+ GPU with Triton installed."""
    return triton is not None and mask.is_cuda and torch.cuda.get_device_capability(mask.device)[0] >= 8
