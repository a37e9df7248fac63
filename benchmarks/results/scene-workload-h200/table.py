"""The scene-workload H200 results as the committed markdown, and the calibration's L2 setting from the controls.

    python benchmarks/results/scene-workload-h200/table.py settings RUN_ROOT
        From the controls run (dense and the iid random control, Nsight Compute): the L2 target the dense hit rate
        calls for (``calibrate_workload.l2_target_for``) and, for ``relative``, the row jitter at which the simulated
        dense launch (H200, 40 heads, 2,841 blocks) reads the measured hit; prints calibrate-workload's flags.
    python benchmarks/results/scene-workload-h200/table.py table RUN_ROOT... [--l2-target relative]
        Table I for every workload of the run roots side by side (``analysis.tables.table1_against_paper``), the
        misses stated, and each workload's distance to Table I (the issue's: density error / 3 pts + L2 error / its
        tolerance, over the four methods).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import pandas as pd
import torch

from analysis.load import load
from analysis.paper import (
    DENSITY_TOLERANCE_PTS,
    L2_RATIO_TOLERANCE,
    L2_TOLERANCE_PTS,
    TABLE_I_DENSITY,
    TABLE_I_L2_HIT_PCT,
)
from analysis.tables import distance_to_paper, table1_against_paper
from wavealign import sim

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "lab"))  # the lab's studies are scripts, not a package
from calibrate_workload import SIM_PAPER_ROW_JITTER, l2_target_for

HEADS, BLOCKS = 40, 2841  # Wan2.1-14B at 363,600 tokens in blocks of 128
COLUMNS = {  # table column -> (heading, format)
    "workload": ("workload", "{}"), "generator": ("generator", "{}"), "method": ("method", "{}"),
    "density_pct": ("density", "{:.1f}%"),
    "paper_density_pct": ("Table I", "{:.1f}%"), "original_kernel_ms": ("FA4 original ms", "{:.1f}"),
    "wavealign_kernel_ms": ("WaveAlign ms", "{:.1f}"), "reorder_ms": ("reorder ms", "{:.2f}"),
    "kernel_speedup": ("kernel speedup", "{:.3f}"), "net_speedup": ("net speedup", "{:.3f}"),
    "ncu_l2_hit_original_pct": ("NCU L2 hit original", "{:.1f}%"),
    "ncu_l2_hit_wavealign_pct": ("after S1+S2", "{:.1f}%"), "paper_l2_hit_pct": ("Table I L2 (H100)", "{:.1f}%"),
    "l2_over_random": ("L2 / iid control", "{:.2f}x"), "paper_l2_over_random": ("Table I", "{:.2f}x"),
    "misses": ("misses (goals: +-3 pts density, +-5 pts L2, +-15% L2 / control)", "{}"),
}


def markdown(table: pd.DataFrame) -> str:
    def cell(value, fmt: str) -> str:
        if isinstance(value, float) and math.isnan(value):
            return "-"
        return fmt.format(value)

    lines = ["| " + " | ".join(h for h, _ in COLUMNS.values()) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cell(r[c], f) for c, (_, f) in COLUMNS.items()) + " |" for _, r in table.iterrows()]
    return "\n".join(lines)


def settings(run_root: str) -> int:
    frame = load(run_root)
    dense = frame[(frame["method"] == "dense") & (frame["status"] == "done")]["ncu_l2_hit_pct"].dropna()
    if dense.empty:
        print(f"run root {run_root!r} has no dense cell with an Nsight Compute L2 hit; run the controls step",
              file=sys.stderr)
        return 2
    measured = float(dense.iloc[-1])
    mask = torch.ones(HEADS, BLOCKS, BLOCKS, dtype=torch.bool)
    lockstep = sim.simulate(mask, hardware="h200", backend="fa4").l2_hit_pct
    target = l2_target_for(measured, lockstep)
    print(f"dense FA4 on the H200: Nsight Compute {measured:.1f}%, lock-step simulator {lockstep:.1f}%, "
          f"Table I (H100) {TABLE_I_L2_HIT_PCT['dense']}%: L2 target {target}")
    if target == "relative":
        jitter = sim.fit_row_jitter(mask, measured, hardware="h200", backend="fa4", steps=6)
        fitted = sim.simulate(mask, hardware="h200", backend="fa4", row_jitter=jitter).l2_hit_pct
        print(f"row jitter {jitter} (simulated dense {fitted:.1f}%)")
        print(f"CAL_FLAGS='--hardware h200 --row-jitter {jitter} --l2-target relative'")
    else:
        print(f"CAL_FLAGS='--hardware h100 --row-jitter {SIM_PAPER_ROW_JITTER} --l2-target absolute'")
    return 0


def table(run_roots: list[str], l2_target: str) -> int:
    frame = pd.concat([load(root) for root in run_roots], ignore_index=True)
    found = table1_against_paper(frame, TABLE_I_DENSITY, TABLE_I_L2_HIT_PCT)
    if "note" in found.columns:
        print(found["note"].iloc[0], file=sys.stderr)
        return 2
    print(markdown(found))
    print()
    distances = distance_to_paper(found, l2_target)
    tolerance = f"{L2_TOLERANCE_PTS:g} pts" if l2_target == "absolute" else \
        f"{100 * L2_RATIO_TOLERANCE:g}% of the ratio to the iid control"
    print(f"Distance to Table I (sum over the four methods of |density error| / {DENSITY_TOLERANCE_PTS:g} pts + "
          f"|L2 error| / {tolerance}): "
          + ", ".join(f"{w} {d:.2f}" for w, d in sorted(distances.items(), key=lambda kv: kv[1])))
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("settings").add_argument("run_root")
    tab = sub.add_parser("table")
    tab.add_argument("run_roots", nargs="+")
    tab.add_argument("--l2-target", default="relative", choices=("absolute", "relative"))
    args = parser.parse_args(argv)
    try:
        return settings(args.run_root) if args.command == "settings" else table(args.run_roots, args.l2_target)
    except ValueError as err:  # a folder that is not a run root, named by load
        print(f"table.py {args.command}: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
