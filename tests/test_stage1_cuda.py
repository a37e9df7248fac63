"""The packed tensor-core Stage 1 and the row counts (``wavealign.stage1_cuda``), run on the CPU by Triton's
interpreter.

The interpreter must be on before Triton is imported, so the kernels run in a child process, which also sends CPU
masks down the CUDA path of ``reorder.plan`` (``stage1_cuda.usable``), so the whole plan is compared.
"""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("triton")

CHILD = r"""
import json, torch
from wavealign import blockmask, reorder, stage1_cuda, synthetic
out = {}
for name, (mb, nb, seed) in {"tall": (70, 50, 1), "wide": (45, 90, 2), "ragged_words": (33, 65, 3)}.items():
    mask = synthetic.planted_mask(2, mb, nb, 0.3, prototypes=3, noise=0.05, seed=seed)
    packed, packed_t, col_sums = stage1_cuda.pack(mask)
    unpack = lambda words, n: ((words.unsqueeze(-1) >> torch.arange(32)) & 1).flatten(-2)[..., :n].bool()
    u_ref, s_ref = reorder.centered_top2(mask, 10, seed, True)
    # 16-row programs: several per head, so the column maxima and Gram sums gather across programs
    u_small, _ = stage1_cuda.centered_top2(mask, 10, seed, True, rows=16)
    u_fast, s_fast = stage1_cuda.centered_top2(mask, 10, seed, True)
    # singular vectors agree up to sign
    sign = torch.sign((u_fast * u_ref).sum(1, keepdim=True))
    sign_small = torch.sign((u_small * u_ref).sum(1, keepdim=True))
    ref_plan = reorder.plan(mask, wave_size=8, seed=seed).perm
    usable, stage1_cuda.usable = stage1_cuda.usable, lambda m: True  # the CPU mask takes the packed path
    fast_plan = reorder.plan(mask, wave_size=8, seed=seed).perm
    nnz = blockmask.row_nnz(mask)
    stage1_cuda.usable = usable
    out[name] = {"sigma_rel": float(((s_fast - s_ref).abs() / s_ref).max()),
                 "vector_err": float((u_fast * sign - u_ref).abs().max()),
                 "vector_err_16_rows": float((u_small * sign_small - u_ref).abs().max()),
                 "packed_rows": bool(torch.equal(unpack(packed, nb), mask)),
                 "packed_cols": bool(torch.equal(unpack(packed_t, mb), mask.transpose(1, 2))),
                 "col_sums": bool(torch.equal(col_sums, mask.sum(1).float())),
                 "row_nnz": bool(torch.equal(nnz.long(), mask.sum(-1))),
                 "same_plan": bool(torch.equal(fast_plan, ref_plan))}
print(json.dumps(out))
"""


def test_packed_stage1_matches_the_torch_path_on_ragged_shapes():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    for name, r in results.items():
        assert r["sigma_rel"] < 1e-4, (name, r)
        assert r["vector_err"] < 1e-4 and r["vector_err_16_rows"] < 1e-4, (name, r)
        assert r["packed_rows"] and r["packed_cols"] and r["col_sums"] and r["row_nnz"], (name, r)
        assert r["same_plan"], (name, r)
