"""Rounds 1 and 2 of the Stage-1 speed work: one packed product M Y (40 heads x 2841^2, 25 %) with the mask operand
unpacked to bfloat16 (fb2f6e0's kernel: 3 bf16 limbs of Y) or to int8 (Y as 3 balanced base-256 digits of a 22-bit
fixed-point value per column, exact int32 accumulation), at several launch shapes; and the row-NNZ options
for Stage 2. It calls fb2f6e0's ``stage1_cuda._pack_bits`` and ``_centered_matvec_kernel``: run it with that tree's
``wavealign`` on PYTHONPATH. Prints times (triton.testing.do_bench medians) and each product's error against
float64."""

from __future__ import annotations

import json
import os

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

from wavealign import stage1_cuda
from wavealign.masks import synthetic


@triton.jit
def _i8_matvec(P, U, S, OUT, ROWS, N_IN, W, BLOCK_R: tl.constexpr, BLOCK_W: tl.constexpr):
    pid_r, g = tl.program_id(0), tl.program_id(1).to(tl.int64)
    rows = pid_r * BLOCK_R + tl.arange(0, BLOCK_R)
    acc = tl.zeros([BLOCK_R, 16], dtype=tl.int32)
    BC: tl.constexpr = BLOCK_W * 32
    lane = tl.arange(0, 16)[None, :]
    s0 = tl.load(S + g * 2)
    s1 = tl.load(S + g * 2 + 1)
    for w0 in range(0, W, BLOCK_W):
        words = w0 + tl.arange(0, BLOCK_W)
        w = tl.load(P + g * ROWS * W + rows[:, None] * W + words[None, :],
                    mask=(rows[:, None] < ROWS) & (words[None, :] < W), other=0)
        a = ((w[:, :, None] >> tl.arange(0, 32)[None, None, :]) & 1).to(tl.int8).reshape(BLOCK_R, BC)
        cols = (words[:, None] * 32 + tl.arange(0, 32)[None, :]).reshape(BC)
        q0 = (tl.load(U + g * N_IN * 2 + cols * 2, mask=cols < N_IN, other=0.0) * s0).to(tl.int32)
        q1 = (tl.load(U + g * N_IN * 2 + cols * 2 + 1, mask=cols < N_IN, other=0.0) * s1).to(tl.int32)
        a0 = ((q0 + 128) & 255) - 128
        q0 = (q0 - a0) >> 8
        b0 = ((q0 + 128) & 255) - 128
        c0 = (q0 - b0) >> 8
        a1 = ((q1 + 128) & 255) - 128
        q1 = (q1 - a1) >> 8
        b1 = ((q1 + 128) & 255) - 128
        c1 = (q1 - b1) >> 8
        d = tl.where(lane == 0, a0[:, None], 0)
        d = tl.where(lane == 1, b0[:, None], d)
        d = tl.where(lane == 2, c0[:, None], d)
        d = tl.where(lane == 3, a1[:, None], d)
        d = tl.where(lane == 4, b1[:, None], d)
        d = tl.where(lane == 5, c1[:, None], d)
        acc = tl.dot(a, d.to(tl.int8), acc, out_dtype=tl.int32)
    f = acc.to(tl.float32)
    w3 = tl.where(lane % 3 == 0, 1.0, tl.where(lane % 3 == 1, 256.0, 65536.0))
    o0 = tl.sum(tl.where(lane < 3, f * w3, 0.0), axis=1) / s0
    o1 = tl.sum(tl.where((lane >= 3) & (lane < 6), f * w3, 0.0), axis=1) / s1
    tl.store(OUT + g * ROWS * 2 + rows * 2, o0, mask=rows < ROWS)
    tl.store(OUT + g * ROWS * 2 + rows * 2 + 1, o1, mask=rows < ROWS)


def main() -> None:
    g, n = 40, 2841
    mask = synthetic.random_mask(g, n, n, 0.25, seed=0, device="cuda")
    packed, c = stage1_cuda._pack_bits(mask, transpose=False)
    y = torch.randn(g, n, 2, device="cuda")
    ref = torch.bmm(mask.double(), y.double())
    rows_out = {}
    w = -(-n // 32)

    # today's kernel, non-transposed product (its centring subtracts c^T y / MB; add it back for the check)
    for rows, words, warps in [(64, 4, 4)]:
        out = torch.empty(g, n, 2, device="cuda")

        def run_bf16(rows=rows, words=words, warps=warps, out=out):
            stage1_cuda._centered_matvec_kernel[(triton.cdiv(n, rows), g)](
                packed, y, c, out, n, n, w, BLOCK_R=rows, BLOCK_W=words, LIMB=tl.bfloat16, ONE_BITS=0x3F80,
                TRANSPOSED=False, num_warps=warps)
        run_bf16()
        centred = ref - (c.double().unsqueeze(-1) * y.double()).sum(1, keepdim=True) / n
        err = float((out.double() - centred).abs().max() / ref.abs().max())
        rows_out[f"bf16 {rows}x{words}x{warps}"] = {"us": do_bench(run_bf16, warmup=50, rep=300) * 1e3, "rel_err": err}

    for rows, words, warps, stages in [(128, 4, 4, 1), (128, 4, 4, 2), (128, 4, 4, 3), (128, 4, 4, 4),
                                       (64, 4, 4, 3), (64, 4, 2, 3), (128, 2, 4, 3), (128, 8, 4, 3),
                                       (256, 4, 8, 3), (32, 4, 2, 3), (64, 8, 2, 3)]:
        out = torch.empty(g, n, 2, device="cuda")
        scale = (2.0 ** 22) / y.abs().amax(1).clamp_min(1e-30)

        def run_i8(rows=rows, words=words, warps=warps, stages=stages, out=out, scale=scale):
            return _i8_matvec[(triton.cdiv(n, rows), g)](packed, y, scale, out, n, n, w, BLOCK_R=rows,
                                                          BLOCK_W=words, num_warps=warps, num_stages=stages)
        try:
            kern = run_i8()
        except Exception as exc:  # a shape Triton refuses: record and go on
            rows_out[f"int8 {rows}x{words}x{warps}x{stages}"] = {"error": repr(exc)[:200]}
            continue
        err = float((out.double() - ref).abs().max() / ref.abs().max())
        rows_out[f"int8 {rows}x{words}x{warps}x{stages}"] = {
            "us": do_bench(run_i8, warmup=50, rep=300) * 1e3, "rel_err": err, "regs": kern.n_regs,
            "spills": kern.n_spills, "smem": kern.metadata.shared}

    out_dir = os.environ.get("OUT", "/tmp")
    with open(f"{out_dir}/matvec_variants.json", "w") as fh:
        json.dump(rows_out, fh, indent=1)
    for k, v in rows_out.items():
        print(f"{k:32s} {v}")


main()
