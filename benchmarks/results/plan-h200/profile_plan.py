"""Where launch_order.plan's time goes on a GPU: the kernels of one 40-head plan under torch.profiler, and its
wall time."""

from __future__ import annotations

import json
import os
import statistics
import sys

import torch
from torch.profiler import ProfilerActivity, profile

from wavealign import launch_order
from wavealign.instruments.timing import synced_clock
from wavealign.masks import synthetic

heads, blocks = int(sys.argv[1]) if len(sys.argv) > 1 else 40, 2841
mask = synthetic.random_mask(heads, blocks, blocks, 0.25, seed=0, device="cuda")
for _ in range(3):
    launch_order.plan(mask)
times = []
for _ in range(20):
    t0 = synced_clock(mask.device)
    launch_order.plan(mask)
    times.append((synced_clock(mask.device) - t0) * 1e3)
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    launch_order.plan(mask)
    torch.cuda.synchronize()
table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=25)
print(table)
out = os.environ.get("OUT", "/tmp")
prof.export_chrome_trace(f"{out}/plan_trace.json")
print(json.dumps({"heads": heads, "blocks": blocks, "median_ms": statistics.median(times), "times_ms": times}))
