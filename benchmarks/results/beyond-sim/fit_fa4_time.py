"""Fit FA4's SM90 speed in the simulator's kernel-time model to the H200's timed Table I cells.

The model (``wavealign.sim.simulate``): time = compute makespan + exposed x HBM time, where both cells of every
pair here are compute-bound (compute > memory). The makespan (in steps of one 128x128 K/V block) and the HBM bytes
are the simulator's own for the same masks and orders (``../sim-validation/table1-fa4-methods/validation.csv``,
simulated with the old round figures: 75% efficiency, 20 ns a block, exposed 0), the times the sweep's medians
(``../table1-fa4-h200/table.csv``: CUDA events, L2 flushed). Two unknowns, the inner loop's share of the bf16 peak
and the exposed share of HBM time, by least squares over ten cells; then each mask held out in turn.

    python benchmarks/results/beyond-sim/fit_fa4_time.py
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from wavealign import hardware, sim

HERE = Path(__file__).resolve().parent
VALIDATION = HERE.parent / "sim-validation/table1-fa4-methods/validation.csv"
TIMED = HERE.parent / "table1-fa4-h200/table.csv"
H200 = hardware.get("h200")
FLOPS_PER_STEP = 4 * 128 * 128 * 128  # one 128-row query tile against one 128-token K/V block, head_dim 128
OLD_EFFICIENCY, BLOCK_OVERHEAD_S = 0.75, 20e-9  # the figures validation.csv was simulated with
Q_BYTES = 363_600 * 40 * 128 * 2  # O written: Q's shape, bf16


def cells() -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Per cell: [FLOPs per SM slot at the makespan, HBM s] and the measured s less the fixed terms; the mask names."""
    per_cta = H200.peak_bf16_flops / 132
    old_step = FLOPS_PER_STEP / (per_cta * OLD_EFFICIENCY) + BLOCK_OVERHEAD_S
    timed = {row["method"]: row for row in csv.DictReader(TIMED.open())}
    design, target, names = [], [], []
    for row in csv.DictReader(VALIDATION.open()):
        steps = (float(row["kernel_ms_predicted"]) * 1e-3 - sim.LAUNCH_OVERHEAD_S) / old_step
        memory_s = (float(row["dram_read_bytes_predicted"]) + Q_BYTES) / H200.hbm_bytes_per_s
        column = "original_kernel_ms" if row["stages"] == "none" else "wavealign_kernel_ms"
        measured_s = float(timed[row["mask_kind"]][column]) * 1e-3
        design.append([steps * FLOPS_PER_STEP / per_cta, memory_s])
        target.append(measured_s - steps * BLOCK_OVERHEAD_S - sim.LAUNCH_OVERHEAD_S)
        names.append(row["mask_kind"])
    return np.array(design), np.array(target), names


def fit() -> dict[str, float]:
    """The fit on all ten cells and its errors, in-sample and with each mask held out in turn (time in %, kernel
    speedup as an absolute difference)."""
    design, target, names = cells()
    inverse_efficiency, exposed = np.linalg.lstsq(design, target, rcond=None)[0]
    in_sample = np.abs(design @ [inverse_efficiency, exposed] / target - 1) * 100
    masks = np.array(names)
    held_out_time, held_out_speedup = [], []
    for held_out in dict.fromkeys(names):
        train = masks != held_out
        x = np.linalg.lstsq(design[train], target[train], rcond=None)[0]
        predicted, measured = design[~train] @ x, target[~train]
        held_out_time += list(np.abs(predicted / measured - 1) * 100)
        held_out_speedup.append(abs(predicted[0] / predicted[1] - measured[0] / measured[1]))
    return {"mma_efficiency": 1 / inverse_efficiency, "exposed_memory_fraction": exposed,
            "time_mean_pct": float(np.mean(in_sample)), "time_max_pct": float(np.max(in_sample)),
            "held_out_time_max_pct": float(np.max(held_out_time)),
            "held_out_speedup_max": float(np.max(held_out_speedup))}


def main() -> None:
    result = fit()
    print(f"all ten cells: mma_efficiency {result['mma_efficiency']:.3f}, exposed_memory_fraction "
          f"{result['exposed_memory_fraction']:.3f}; time error mean {result['time_mean_pct']:.2f}%, max "
          f"{result['time_max_pct']:.2f}%")
    print(f"each mask held out: time error at most {result['held_out_time_max_pct']:.2f}%, kernel speedup off by at "
          f"most {result['held_out_speedup_max']:.3f}")


if __name__ == "__main__":
    main()
