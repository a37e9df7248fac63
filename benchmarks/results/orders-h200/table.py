"""The tables of ``orders-h200/`` from the device's outputs (run.sh), on the CPU:

    python benchmarks/results/orders-h200/table.py OUT_DIR RUN_ROOT [RUN_ROOT ...] [--sim-static CSV] [--bands CSV]

Each RUN_ROOT is an unpacked ``t364.tar`` / ``t148.tar`` (results/ and sweeps/). Writes into OUT_DIR:
``orders_h200.csv`` (every timed row), ``chooser.csv`` (per group: auto's pick against the measured best, a paired
interval of their ratio), ``static_ncu.csv`` (the static path: Nsight Compute against the simulator, where the
runs have it), ``bands.csv`` (copied) and ``orders_h200.md`` with the short tables.
"""

from __future__ import annotations

import argparse
import math
import shutil
from pathlib import Path

import pandas as pd

from wavealign import metrics

NAMES = ["original", "temporal", "spatial", "wavealign", "longest-first", "curve", "rounds", "balanced",
         "wavealign-balanced"]


def timed_rows(roots: list[Path]) -> pd.DataFrame:
    frames = [pd.read_parquet(root / "results").assign(run_root=root.name) for root in roots]
    df = pd.concat(frames, ignore_index=True)
    return df[(df.status == "done") & (df.measure == "timed")].copy()


def chooser_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Per group with an auto cell: the pick, the measured best fixed order (by net time), and auto over that best
    and over the original, net of plan, with paired 95 % intervals from the same rounds."""
    out = []
    for group_id, g in df.groupby("group_id"):
        auto = g[g.variant == "auto"]
        if auto.empty:
            continue
        auto = auto.iloc[0]
        fixed = g[g.variant != "auto"]
        original = fixed[fixed.order_candidate == "original"].iloc[0]
        best = fixed.loc[fixed.total_ms.idxmin()]
        vs_best = metrics.paired_ratio(list(best.kernel_ms_reps), list(auto.kernel_ms_reps),
                                       extra_ms=auto.reorder_ms - best.reorder_ms)
        out.append(dict(
            backend=g.backend.iloc[0], method=g.method.iloc[0], tokens=int(g.seq_len_tokens.iloc[0]),
            group_id=group_id, pick=auto.order_candidate, best=best.order_candidate,
            pick_predicted_rank=auto.predicted_rank,
            best_predicted_rank=best.predicted_rank,
            auto_vs_best=vs_best.point, auto_vs_best_low=vs_best.low, auto_vs_best_high=vs_best.high,
            within_1pct=vs_best.low >= 0.99 or auto.order_candidate == best.order_candidate,
            auto_net_vs_original=auto.net_speedup_vs_original, auto_net_low=auto.net_speedup_ci_low,
            auto_net_high=auto.net_speedup_ci_high, best_net_vs_original=best.net_speedup_vs_original,
            chooser_ms=auto.chooser_ms, plan_ms=auto.reorder_ms, kernel_ms=auto.kernel_ms_median,
            limit_speedup=original.predicted_kernel_ms / auto.order_limit_ms,
            original_kernel_ms=original.kernel_ms_median))
    return pd.DataFrame(out)


def fmt(x: float, low: float = math.nan, high: float = math.nan) -> str:
    if not math.isfinite(x):
        return "-"
    return f"{x:.3f}" + (f" [{low:.3f}, {high:.3f}]" if math.isfinite(low) else "")


def speedup_table(df: pd.DataFrame, backend: str, tokens: int) -> str:
    """Net speedup over the original per family and order, the first auto group of each family."""
    sub = df[(df.backend == backend) & (df.seq_len_tokens == tokens)]
    names = [n for n in NAMES if n in set(sub.order_candidate)]
    lines = ["| family | " + " | ".join(names) + " | auto: pick, net | limit |",
             "|---" * (len(names) + 3) + "|"]
    for method, m in sub.groupby("method"):
        group = m[m.group_id == m.group_id.iloc[0]]
        fixed = group[group.variant != "auto"].set_index("order_candidate")
        best = fixed.net_speedup_vs_original.idxmax()
        cells = []
        for n in names:
            if n not in fixed.index:
                cells.append("n/a")
                continue
            r = fixed.loc[n]
            text = fmt(r.net_speedup_vs_original, r.net_speedup_ci_low, r.net_speedup_ci_high)
            cells.append(f"**{text}**" if n == best else text)
        auto = group[group.variant == "auto"]
        pick = "-" if auto.empty else f"{auto.order_candidate.iloc[0]}, {auto.net_speedup_vs_original.iloc[0]:.3f}"
        limit = "-" if auto.empty else f"{auto.order_limit_ms.iloc[0]:.1f} ms"
        lines.append(f"| {method} | " + " | ".join(cells) + f" | {pick} | {limit} |")
    return "\n".join(lines)


def static_ncu(roots: list[Path], sim_csv: Path | None) -> pd.DataFrame:
    frames = [pd.read_parquet(root / "results") for root in roots]
    df = pd.concat(frames, ignore_index=True)
    ncu = df[(df.status == "done") & (df.measure == "ncu")][
        ["method", "variant", "reorderer", "order_candidate", "ncu_l2_hit_pct", "ncu_dram_read_bytes",
         "ncu_kernel_ms", "kernel_ms_median"]]
    if sim_csv is None or not sim_csv.is_file():
        return ncu
    predicted = pd.read_csv(sim_csv)
    joined = ncu.merge(predicted, on=["method", "variant", "reorderer", "order_candidate"], how="left")
    joined["l2_error_points"] = joined.sim_l2_hit_pct - joined.ncu_l2_hit_pct
    joined["dram_ratio"] = joined.sim_hbm_read_bytes / joined.ncu_dram_read_bytes
    return joined


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("roots", type=Path, nargs="+")
    parser.add_argument("--sim-static", type=Path)
    parser.add_argument("--bands", type=Path)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    df = timed_rows(args.roots)
    keep = ["backend", "method", "seq_len_tokens", "variant", "reorderer", "order_candidate", "kernel_ms_median",
            "kernel_ms_iqr", "reorder_ms", "chooser_ms", "speedup_vs_original", "speedup_ci_low", "speedup_ci_high",
            "net_speedup_vs_original", "net_speedup_ci_low", "net_speedup_ci_high", "verdict", "predicted_kernel_ms",
            "predicted_rank", "measured_rank", "order_limit_ms", "headroom_captured", "group_id", "git_sha"]
    df[keep].sort_values(["backend", "seq_len_tokens", "method", "group_id", "measured_rank"]).to_csv(
        args.out / "orders_h200.csv", index=False, float_format="%.4f")
    chosen = chooser_rows(df)
    chosen.to_csv(args.out / "chooser.csv", index=False, float_format="%.4f")
    ncu = static_ncu(args.roots, args.sim_static)
    if not ncu.empty:  # a run with Nsight Compute cells (t148's ncu_static grid)
        ncu.to_csv(args.out / "static_ncu.csv", index=False, float_format="%.4f")
    if args.bands is not None and args.bands.resolve() != (args.out / "bands.csv").resolve():
        shutil.copy(args.bands, args.out / "bands.csv")
    parts = []
    for backend in ("fa4", "triton-static"):
        for tokens in (363600, 147600):
            if ((df.backend == backend) & (df.seq_len_tokens == tokens)).any():
                parts.append(f"### {backend}, {tokens:,} tokens x 40 heads: net speedup over the original "
                             f"[paired 95 % interval]\n\n{speedup_table(df, backend, tokens)}\n")
    lines = ["| backend | tokens | family | pick (pred. rank) | measured best (pred. rank) | auto / best, net | "
             "auto net / original | chooser ms | limit speedup |", "|---" * 9 + "|"]
    for r in chosen.sort_values(["backend", "tokens", "method"]).itertuples():
        lines.append(f"| {r.backend} | {r.tokens:,} | {r.method} | {r.pick} ({r.pick_predicted_rank:.0f}) | "
                     f"{r.best} ({r.best_predicted_rank:.0f}) | "
                     f"{fmt(r.auto_vs_best, r.auto_vs_best_low, r.auto_vs_best_high)} | "
                     f"{fmt(r.auto_net_vs_original, r.auto_net_low, r.auto_net_high)} | {r.chooser_ms:.0f} | "
                     f"{r.limit_speedup:.3f} |")
    parts.append("### The chooser's pick against the measured best\n\n" + "\n".join(lines) + "\n")
    (args.out / "orders_h200.md").write_text("\n".join(parts))
    print("\n".join(parts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
