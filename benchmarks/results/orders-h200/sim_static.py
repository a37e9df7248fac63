"""The simulator's static-scheduler path against Nsight Compute (issue 47, item 3): the ``ncu_static`` cells of
``sweep=orders_h200`` (triton-static on the H200, four heads of Wan2.1-14B at 147,600 tokens, every order the grid
profiled), their masks rebuilt here on the CPU from the same ``InputSpec`` (seeded, so the same masks) and each
order simulated with triton-static's execution facts. Writes one CSV row per cell: the predicted L2 hit, HBM read
and kernel time, and the cell's identity to join with the measured rows.

    python benchmarks/results/orders-h200/sim_static.py OUT.csv [--l2-partitions N] [KEY=VALUE ...]

(the KEY=VALUE are Hydra overrides of the sweep; ``--l2-partitions`` replaces the GPU's L2 partition count).
"""

from __future__ import annotations

import csv
import sys
import time

import torch

from orchestrator import config, grid
from wavealign import inputs, sim
from wavealign.attention import AttentionStep


def main(out: str, overrides: list[str], l2_partitions: int | None = None) -> int:
    cfg = config.load(["sweep=orders_h200", *overrides])
    cells = [c for c in grid.expand(cfg).cells if c.measurer.measure == "ncu"]
    cache = inputs.InputCache()
    with open(out, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["method", "variant", "reorderer", "order_candidate", "sim_l2_hit_pct", "sim_hbm_read_bytes",
                         "sim_kernel_ms", "sim_makespan_steps"])
        for cell in sorted(cells, key=lambda c: (c.inputs.method, c.attention.variant, c.attention.reorderer)):
            start = time.perf_counter()
            request = inputs.InputRequest(cell.inputs, cell.attention.geometry.block_size, torch.device("cpu"),
                                          with_qkv=False)
            mask, _, _, _ = cache.take(request)
            step = AttentionStep.of(cell.attention, cell.inputs)
            order = None if cell.attention.stages == "none" else step.plan_order(mask, cell.attention.stages)
            r = sim.simulate(mask, order, hardware=cell.hardware, backend=cell.attention.backend,
                             head_dim=cell.inputs.head_dim, wave_size=cell.attention.geometry.wave_size,
                             l2_partitions=l2_partitions)
            name = "original" if order is None else order.candidate
            writer.writerow([cell.inputs.method, cell.attention.variant, cell.attention.reorderer, name,
                             round(r.l2_hit_pct, 3), r.hbm_read_bytes, round(r.kernel_time_s * 1e3, 4),
                             r.makespan_steps])
            f.flush()
            print(f"{cell.inputs.method} {name}: L2 {r.l2_hit_pct:.1f} % ({time.perf_counter() - start:.0f} s)",
                  flush=True)
    return 0


if __name__ == "__main__":
    args = sys.argv[2:]
    partitions = None
    if args and args[0].startswith("--l2-partitions="):
        partitions, args = int(args[0].split("=", 1)[1]), args[1:]
    sys.exit(main(sys.argv[1], args, partitions))
