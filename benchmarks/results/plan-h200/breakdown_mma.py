"""Where the persistent product kernel's time goes: one launch with 1, 2, 10 and 20 products on a 40-head 2841 x 2841
mask at 25 %, CUDA events, median of 20; the slope is the cost of one product (digits, product, two grid barriers).
Also the pack (with the column sums) and row-count kernels."""

from __future__ import annotations

import json
import statistics
import sys

import torch

from wavealign import blockmask
from wavealign.masks import synthetic
from wavealign.reorderers.wavealign import stage1_cuda


def median_ms(fn, reps: int = 20) -> float:
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
g, mb, nb = mask.shape
packed, packed_t, sums = stage1_cuda.pack(mask)
z0 = stage1_cuda._start(mb, 0, mask.device).expand(g, mb, 2).contiguous()
y = torch.empty(g, nb, 2, device="cuda")
rows = {"pack (rows + transpose)": median_ms(lambda: stage1_cuda.pack(mask)),
        "row_nnz": median_ms(lambda: blockmask.row_nnz(mask))}
for count in (1, 2, 10, 20):
    rows[f"products x{count}"] = median_ms(
        lambda count=count: stage1_cuda._products(packed, packed_t, sums, z0.clone(), y, count))
slope = (rows["products x20"] - rows["products x10"]) / 10
rows["one product (slope 10 -> 20)"] = slope
for name, ms in rows.items():
    print(f"{name:36s} {ms * 1e3:8.1f} us")
print(json.dumps({"heads": heads, "us": {k: v * 1e3 for k, v in rows.items()}}))
