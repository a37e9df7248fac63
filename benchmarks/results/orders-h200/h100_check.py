"""The simulated H100 bands against FA4 measured on an H100 (issue 47, item 5): at 363,600 tokens x 40 heads, each
family's and order's measured kernel speedup over the original (``run.sh h100``, paired rounds) beside the band the
simulator gave it (``bands.csv``: the H100 rows, exposed-HBM share 0.1-0.4, one or two L2 partitions), and each
(share, partitions) point's error over every order, so the borrowed constants can be read off the GPU.

    python benchmarks/results/orders-h200/h100_check.py BANDS_CSV H100_RUN_ROOT OUT_CSV
        # H100_RUN_ROOT: h100/runroot.tar unpacked (results/ and sweeps/)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd
from table import timed_rows

SEQ_K = 364  # thousands of tokens: 363,600, the bands' length


def compared(bands: pd.DataFrame, measured: pd.DataFrame) -> pd.DataFrame:
    """One row per (family, order, share, partitions): the simulated kernel speedup beside the measured one."""
    sim = bands[(bands.hardware == "h100") & (bands.seq_k == SEQ_K)]
    fixed = measured[(measured.seq_k == SEQ_K) & (measured.variant != "auto")
                     & (measured.order_candidate != "original")]
    first = fixed.groupby("method").group_id.transform("first") == fixed.group_id  # one group a family
    fixed = fixed[first][["method", "order_candidate", "speedup_vs_original", "speedup_ci_low", "speedup_ci_high"]]
    both = sim.merge(fixed.rename(columns={"order_candidate": "candidate"}), on=["method", "candidate"])
    both["error"] = both.speedup - both.speedup_vs_original
    band = both.groupby(["method", "candidate"]).speedup.agg(band_low="min", band_high="max").reset_index()
    both = both.merge(band, on=["method", "candidate"])
    both["inside"] = (both.band_low <= both.speedup_vs_original) & (both.speedup_vs_original <= both.band_high)
    both["interval_meets_band"] = (both.speedup_ci_low <= both.band_high) & (both.band_low <= both.speedup_ci_high)
    return both


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bands", type=Path)
    parser.add_argument("run_root", type=Path)
    parser.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    both = compared(pd.read_csv(args.bands), timed_rows([args.run_root]))
    both.to_csv(args.out, index=False, float_format="%.4f")
    orders = both.drop_duplicates(["method", "candidate"])
    print(f"of {len(orders)} measured orders (the original left out): {orders.inside.sum()} inside their simulated "
          f"band, {orders.interval_meets_band.sum()} with the paired interval meeting it")

    def picks_agree(point: pd.DataFrame) -> int:
        return sum(g.loc[g.speedup.idxmax(), "candidate"] == g.loc[g.speedup_vs_original.idxmax(), "candidate"]
                   for _, g in point.groupby("method"))

    points = both.groupby(["exposed", "l2_partitions"]).agg(
        mean_error=("error", "mean"), mean_abs_error=("error", lambda e: e.abs().mean()),
        max_abs_error=("error", lambda e: e.abs().max()))
    points["best_order_agrees"] = [picks_agree(g) for _, g in both.groupby(["exposed", "l2_partitions"])]
    print(points.round(4).to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
