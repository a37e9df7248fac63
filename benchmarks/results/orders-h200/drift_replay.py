"""The replay's L2 hit with its programs drifting as far as the GPU's do (issue 47, item 3; ``timeline_static.py``).

The simulator's static-scheduler replay gives every K/V block the same step, so its programs drift less than the
GPU's (``h100/timeline/timeline_drift.csv``). Here each row is stretched by ``row_jitter`` (``sim.simulate``: NNZ x
jitter x |z| stall steps, seeded), raised until the replay's drift (``timeline_static.drift_rounds``) reaches the
GPU's, and the replay's L2 hit read at each jitter: if drifting as the GPU does left the replay's hits where the
GPU's are, the timing would be what the replay misses; if its hits fall further, the L2 model is. Masks: the
``ncu_static`` cells' (four heads at 147,600 tokens), built on the CPU from their seeded specs (other random draws
than the GPU's, as ``sim_static.py``'s), simulated for the H200 whose Nsight Compute counters the miss is against.

    python benchmarks/results/orders-h200/drift_replay.py OUT.csv [--methods minference,radial]
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import numpy as np
import torch
from timeline_static import drift_rounds

from orchestrator import config, grid
from wavealign import inputs, sim
from wavealign.attention import AttentionStep

JITTERS = (0.0, 0.01, 0.02, 0.04, 0.08, 0.16)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--methods", default="minference,radial")
    args = parser.parse_args(argv)
    methods = args.methods.split(",")
    cfg = config.load(["sweep=orders_h200"])
    cells = [c for c in grid.expand(cfg).cells if c.measurer.measure == "ncu" and c.inputs.method in methods
             and c.attention.variant in ("original", "temporal") and c.attention.backend == "triton-static"]
    cache = inputs.InputCache()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["method", "order", "row_jitter", "sim_drift_median_rounds", "sim_drift_max_rounds",
                         "sim_l2_hit_pct", "sim_kernel_ms"])
        for cell in sorted(cells, key=lambda c: (c.inputs.method, c.attention.variant)):
            block = cell.attention.geometry.block_size
            mask, _, _, _ = cache.take(inputs.InputRequest(cell.inputs, block, torch.device("cpu"), with_qkv=False))
            step = AttentionStep.of(cell.attention, cell.inputs)
            order = None if cell.attention.stages == "none" else step.plan_order(mask, cell.attention.stages)
            heads, mb = mask.shape[-3], mask.shape[-2]
            perm = np.tile(np.arange(mb), (heads, 1)) if order is None else order.perm.reshape(heads, mb).numpy()
            name = "original" if order is None else order.candidate
            for jitter in JITTERS:
                r = sim.simulate(mask, order, hardware=cell.hardware, backend="triton-static",
                                 head_dim=cell.inputs.head_dim, wave_size=cell.attention.geometry.wave_size,
                                 row_jitter=jitter, seed=cell.inputs.seed)
                queue = (np.repeat(np.arange(heads), mb), perm.reshape(-1))  # slot fastest, then head
                largest, median = drift_rounds(r.row_start_step[queue].astype(float),
                                               r.row_finish_step[queue].astype(float),
                                               cell.attention.geometry.wave_size)
                writer.writerow([cell.inputs.method, name, jitter, round(median, 3), round(largest, 3),
                                 round(r.l2_hit_pct, 2), round(r.kernel_time_s * 1e3, 3)])
                f.flush()
                print(f"{cell.inputs.method} {name} jitter {jitter}: drift {median:.2f} (max {largest:.2f}) rounds, "
                      f"L2 {r.l2_hit_pct:.1f} %", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
