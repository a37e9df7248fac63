"""Do the static scheduler's programs drift apart on the GPU as the simulator's replay says? (issue 47, item 3)

The ``ncu_static`` cells of ``sweep=orders_h200`` (triton-static, four heads of Wan2.1-14B at 147,600 tokens) of
``--methods`` in each of ``--orders`` (by the planned order's ``RowOrder.candidate``): the kernel's own per-tile
timeline (``TritonLaunch.timeline``: each tile's start and end on the GPU's global timer and its SM), after a warm-up,
against the simulator's replay of the same mask and order (``sim.simulate``: each row's start step). A tile of round
k is queue entry k*G + p of program p (G programs). Per round, the drift is the spread of its tiles' start times; it
is expressed in rounds (divided by the median tile's length) both measured and predicted, so the two need no common
clock.

    python benchmarks/results/orders-h200/timeline_static.py OUT [--methods minference,radial]
        [--orders original,temporal]
        # -> OUT/timeline_tiles.csv (every tile), OUT/timeline_drift.csv (per method and order)
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import numpy as np
import torch

from orchestrator import config, grid
from wavealign import hardware, inputs, kernels, sim
from wavealign.attention import AttentionStep
from wavealign.kernels import LaunchShape


def drift_rounds(start: np.ndarray, finish: np.ndarray, programs: int) -> tuple[float, float]:
    """(the largest and the median spread of a round's start times, in median tile lengths) of tiles in queue order
    with ``start``/``finish`` times on one clock: round k holds entries k*programs .. (k+1)*programs - 1."""
    rounds = len(start) // programs
    starts = start[:rounds * programs].reshape(rounds, programs)
    lengths = (finish - start)[:rounds * programs].reshape(rounds, programs)
    spread = (starts.max(axis=1) - starts.min(axis=1)) / np.median(lengths)
    return float(spread.max()), float(np.median(spread))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--methods", default="minference,radial")
    parser.add_argument("--orders", default="original,temporal",
                        help="orders by candidate name (original, temporal, balanced, rounds, ...)")
    args = parser.parse_args(argv)
    methods, orders = args.methods.split(","), args.orders.split(",")
    cfg = config.load(["sweep=orders_h200"])
    cells = [c for c in grid.expand(cfg).cells if c.measurer.measure == "ncu" and c.inputs.method in methods
             and c.attention.backend == "triton-static"]
    args.out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda")
    gpu, gpu_id = torch.cuda.get_device_name(), hardware.detect().name  # the simulator models the GPU it runs on
    drifts = []
    with (args.out / "timeline_tiles.csv").open("w", newline="") as f:
        tiles = csv.writer(f)
        tiles.writerow(["method", "order", "tile", "program", "round", "head", "row", "start_ns", "end_ns", "smid",
                        "sim_start_step", "sim_finish_step"])
        for cell in sorted(cells, key=lambda c: (c.inputs.method, c.attention.variant)):
            block = cell.attention.geometry.block_size
            mask, (q, k, v), _, _ = inputs.InputCache().take(inputs.InputRequest(cell.inputs, block, device,
                                                                                 with_qkv=True))
            step = AttentionStep.of(cell.attention, cell.inputs)
            order = None if cell.attention.stages == "none" else step.plan_order(mask, cell.attention.stages)
            name = "original" if order is None else order.candidate
            if name not in orders:
                continue
            shape = LaunchShape.of(q, k, block, v=v)
            launch = kernels.get("triton-static").plan(mask, order, shape)
            programs = launch.persistent_grid
            for _ in range(2):  # compile, then a warm launch
                launch.run(q, k, v)
            out, record = launch.timeline(q, k, v)
            assert torch.equal(out, launch.run(q, k, v)), "the timeline launch must compute what the launch does"
            record = record.cpu().numpy()
            record[:, :2] -= record[:, 0].min()  # ns from the launch's first tile (the timer's epoch overflows floats)
            heads, mb = mask.shape[-3], mask.shape[-2]
            rows_per_tile = block // launch.config.block_m  # tiles of one mask row (a launch slot is block_m rows)
            perm = (np.arange(mb)[None].repeat(heads, 0) if order is None else order.perm.reshape(heads, mb).cpu()
                    .numpy())
            r = sim.simulate(mask, order, hardware=gpu_id, backend="triton-static",
                             head_dim=cell.inputs.head_dim, wave_size=programs)
            sim_start, sim_finish = [], []
            for tile in range(len(record)):
                head, slot = divmod(tile, mb * rows_per_tile)
                row = int(perm[head, slot // rows_per_tile])
                sim_start.append(r.row_start_step[head, row])
                sim_finish.append(r.row_finish_step[head, row])
                tiles.writerow([cell.inputs.method, name, tile, tile % programs, tile // programs, head, row,
                                *record[tile].tolist(), sim_start[-1], sim_finish[-1]])
            measured = drift_rounds(record[:, 0].astype(float), record[:, 1].astype(float), programs)
            predicted = drift_rounds(np.array(sim_start, float), np.array(sim_finish, float), programs)
            drifts.append(dict(gpu=gpu, method=cell.inputs.method, order=name, programs=programs,
                               tiles=len(record), distinct_sms=len(np.unique(record[:, 2])),
                               kernel_us=round((record[:, 1].max() - record[:, 0].min()) / 1e3, 1),
                               drift_max_rounds=round(measured[0], 3), drift_median_rounds=round(measured[1], 3),
                               sim_drift_max_rounds=round(predicted[0], 3),
                               sim_drift_median_rounds=round(predicted[1], 3)))
            print(drifts[-1], flush=True)
    with (args.out / "timeline_drift.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, list(drifts[0]))
        writer.writeheader()
        writer.writerows(drifts)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
