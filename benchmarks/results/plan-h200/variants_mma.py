"""Launch variants of the product kernel (stage1.cu's PIPE and DIGIT_PARTS), side by side in one process: each is
compiled by NVRTC with its -D options, checked against the default build's subspace, and timed (the whole
`launch_order.plan` and one 20-product launch; CUDA events, medians of 30) in two alternating rounds."""

from __future__ import annotations

import json
import statistics
import sys

import torch
from torch.cuda._utils import _cuda_load_module, _nvrtc_compile

from wavealign import launch_order, stage1_cuda
from wavealign.masks import synthetic

VARIANTS = {"pipe1_parts1": ["-DPIPE=1", "-DDIGIT_PARTS=1"], "pipe2_parts1": ["-DPIPE=2", "-DDIGIT_PARTS=1"],
            "pipe1": ["-DPIPE=1"], "pipe2": ["-DPIPE=2"], "pipe3": ["-DPIPE=3"], "pipe4": ["-DPIPE=4"]}


def build(options: list[str]) -> dict:
    binary, _ = _nvrtc_compile(stage1_cuda.KERNEL_SOURCE.read_text(), stage1_cuda.KERNELS[0], nvcc_options=options)
    return _cuda_load_module(binary, list(stage1_cuda.KERNELS))


def median_ms(fn, reps: int = 30) -> float:
    fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


heads = int(sys.argv[1]) if len(sys.argv) > 1 else 40
mask = synthetic.random_mask(heads, 2841, 2841, 0.25, seed=0, device="cuda")
u_ref, _ = stage1_cuda.centered_top2(mask, 10, 0, True)
builds = {name: build(opts) for name, opts in VARIANTS.items()}
packed, packed_t, sums = stage1_cuda.pack(mask)
z0 = stage1_cuda._start(2841, 0, mask.device).expand(heads, 2841, 2).contiguous()
y = torch.empty(heads, 2841, 2, device="cuda")
rows: dict[str, dict[str, list[float]]] = {name: {"plan": [], "x20": []} for name in VARIANTS}
for _round in range(2):
    for name, kernels in builds.items():
        stage1_cuda._kernels = lambda index, kernels=kernels: kernels
        u, _ = stage1_cuda.centered_top2(mask, 10, 0, True)
        cos = torch.linalg.svdvals(torch.bmm(u_ref.double().transpose(1, 2), u.double())).min().item()
        assert cos > 1 - 1e-5, (name, cos)
        rows[name]["plan"].append(median_ms(lambda: launch_order.plan(mask)))
        rows[name]["x20"].append(median_ms(lambda: stage1_cuda._products(packed, packed_t, sums, z0.clone(), y, 20)))
for name, r in rows.items():
    print(f"{name:14s} plan {' / '.join(f'{v:.3f}' for v in r['plan'])} ms   20 products "
          f"{' / '.join(f'{v * 1e3:.0f}' for v in r['x20'])} us")
print(json.dumps({"heads": heads, "ms": rows}))
