"""Attempt (issue 17 item 3): the block-sparse forward in Gluon, with FlashAttention-3's intra-warpgroup overlap.

Round 4 (TUNING.md) found that Triton 3.6 waits for every wgmma before the softmax, so each warpgroup's tensor
cores stop while it computes exp2s. Gluon (``triton.experimental.gluon``, in Triton 3.6) exposes the asynchronous
wgmma and its waits, so each K/V step here is ordered as:

    issue S_j = Q K_j^T                      (async)
    issue O  += P_{j-1} V_{j-1}               (async)
    wait until at most one group is in flight: S_j is done, P_{j-1} V_{j-1} may still run
    softmax of S_j -> P_j, alpha_j           (CUDA cores, while the tensor cores run P_{j-1} V_{j-1})
    wait for P_{j-1} V_{j-1}; O *= alpha_j

K and V sit in two rings of three shared-memory stages filled by TMA, each stage with its own mbarrier; a stage is
refilled one CTA barrier after the last wgmma that read it retired. The row order is read in-kernel as the
``triton`` backend does (launch slot p of head h runs query block perm[h, p]); the mask comes in kv-index form.

Scope, as an attempt: bf16, head dim 128, 128 x 128 mask blocks, 8 warps (two warpgroups of 64 query rows), one
batch element per launch row (B*H rows of flat (B*H*N, D) views). K/V rows past a head's end in its last block are
read from the next head (or zero-filled past the tensor): their scores are set to -inf, so they add 0 x V, which is
exact unless V holds a NaN or an infinity there. Output rows past N are not stored.

Compiled for sm_90 without a GPU (``--sass``). On the H200 (2026-12-01, ``TUNING.md`` round 6) it matched the
``triton`` backend exactly and ran at 490 TFLOP/s dense against its 445. ``--check --time`` compares its output
with plain float32 attention and the ``triton`` backend's on an edge-case mask, then times both (CUDA events, L2
flushed, medians); ``timeout`` and ``-u`` keep what came before a hang:

    PYTHONPATH=$PWD timeout 240 python3 -u benchmarks/results/kernels-h200/attempt_gluon_fa3.py \
        --check --time --out $OUT
"""

from __future__ import annotations

import argparse
import functools
import json
import math
from pathlib import Path

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait

BLOCK = 128
HEAD_DIM = 128
STAGES = 3
NUM_WARPS = 8


@gluon.jit
def _softmax_step(s, m_i, l_i, limit, qk_scale, cols, TAIL: gl.constexpr):
    """One K/V tile of the online softmax in base 2: the tile's P (fp32), the rescale factor and the new row
    max and sum. Columns at or past ``limit`` (the head's end, in the ragged last block) score -inf."""
    if TAIL:
        s = gl.where(cols[None, :] < limit, s, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, 1) * qk_scale)
    p = gl.exp2(s * qk_scale - m_new[:, None])
    alpha = gl.exp2(m_i - m_new)
    return p, alpha, l_i * alpha + gl.sum(p, 1), m_new


@gluon.jit
def _load_k(k_desc, k_smem, k_bar, idx_ptr, t, n, row0, BLOCK: gl.constexpr, STAGES: gl.constexpr):
    """Start the TMA load of tile ``t``'s K into its ring stage (nothing when ``t`` is past the row's end)."""
    stage = t % STAGES
    go = t < n
    blk = gl.load(idx_ptr + t, mask=go, other=0)
    mbarrier.expect(k_bar.index(stage), k_desc.block_type.nbytes, pred=go)
    tma.async_copy_global_to_shared(k_desc, [row0 + blk * BLOCK, 0], k_bar.index(stage), k_smem.index(stage), pred=go)


@gluon.jit
def _fa3_block_sparse_fwd(q_desc, k_desc, v_desc, O, KV_NUM, KV_IDX, PERM,
                          H, N_Q, N_KV, NB, qk_scale, stride_ch, stride_ih, stride_im, stride_ph,
                          HEAD_DIM: gl.constexpr, BLOCK: gl.constexpr, STAGES: gl.constexpr,
                          NUM_WARPS: gl.constexpr):
    slot = gl.program_id(0)
    bh = gl.program_id(1)
    h = bh % H
    q_blk = gl.load(PERM + h * stride_ph + slot).to(gl.int32)
    n = gl.load(KV_NUM + h * stride_ch + q_blk)
    idx_ptr = KV_IDX + h * stride_ih + q_blk * stride_im
    start_m = q_blk * BLOCK
    q_row0 = bh * N_Q
    kv_row0 = bh * N_KV

    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NUM_WARPS, 1],
                                                  instr_shape=[16, BLOCK, 16])
    p_operand: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
    rows_of: gl.constexpr = gl.SliceLayout(1, mma)
    cols_of: gl.constexpr = gl.SliceLayout(0, mma)
    dtype: gl.constexpr = q_desc.dtype

    q_smem = gl.allocate_shared_memory(dtype, [BLOCK, HEAD_DIM], q_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK, HEAD_DIM], v_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1, 1], mbarrier.MBarrierLayout())
    k_bar = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_bar = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar.index(0), count=1)
    for st in gl.static_range(STAGES):
        mbarrier.init(k_bar.index(st), count=1)
        mbarrier.init(v_bar.index(st), count=1)
    gl.thread_barrier()  # every thread sees the barriers initialised before any waits on them

    cols = gl.arange(0, BLOCK, layout=cols_of)
    m_i = gl.full([BLOCK], float("-inf"), gl.float32, rows_of)
    l_i = gl.zeros([BLOCK], gl.float32, rows_of)
    acc = gl.zeros([BLOCK, HEAD_DIM], gl.float32, mma)
    if n > 0:
        # prologue: Q, K of tiles 0-2 (the whole K ring), V of tiles 0-1; then S_0 and its softmax
        mbarrier.expect(q_bar.index(0), q_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(q_desc, [q_row0 + start_m, 0], q_bar.index(0), q_smem)
        for t in gl.static_range(STAGES):
            _load_k(k_desc, k_smem, k_bar, idx_ptr, t, n, kv_row0, BLOCK, STAGES)
        for t in gl.static_range(STAGES - 1):
            _load_k(v_desc, v_smem, v_bar, idx_ptr, t, n, kv_row0, BLOCK, STAGES)
        mbarrier.wait(q_bar.index(0), 0)
        mbarrier.wait(k_bar.index(0), 0)
        s_tok = warpgroup_mma(q_smem, k_smem.index(0).permute((1, 0)), gl.zeros([BLOCK, BLOCK], gl.float32, mma),
                              use_acc=False, is_async=True)
        s = warpgroup_mma_wait(num_outstanding=0, deps=[s_tok])
        limit = N_KV - gl.load(idx_ptr) * BLOCK
        if limit < BLOCK:
            p, alpha, l_i, m_i = _softmax_step(s, m_i, l_i, limit, qk_scale, cols, TAIL=True)
        else:
            p, alpha, l_i, m_i = _softmax_step(s, m_i, l_i, limit, qk_scale, cols, TAIL=False)
        p_prev = gl.convert_layout(p.to(dtype), p_operand)
        for j in range(1, n):
            # every warp has retired S_{j-1} and P_{j-2} V_{j-2}: K stage of tile j-1 and V stage of tile j-2 refill
            gl.thread_barrier()
            _load_k(k_desc, k_smem, k_bar, idx_ptr, j + STAGES - 1, n, kv_row0, BLOCK, STAGES)
            _load_k(v_desc, v_smem, v_bar, idx_ptr, j + STAGES - 2, n, kv_row0, BLOCK, STAGES)
            mbarrier.wait(k_bar.index(j % STAGES), (j // STAGES) & 1)
            mbarrier.wait(v_bar.index((j - 1) % STAGES), ((j - 1) // STAGES) & 1)
            s_tok = warpgroup_mma(q_smem, k_smem.index(j % STAGES).permute((1, 0)),
                                  gl.zeros([BLOCK, BLOCK], gl.float32, mma), use_acc=False, is_async=True)
            o_tok = warpgroup_mma(p_prev, v_smem.index((j - 1) % STAGES), acc, is_async=True)
            s = warpgroup_mma_wait(num_outstanding=1, deps=[s_tok])
            limit = N_KV - gl.load(idx_ptr + j) * BLOCK
            if limit < BLOCK:
                p, alpha, l_i, m_new = _softmax_step(s, m_i, l_i, limit, qk_scale, cols, TAIL=True)
            else:
                p, alpha, l_i, m_new = _softmax_step(s, m_i, l_i, limit, qk_scale, cols, TAIL=False)
            acc, p_prev = warpgroup_mma_wait(num_outstanding=0, deps=[o_tok, p_prev])
            acc = acc * alpha[:, None]
            p_prev = gl.convert_layout(p.to(dtype), p_operand)
            m_i = m_new
        last = (n - 1) % STAGES
        mbarrier.wait(v_bar.index(last), ((n - 1) // STAGES) & 1)
        o_tok = warpgroup_mma(p_prev, v_smem.index(last), acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=[o_tok])
    mbarrier.invalidate(q_bar.index(0))
    for st in gl.static_range(STAGES):
        mbarrier.invalidate(k_bar.index(st))
        mbarrier.invalidate(v_bar.index(st))

    # a row with no selected blocks has l_i = 0 and acc = 0: its output is zeros
    l_safe = gl.where(l_i == 0.0, 1.0, l_i)
    out = (acc / l_safe[:, None]).to(dtype)
    rows = start_m + gl.arange(0, BLOCK, layout=rows_of)
    dims = gl.arange(0, HEAD_DIM, layout=cols_of)
    ptrs = O + (q_row0 + rows)[:, None].to(gl.int64) * HEAD_DIM + dims[None, :]
    gl.store(ptrs, out, mask=rows[:, None] < N_Q)


def _layout():
    return gl.NVMMASharedLayout.get_default_for([BLOCK, HEAD_DIM], gl.bfloat16)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv_num: torch.Tensor, kv_idx: torch.Tensor,
              perm: torch.Tensor) -> torch.Tensor:
    """Block-sparse attention of contiguous bf16 q/k/v (1, H, N, 128) under (kv_num (H, MB), kv_idx (H, MB, NB))
    with query blocks launched in the order ``perm`` (H, MB)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    b, h, n_q, d = q.shape
    n_kv = k.shape[2]
    if b != 1 or d != HEAD_DIM or q.dtype != torch.bfloat16 or not all(t.is_contiguous() for t in (q, k, v)):
        raise ValueError(f"the attempt takes contiguous bf16 (1, H, N, {HEAD_DIM}); got {tuple(q.shape)} {q.dtype}")
    out = torch.empty_like(q)
    descs = [TensorDescriptor.from_tensor(t.view(-1, d), [BLOCK, d], _layout()) for t in (q, k, v)]
    kv_num, kv_idx, perm = (t.to(q.device, torch.int32).contiguous() for t in (kv_num, kv_idx, perm))
    grid = (kv_num.shape[-1], b * h)
    _fa3_block_sparse_fwd[grid](*descs, out, kv_num, kv_idx, perm, h, n_q, n_kv, kv_idx.shape[-1],
                                (1.0 / math.sqrt(d)) * 1.4426950408889634, kv_num.stride(0), kv_idx.stride(0),
                                kv_idx.stride(1), perm.stride(0), HEAD_DIM=d, BLOCK=BLOCK, STAGES=STAGES,
                                NUM_WARPS=NUM_WARPS, num_warps=NUM_WARPS)
    return out


def compile_sm90(tokens: int = 363_600, heads: int = 2):
    """The kernel compiled for sm_90 as ``attention`` launches it (no GPU needed)."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    blocks = math.ceil(tokens / BLOCK)
    desc = f"tensordesc<bf16[{BLOCK}, {HEAD_DIM}],{_layout()!r}>"
    ints = {"H": heads, "N_Q": tokens, "N_KV": tokens, "NB": blocks, "stride_ch": blocks,
            "stride_ih": blocks * blocks, "stride_im": blocks, "stride_ph": blocks}
    fn = _fa3_block_sparse_fwd
    consts = {"HEAD_DIM": HEAD_DIM, "BLOCK": BLOCK, "STAGES": STAGES, "NUM_WARPS": NUM_WARPS}
    signature, attrs = {}, {}
    for index, name in enumerate(fn.arg_names):
        if name in consts:
            signature[name] = "constexpr"
        elif name.endswith("_desc"):
            signature[name] = desc
        elif name in ("O", "KV_NUM", "KV_IDX", "PERM"):
            signature[name] = "*bf16" if name == "O" else "*i32"
            attrs[(index,)] = [["tt.divisibility", 16]]
        elif name == "qk_scale":
            signature[name] = "fp32"
        else:
            signature[name] = "i32"
            if ints[name] % 16 == 0:
                attrs[(index,)] = [["tt.divisibility", 16]]
    src = GluonASTSource(fn, signature, constexprs=consts, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": NUM_WARPS})


class _Rings:
    """The K and V rings of one program, as ``emulate`` replays them: the tile each stage holds, its completed
    loads (its barrier's phase count) and the tiles whose matrix product has retired."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.held = {"k": [None] * STAGES, "v": [None] * STAGES}
        self.loads = {"k": [0] * STAGES, "v": [0] * STAGES}
        self.retired = {("k", None), ("v", None)}

    def load(self, ring: str, t: int) -> None:
        if t >= self.n:  # predicated off, as in ``_load_k``
            return
        stage = t % STAGES
        assert (ring, self.held[ring][stage]) in self.retired, f"{ring} stage {stage} refilled before it retired"
        self.held[ring][stage], self.loads[ring][stage] = t, self.loads[ring][stage] + 1

    def wait(self, ring: str, t: int) -> None:
        """``mbarrier.wait(bar[t % STAGES], (t // STAGES) & 1)`` must find tile t, loaded t // STAGES + 1 times."""
        stage = t % STAGES
        assert self.held[ring][stage] == t and self.loads[ring][stage] == t // STAGES + 1, (ring, t, self.held)


def _emulate_program(qf: torch.Tensor, kh: torch.Tensor, vh: torch.Tensor, idx: list[int]) -> torch.Tensor:
    """One program's rows (float32): the kernel's loop over the K/V blocks ``idx`` of one query block."""
    scale = 1.0 / math.sqrt(qf.shape[-1])
    n, rings = len(idx), _Rings(len(idx))

    def kv(t: int) -> tuple[torch.Tensor, torch.Tensor]:
        cols = slice(idx[t] * BLOCK, (idx[t] + 1) * BLOCK)  # past the head's end: shorter, as masked to -inf
        return kh[cols], vh[cols]

    for t in range(STAGES):
        rings.load("k", t)
    for t in range(STAGES - 1):
        rings.load("v", t)
    rings.wait("k", 0)
    k0, v_prev = kv(0)
    s_ = qf @ k0.T
    rings.retired.add(("k", 0))
    m_i = s_.max(1).values * scale
    p_prev = torch.exp(s_ * scale - m_i[:, None])
    l_i = p_prev.sum(1)
    acc = torch.zeros(qf.shape[0], vh.shape[-1])
    for j in range(1, n):
        rings.load("k", j + STAGES - 1)
        rings.load("v", j + STAGES - 2)
        rings.wait("k", j)
        rings.wait("v", j - 1)
        kj, vj = kv(j)
        s_ = qf @ kj.T
        rings.retired.add(("k", j))  # wait(1): S_j retired; P_{j-1} V_{j-1} may still run
        m_new = torch.maximum(m_i, s_.max(1).values * scale)
        p = torch.exp(s_ * scale - m_new[:, None])
        alpha = torch.exp(m_i - m_new)
        l_i = l_i * alpha + p.sum(1)
        acc = acc + p_prev @ v_prev
        rings.retired.add(("v", j - 1))  # wait(0)
        acc, p_prev, v_prev, m_i = acc * alpha[:, None], p, vj, m_new
    rings.wait("v", n - 1)
    return (acc + p_prev @ v_prev) / l_i[:, None]


def emulate(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv_num: torch.Tensor, kv_idx: torch.Tensor,
            perm: torch.Tensor) -> torch.Tensor:
    """The kernel's schedule replayed on the CPU in float32, one program at a time: the same ring stages, barrier
    phases, refill points and order of the two matrix products and the softmax. It asserts that every wait finds
    the tile it expects at the phase it expects and that no stage is refilled before its product retired, and
    returns the output, to compare with plain attention (``--emulate``)."""
    out = torch.zeros_like(q, dtype=torch.float32)
    for h in range(q.shape[1]):
        for slot in range(kv_num.shape[-1]):
            q_blk = int(perm[h, slot])
            n = int(kv_num[h, q_blk])
            if n:
                rows = slice(q_blk * BLOCK, (q_blk + 1) * BLOCK)
                out[0, h, rows] = _emulate_program(q[0, h, rows].float(), k[0, h].float(), v[0, h].float(),
                                                   kv_idx[h, q_blk, :n].tolist())
    return out


def edge_mask(heads: int, blocks: int, seed: int = 1) -> torch.Tensor:
    """A random (heads >= 2, blocks >= 6) mask with the cases a pipelined schedule gets wrong: every row reads the
    ragged last block, one row reads nothing, one only the last block (its first tile is the ragged one), and
    rows of two and three blocks (loads predicated off at the end)."""
    from wavealign.masks import synthetic

    mask = synthetic.random_mask(heads, blocks, blocks, 0.6, seed=seed)
    mask[:, :, -1] = True
    mask[0, 2] = False
    mask[1, 3] = False
    mask[1, 3, -1] = True
    mask[0, 4] = False
    mask[0, 4, [0, -1]] = True
    mask[1, 5] = False
    mask[1, 5, [1, 2, -1]] = True
    return mask


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Plain float32 attention of (1, H, N, D) q/k/v under the block mask (a row with no blocks gives zeros)."""
    n = q.shape[2]
    dense = mask.repeat_interleave(BLOCK, 1).repeat_interleave(BLOCK, 2)[:, :n, :n]
    scores = (q[0].float() @ k[0].float().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    return (torch.softmax(scores.masked_fill(~dense, float("-inf")), -1).nan_to_num(0.0) @ v[0].float())[None]


def _check_and_time(out_dir: Path | None, check: bool, time_it: bool) -> None:
    """On the GPU: the kernel against plain float32 attention and the ``triton`` backend on an edge-case mask
    (stops there if it is wrong), then both timed dense and 25 % random. Each result is printed and saved as it
    comes, so a hang (a barrier never completed) still leaves the earlier ones."""
    from wavealign import blockmask
    from wavealign.instruments.timing import time_cuda
    from wavealign.kernels import LaunchShape, triton_blocksparse
    from wavealign.masks import synthetic

    rows = []
    env = {"torch": torch.__version__, "triton": triton.__version__, "gpu": torch.cuda.get_device_name()}
    torch.manual_seed(0)
    cases = [("edge cases, ragged 4,000 tokens", 4_000, 4, None)] if check else []
    cases += [("dense 65,536", 65_536, 8, 1.0), ("random 25% 363,600", 363_600, 2, 0.25)] if time_it else []
    for name, tokens, heads, density in cases:
        blocks = math.ceil(tokens / BLOCK)
        q, k, v = (torch.randn(1, heads, tokens, HEAD_DIM, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        if density is None:
            mask = edge_mask(heads, blocks).cuda()
        elif density == 1.0:
            mask = torch.ones(heads, blocks, blocks, dtype=torch.bool, device="cuda")
        else:
            mask = synthetic.random_mask(heads, blocks, blocks, density, seed=0).cuda()
        kv_num, kv_idx = (t.to(torch.int32).contiguous() for t in blockmask.to_kv_indices(mask))
        perm = torch.stack([torch.randperm(blocks, device="cuda") for _ in range(heads)]).to(torch.int32)
        ours = functools.partial(attention, q, k, v, kv_num, kv_idx, perm)
        # the backend planned once (mask -> kv indices on the device), as a sweep cell times it
        theirs = functools.partial(triton_blocksparse.plan(mask, perm, LaunchShape.of(q, k, BLOCK, v=v)).run, q, k, v)
        got = ours().float()
        torch.cuda.synchronize()
        row = {"case": name, "tokens": tokens, "heads": heads, "density": mask.float().mean().item(),
               "max_abs_diff_vs_triton": (got - theirs().float()).abs().max().item()}
        if density is None:
            row["max_abs_err_vs_fp32"] = (got - reference(q, k, v, mask)).abs().max().item()
            row["correct"] = row["max_abs_err_vs_fp32"] < 2e-2
        if density is not None:
            flop = 4.0 * tokens * tokens * HEAD_DIM * heads * row["density"]
            for label, fn in (("gluon_fa3", ours), ("triton", theirs)):
                t = time_cuda(fn, reps=10, warmup=2)
                row[f"{label}_ms"] = t.median_ms
                row[f"{label}_tflops"] = flop / t.median_ms / 1e9
        rows.append(row)
        print(json.dumps(row), flush=True)
        if out_dir:
            out_dir.mkdir(parents=True, exist_ok=True)
            (out_dir / "gluon_fa3.json").write_text(json.dumps({"env": env, "rows": rows}, indent=1))
        if row.get("correct") is False:
            print("WRONG against float32 attention: not timed", flush=True)
            return


def _emulate_check() -> None:
    from wavealign import blockmask

    torch.manual_seed(0)
    heads, tokens = 2, 5 * BLOCK + 37  # 6 blocks, the last ragged
    blocks = math.ceil(tokens / BLOCK)
    q, k, v = (torch.randn(1, heads, tokens, HEAD_DIM) for _ in range(3))
    mask = edge_mask(heads, blocks)
    kv_num, kv_idx = blockmask.to_kv_indices(mask)
    perm = torch.stack([torch.randperm(blocks) for _ in range(heads)])
    err = (emulate(q, k, v, kv_num, kv_idx, perm) - reference(q, k, v, mask)).abs().max().item()
    print(json.dumps({"emulated_schedule_max_abs_err": err, "rows_per_head_kv_blocks": kv_num.tolist()}))
    assert err < 1e-4, err


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sass", action="store_true", help="compile for sm_90 and print the K/V loop's skeleton")
    parser.add_argument("--check", action="store_true", help="GPU: compare with the triton backend (ragged shape)")
    parser.add_argument("--time", action="store_true", help="GPU: time dense and 25%% random against the backend")
    parser.add_argument("--emulate", action="store_true",
                        help="CPU: replay the kernel's schedule (ragged shape) against plain attention")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.sass:
        import sys

        sys.path.insert(0, str(Path(__file__).parent))
        from sass_sm90 import loop_skeleton, resources

        kernel = compile_sm90()
        sass = kernel.asm["sass"]
        print(json.dumps({"triton": triton.__version__, **resources(kernel.asm["cubin"]),
                          "shared": kernel.metadata.shared, "hgmma": sass.count("HGMMA"),
                          "bar_sync": sass.count("BAR.SYNC"), "mufu_ex2": sass.count("MUFU.EX2")}))
        print("main loop: " + " | ".join(loop_skeleton(sass)))
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "gluon_fa3.sass").write_text(sass)
    if args.emulate:
        _emulate_check()
    if args.check or args.time:
        _check_and_time(args.out, args.check, args.time)


if __name__ == "__main__":
    main()
