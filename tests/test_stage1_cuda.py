"""The packed tensor-core Stage 1 (``wavealign.stage1_cuda``), run on the CPU by Triton's interpreter.

The interpreter must be on before Triton is imported, so the kernels run in a child process. float16 limbs
stand in for bfloat16 there (the interpreter's bfloat16 dot is wrong); the GPU tests cover bfloat16.
"""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("triton")

CHILD = r"""
import json, torch
from wavealign import reorder, stage1_cuda, synthetic
out = {}
for name, (mb, nb, seed) in {"tall": (70, 50, 1), "wide": (45, 90, 2), "ragged_words": (33, 65, 3)}.items():
    mask = synthetic.planted_mask(2, mb, nb, 0.3, prototypes=3, noise=0.05, seed=seed)
    u_fast, s_fast = stage1_cuda.centered_top2(mask, 10, seed, True, limb=torch.float16)
    u_ref, s_ref = reorder.centered_top2(mask, 10, seed, True)
    # singular vectors agree up to sign
    sign = torch.sign((u_fast * u_ref).sum(1, keepdim=True))
    out[name] = {"sigma_rel": float(((s_fast - s_ref).abs() / s_ref).max()),
                 "vector_err": float((u_fast * sign - u_ref).abs().max())}
print(json.dumps(out))
"""


def test_packed_stage1_matches_the_torch_path_on_ragged_shapes():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    for name, r in results.items():
        assert r["sigma_rel"] < 1e-4, (name, r)
        assert r["vector_err"] < 1e-4, (name, r)
