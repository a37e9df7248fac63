"""How often the order chooser's pick would change from one denoising step to the next (issue 47, item 1): the
masks of one layer at steps 0, 10, ..., 40 of the scene generator (the sweep's ``InputSpec`` with its ``step``
replaced), each ranked by the chooser for FA4 and triton-static on the H200. A choice kept per (layer, shape) across
the steps (``BlockSparseAttention``, ``reorder="auto"``) is wrong where the pick changes.

    python benchmarks/results/orders-h200/step_stability.py OUT.csv [KEY=VALUE ...]   # overrides of the sweep

Writes one row per (method, backend, step): the pick and each candidate's predicted net ms.
"""

from __future__ import annotations

import csv
import dataclasses
import sys
import time

import torch

from orchestrator import config, grid
from wavealign import inputs
from wavealign.launch_order import chooser

STEPS = range(0, 50, 10)
BACKENDS = ("fa4", "triton-static")


def main(out: str, overrides: list[str]) -> int:
    cfg = config.load(["sweep=orders_h200", "grid.variant=[original]", *overrides])
    cells = [c for c in grid.expand(cfg).cells if c.attention.backend == "fa4" and c.attention.variant == "original"]
    with open(out, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["method", "layer", "step", "backend", "pick", "predicted_net_ms", "choose_ms"])
        for cell in cells:
            for step in STEPS:
                spec = dataclasses.replace(cell.inputs, step=step)
                start = time.perf_counter()
                mask, _ = inputs.build(inputs.InputRequest(spec, cell.attention.geometry.block_size,
                                                           torch.device("cpu"), with_qkv=False))
                built = time.perf_counter() - start
                for backend in BACKENDS:
                    choice = chooser.rank(mask, backend=backend, hardware=cell.hardware, head_dim=spec.head_dim,
                                          block_size=cell.attention.geometry.block_size, latent=inputs.latent(spec),
                                          token_ordered=spec.method in ("vsa", "svg2"), seed=spec.seed)
                    writer.writerow([spec.method, spec.layer, step, backend, choice.candidate,
                                     round(choice.scored[0].net_ms, 4), round(choice.choose_ms, 1)])
                    f.flush()
                print(f"{spec.method} step {step}: mask {built:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
