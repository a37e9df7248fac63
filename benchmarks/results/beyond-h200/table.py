"""The table and figure of sweep=beyond_h200 from its run roots: per mask family, length and launch order, the
density, kernel time (median, and its IQR over the repetitions as a % of it) and plan time, the kernel and net
speedup over the original order (``analysis.table2``, the report's own Table II), Nsight Compute's L2 hit
and HBM read against the original order's, and the cells that did not run (with why).

    python benchmarks/results/beyond-h200/table.py OUT RUN_ROOT_OR_TAR...   # writes OUT/beyond_h200.{csv,md,png}
"""

from __future__ import annotations

import sys
import tarfile
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

import analysis
from analysis.tables import order_label, to_markdown

KEYS = ["method", "num_heads", "seq_len_tokens"]


def _roots(paths: list[str], scratch: Path) -> list[Path]:
    """Each argument as a run root: a folder as is, a ``runroot.tar`` unpacked into ``scratch``."""
    roots = []
    for i, path in enumerate(map(Path, paths)):
        if path.suffix == ".tar":
            root = scratch / str(i)
            with tarfile.open(path) as tar:
                tar.extractall(root, filter="data")
            path = root
        roots.append(path)
    return roots


def _frame(roots: list[Path]) -> pd.DataFrame:
    return pd.concat([analysis.load(root) for root in roots], ignore_index=True)


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """Table II's rows with each family's density (original order) and the HBM read over the original order's."""
    rows = analysis.table2(frame)
    done = frame[frame["status"] == "done"]
    original = done[done["stages"] == "none"]
    density = original.groupby(KEYS)["density"].mean().rename("density")
    read = done.assign(order=[order_label(s, r) for s, r in zip(done["stages"], done["reorderer"], strict=True)])
    iqr = read.assign(kernel_iqr_pct=100 * read["kernel_ms_iqr"] / read["kernel_ms_median"])
    iqr = iqr.groupby([*KEYS, "order"])["kernel_iqr_pct"].mean()
    read = read.groupby([*KEYS, "order"])["ncu_dram_read_bytes"].mean()
    base = read.xs("Original", level="order")
    ratio = (read / base.reindex(read.index.droplevel("order")).to_numpy()).rename("hbm_read_vs_original")
    rows = rows.join(density, on=KEYS).join(iqr, on=[*KEYS, "order"]).join(ratio, on=[*KEYS, "order"])
    return rows[[*KEYS, "order", "density", "kernel_ms", "kernel_iqr_pct", "reorder_ms", "speedup",
                 "speedup_with_overhead",
                 "l2_hit_pct", "hbm_read_vs_original", "cells"]]


def not_run(frame: pd.DataFrame) -> pd.DataFrame:
    """The cells that did not finish, with their order and error."""
    bad = frame[frame["status"] != "done"]
    return bad.assign(order=[order_label(s, r) for s, r in zip(bad["stages"], bad["reorderer"], strict=True)])[
        [*KEYS, "order", "status", "error"]]


def figure(rows: pd.DataFrame, path: Path) -> None:
    """Net speedup (reorder cost counted) per family and order, one panel per length, 40-head cells."""
    whole = rows[rows["num_heads"] == rows["num_heads"].max()]
    lengths = sorted(whole["seq_len_tokens"].unique())
    fig, axes = plt.subplots(1, len(lengths), figsize=(7 * len(lengths), 4), squeeze=False)
    for ax, length in zip(axes[0], lengths, strict=True):
        pivot = whole[whole["seq_len_tokens"] == length].pivot(index="method", columns="order",
                                                               values="speedup_with_overhead")
        pivot = pivot[[c for c in rows["order"].drop_duplicates() if c in pivot.columns]]
        pivot.plot.bar(ax=ax, width=0.85)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_ylim(0.8, max(1.3, float(pivot.max().max()) + 0.05))
        ax.set_title(f"H200, FA4, {length:,} tokens x {int(whole['num_heads'].max())} heads (measured)")
        ax.set_ylabel("net speedup over the original order")
        ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: table.py OUT RUN_ROOT_OR_TAR...", file=sys.stderr)
        return 2
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        frame = _frame(_roots(argv[1:], Path(scratch)))
    rows = table(frame)
    rows.to_csv(out / "beyond_h200.csv", index=False)
    missed = not_run(frame)
    (out / "beyond_h200.md").write_text(to_markdown(rows) + "\n\nCells that did not run:\n\n"
                                        + (to_markdown(missed) if len(missed) else "none") + "\n")
    figure(rows, out / "beyond_h200_net_speedup.png")
    print(to_markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
