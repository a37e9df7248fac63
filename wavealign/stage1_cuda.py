"""Stage 1 of WaveAlign (paper Alg. 1) on a CUDA mask: packed bits and int8 tensor-core products; and the row
counts Stage 2 sorts by.

The mask is bit-packed once, row-major and transposed, in one pass (40 heads x 2841^2 bits = 40 MB a copy), and
both products of Alg. 1 run on int8 tensor cores: the 0/1 bits are the int8 operand, and each 2-column block is
turned into three balanced base-256 digits of a 22-bit fixed-point value per column (scaled by the column's
largest magnitude), so one 16-wide MMA carries both columns and accumulates them exactly in int32. int8 operands
unpack with fewer instructions and half the shared memory of bfloat16 ones, and the MMA runs at twice the rate.
Centering (lines 4-5) and the orthonormalisation (line 6, as Cholesky-QR: Y depends on Z only through span(Z), so
Z = X R never needs forming) are folded into the kernels, and each product leaves its output's column maxima for
the next one: two launches per iteration, and no wait for the host until the end.
"""

from __future__ import annotations

import functools

import torch

from wavealign import subspace

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only installs
    triton = None

# launch shape of the packed products (rows per program, 32-bit words per step, warps, pipeline stages), tuned on
# the H200 (benchmarks/results/plan-h200); "rows" halves when the heads are too few to give every SM two programs
FAST_BLOCKS = {"rows": 128, "words": 4, "warps": 4, "stages": 3}
# launch shape of the one-pass pack: 32-bit words per program along each row, warps
PACK_BLOCKS = {"words": 2, "warps": 2}
if triton is not None:
    # the fixed-point scale of a product's input: a column's largest magnitude maps to 2^22, so three signed 8-bit
    # digits hold it (|top digit| <= 65)
    FIXED_ONE = tl.constexpr(float(2**22))

    @triton.jit
    def _pack_kernel(M, P, PT, C, ROWS, COLS, W, WT, BLOCK_W: tl.constexpr):
        """Pack a (32 rows, 32 * BLOCK_W cols) tile of one head's bool mask into 32-bit words twice: along the
        columns into P (ROWS, W) and along the rows into PT (COLS, WT), the transposed mask; add column sums to C."""
        pid_r, pid_w, g = tl.program_id(0), tl.program_id(1), tl.program_id(2).to(tl.int64)
        bit = tl.arange(0, 32)
        rows = pid_r * 32 + bit
        words = pid_w * BLOCK_W + tl.arange(0, BLOCK_W)
        cols = words[:, None] * 32 + bit[None, :]
        inside = (rows[:, None, None] < ROWS) & (cols[None, :, :] < COLS)
        m = tl.load(M + g * ROWS * COLS + rows[:, None, None] * COLS + cols[None, :, :], mask=inside,
                    other=0).to(tl.int32)
        # distinct bits: the sums are their OR
        tl.store(P + g * ROWS * W + rows[:, None] * W + words[None, :], tl.sum(m << bit[None, None, :], axis=2),
                 mask=(rows[:, None] < ROWS) & (words[None, :] < W))
        tl.store(PT + g * COLS * WT + cols * WT + pid_r, tl.sum(m << bit[:, None, None], axis=0), mask=cols < COLS)
        tl.atomic_add(C + g * COLS + cols, tl.sum(m, axis=0).to(tl.float32), mask=cols < COLS)

    @triton.jit
    def _row_nnz_kernel(M, NNZ, ROWS, COLS, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
        """NNZ[r] = number of set entries of row r of a (ROWS, COLS) bool matrix, BLOCK_R rows per program."""
        rows = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
        total = tl.zeros([BLOCK_R], dtype=tl.int32)
        for c0 in range(0, COLS, BLOCK_C):
            cols = c0 + tl.arange(0, BLOCK_C)
            m = tl.load(M + rows[:, None] * COLS + cols[None, :], mask=(rows[:, None] < ROWS) & (cols[None, :] < COLS),
                        other=0)
            total += tl.sum(m.to(tl.int32), axis=1)
        tl.store(NNZ + rows, total, mask=rows < ROWS)

    @triton.jit
    def _digits(x0, x1):
        """The (n, 16) int8 operand [x0 low, mid, high, x1 low, mid, high, 0, ...] of two columns already scaled
        to [-2^22, 2^22]: balanced base-256 digits, so x = low + 256 mid + 65536 high exactly."""
        lane = tl.arange(0, 16)[None, :]
        q0 = x0.to(tl.int32)
        q1 = x1.to(tl.int32)
        low0 = ((q0 + 128) & 255) - 128
        q0 = (q0 - low0) >> 8
        mid0 = ((q0 + 128) & 255) - 128
        low1 = ((q1 + 128) & 255) - 128
        q1 = (q1 - low1) >> 8
        mid1 = ((q1 + 128) & 255) - 128
        out = tl.where(lane == 0, low0[:, None], 0)
        out = tl.where(lane == 1, mid0[:, None], out)
        out = tl.where(lane == 2, ((q0 - mid0) >> 8)[:, None], out)
        out = tl.where(lane == 3, low1[:, None], out)
        out = tl.where(lane == 4, mid1[:, None], out)
        out = tl.where(lane == 5, ((q1 - mid1) >> 8)[:, None], out)
        return out.to(tl.int8)

    @triton.jit
    def _digit_sum(acc, first: tl.constexpr):
        """The value of the column whose three digits' products sit in lanes first..first+2 of ``acc``."""
        lane = tl.arange(0, 16)[None, :]
        weight = tl.where(lane == first, 1.0, tl.where(lane == first + 1, 256.0, 65536.0))
        return tl.sum(tl.where((lane >= first) & (lane < first + 3), acc.to(tl.float32) * weight, 0.0), axis=1)

    @triton.jit
    def _centered_product_kernel(P, U, SU, C, OUT, SOUT, ROWS, N_IN, W, BLOCK_R: tl.constexpr,
                                 BLOCK_W: tl.constexpr, TRANSPOSED: tl.constexpr):
        """OUT = A U for BLOCK_R rows of one head's packed A, centred. A = M: Z = M Y - 1 (c^T Y) / MB
        (Alg. 1 line 5). A = M^T (TRANSPOSED): Y = (M^T Z - c (1^T Z) / MB) R^-1 with Z^T Z = R^T R
        (lines 4 and 6: the Cholesky-QR of Z folded in). SU holds U's column maxima |U| (the fixed-point
        scale); the maxima of OUT are atomically gathered into SOUT (zeroed) for the next product."""
        pid_r, g = tl.program_id(0), tl.program_id(1).to(tl.int64)
        rows = pid_r * BLOCK_R + tl.arange(0, BLOCK_R)
        bit = tl.arange(0, 32)
        s0 = tl.load(SU + g * 2)
        s1 = tl.load(SU + g * 2 + 1)
        f0 = tl.where(s0 > 0, FIXED_ONE / s0, 0.0)
        f1 = tl.where(s1 > 0, FIXED_ONE / s1, 0.0)
        acc = tl.zeros([BLOCK_R, 16], dtype=tl.int32)
        BC: tl.constexpr = BLOCK_W * 32
        t00 = tl.zeros([BC], dtype=tl.float32)
        t01 = tl.zeros([BC], dtype=tl.float32)
        t11 = tl.zeros([BC], dtype=tl.float32)
        t0 = tl.zeros([BC], dtype=tl.float32)
        t1 = tl.zeros([BC], dtype=tl.float32)
        for w0 in range(0, W, BLOCK_W):
            words = w0 + tl.arange(0, BLOCK_W)
            w = tl.load(P + g * ROWS * W + rows[:, None] * W + words[None, :],
                        mask=(rows[:, None] < ROWS) & (words[None, :] < W), other=0)
            a = ((w[:, :, None] >> bit[None, None, :]) & 1).to(tl.int8).reshape(BLOCK_R, BC)
            cols = (words[:, None] * 32 + bit[None, :]).reshape(BC)
            u0 = tl.load(U + g * N_IN * 2 + cols * 2, mask=cols < N_IN, other=0.0)
            u1 = tl.load(U + g * N_IN * 2 + cols * 2 + 1, mask=cols < N_IN, other=0.0)
            acc = tl.dot(a, _digits(u0 * f0, u1 * f1), acc, out_dtype=tl.int32)
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
        o0 = tl.where(f0 > 0, _digit_sum(acc, 0) / f0, 0.0)
        o1 = tl.where(f1 > 0, _digit_sum(acc, 3) / f1, 0.0)
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
        inside = rows < ROWS
        tl.store(OUT + g * ROWS * 2 + rows * 2, o0, mask=inside)
        tl.store(OUT + g * ROWS * 2 + rows * 2 + 1, o1, mask=inside)
        tl.atomic_max(SOUT + g * 2, tl.max(tl.where(inside, tl.abs(o0), 0.0), 0))
        tl.atomic_max(SOUT + g * 2 + 1, tl.max(tl.where(inside, tl.abs(o1), 0.0), 0))


def pack(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Int32 words of a (G, MB, NB) bool CUDA mask, (G, MB, ceil(NB/32)), and of its transpose, (G, NB,
    ceil(MB/32)), from one read of the mask; and its column sums c = M^T 1 (G, NB) float32."""
    g, mb, nb = mask.shape
    words, words_t = -(-nb // 32), -(-mb // 32)
    packed = torch.empty(g, mb, words, dtype=torch.int32, device=mask.device)
    packed_t = torch.empty(g, nb, words_t, dtype=torch.int32, device=mask.device)
    sums = torch.zeros(g, nb, dtype=torch.float32, device=mask.device)
    _pack_kernel[(words_t, triton.cdiv(words, PACK_BLOCKS["words"]), g)](
        mask.contiguous().view(torch.uint8), packed, packed_t, sums, mb, nb, words, words_t,
        BLOCK_W=PACK_BLOCKS["words"], num_warps=PACK_BLOCKS["warps"])
    return packed, packed_t, sums


def row_nnz(mask: torch.Tensor) -> torch.Tensor:
    """Set entries per row of a (..., MB, NB) bool CUDA mask, int32 (..., MB), in one read (``mask.sum(-1)`` widens
    every entry to int64 first: 20x the bytes)."""
    flat = mask.contiguous().view(torch.uint8).reshape(-1, mask.shape[-1])
    nnz = torch.empty(flat.shape[0], dtype=torch.int32, device=mask.device)
    _row_nnz_kernel[(triton.cdiv(flat.shape[0], 16),)](flat, nnz, flat.shape[0], flat.shape[1], BLOCK_R=16,
                                                      BLOCK_C=512, num_warps=4)
    return nnz.reshape(mask.shape[:-1])


def _eigh2(s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Eigenvalues (descending) and eigenvectors (as columns) of symmetric (G, 2, 2) matrices, in closed form."""
    a, b, d = s[:, 0, 0], s[:, 0, 1], s[:, 1, 1]
    mean, half = (a + d) / 2, torch.sqrt(((a - d) / 2) ** 2 + b * b)
    theta = 0.5 * torch.atan2(2 * b, a - d)
    cos, sin = torch.cos(theta), torch.sin(theta)
    vecs = torch.stack((torch.stack((cos, -sin), -1), torch.stack((sin, cos), -1)), -2)
    return torch.stack((mean + half, mean - half), -1), vecs


def _rows_per_program(programs: int, device: torch.device) -> int:
    """FAST_BLOCKS' rows, or half as many when ``programs`` of that size would leave an SM with fewer than two."""
    if device.type == "cuda" and programs < 2 * torch.cuda.get_device_properties(device).multi_processor_count:
        return FAST_BLOCKS["rows"] // 2
    return FAST_BLOCKS["rows"]


@functools.lru_cache(maxsize=16)
def _start(mb: int, seed: int, device: torch.device) -> torch.Tensor:
    """The CPU path's orthonormal start block for one head, (MB, 2), kept on ``device``: copying it from the host
    on every plan would make the host wait for the GPU's queue to drain."""
    return subspace.start_block(1, mb, seed, device)[0].t().contiguous()


def centered_top2(mask: torch.Tensor, iters: int, seed: int, rayleigh_ritz: bool, *, rows: int | None = None,
                  words: int | None = None, warps: int | None = None, pipeline_stages: int | None = None):
    """``centered_top2`` on a CUDA mask through the packed tensor-core kernels (same start, same iterations)."""
    g, mb, nb = mask.shape
    opts = {"BLOCK_R": rows or _rows_per_program(g * triton.cdiv(min(mb, nb), FAST_BLOCKS["rows"]), mask.device),
            "BLOCK_W": words or FAST_BLOCKS["words"],
            "num_warps": warps or FAST_BLOCKS["warps"], "num_stages": pipeline_stages or FAST_BLOCKS["stages"]}
    packed, packed_t, c = pack(mask)
    z = _start(mb, seed, mask.device).expand(g, mb, 2).contiguous()
    y = torch.empty(g, nb, 2, dtype=torch.float32, device=mask.device)
    # column maxima of each product's input: slot 0 the start's, slot k + 1 the k-th product's output's
    maxima = torch.zeros(2 * iters + 2, g, 2, dtype=torch.float32, device=mask.device)
    maxima[0] = z.abs().amax(1)

    def product(a: torch.Tensor, u: torch.Tensor, out: torch.Tensor, slot: int, transposed: bool) -> None:
        n_out, n_in = out.shape[1], u.shape[1]
        _centered_product_kernel[(triton.cdiv(n_out, opts["BLOCK_R"]), g)](
            a, u, maxima[slot], c, out, maxima[slot + 1], n_out, n_in, -(-n_in // 32), TRANSPOSED=transposed, **opts)

    for k in range(iters):
        product(packed_t, z, y, 2 * k, transposed=True)  # y = centred M^T z R^-1
        product(packed, y, z, 2 * k + 1, transposed=False)  # z = centred M y
    x = subspace.orth2(z.transpose(1, 2)).transpose(1, 2).contiguous()
    maxima[2 * iters] = x.abs().amax(1)
    product(packed_t, x, y, 2 * iters, transposed=True)  # x is orthonormal, so R = I up to rounding: y = C^T x
    evals, evecs = _eigh2(torch.bmm(y.transpose(1, 2), y).double())
    if rayleigh_ritz:
        x = torch.bmm(x.double(), evecs).float()
    return x, evals.clamp_min(0).sqrt().float()


def usable(mask: torch.Tensor) -> bool:
    """Whether ``mask`` can take this path: a CUDA tensor on an sm_80+ GPU with Triton installed."""
    return triton is not None and mask.is_cuda and torch.cuda.get_device_capability(mask.device)[0] >= 8
