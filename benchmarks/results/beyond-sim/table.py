"""The simulated table of sweep=beyond_sim: its run roots' rows as results.csv and table.md, the simulator's H200 error
against Nsight Compute beside them.

    python benchmarks/results/beyond-sim/table.py RUN_ROOT... --validation VALIDATION_CSV --out DIR [--command TEXT]

Each row is one cell's newest result (``orchestrator.dataset``); its order is named from its variant and reorderer;
HBM read and speedups refer to the original order of the same mask on the same GPU. ``VALIDATION_CSV`` is
``lab/validate_sim.py``'s validation.csv for the H200 rows the simulator is checked on.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import math
from pathlib import Path

import fit_fa4_time  # beside this file

from orchestrator import dataset
from wavealign import hardware, sim

GPU_ORDER = ("h200", "h100", "b200", "a40")
METHOD_ORDER = ("xattention", "vsa")
ORDER_NAMES = {("original", None): "original", ("temporal", None): "Stage 2 alone", ("spatial", "wavealign"):
               "Stage 1 alone", ("wavealign", None): "WaveAlign (S1+S2)", ("spatial", "random"): "random",
               ("spatial", "longest-first"): "longest-first", ("spatial", "curve"): "Hilbert curve"}
COLUMNS = ("gpu", "backend", "q_rows", "scheduler", "method", "tokens", "heads", "order", "density_pct", "l2_hit_pct",
           "hbm_read_gb", "hbm_read_vs_original", "kernel_ms", "kernel_speedup", "plan_ms", "net_speedup", "simulated",
           "note", "h200_validation_l2_mae_pts")


def order_name(row: dict) -> str:
    """How the table names a row's launch order."""
    reorderer = row["reorderer"] if row["variant"] == "spatial" else None
    return ORDER_NAMES[(row["variant"], reorderer)]


def validation(path: Path) -> dict[str, float]:
    """The simulator's error on the measured H200 rows: L2 hit MAE and max (points), DRAM predicted/measured range,
    and the rows counted; the kernel time's, from the fit of its constants to the same cells (``fit_fa4_time``)."""
    rows = list(csv.DictReader(path.open()))
    errors = [float(r["l2_hit_abs_err_pts"]) for r in rows]
    ratios = [float(r["dram_ratio"]) for r in rows]
    return {"rows": len(rows), "l2_mae_pts": sum(errors) / len(errors), "l2_max_pts": max(errors),
            "dram_min": min(ratios), "dram_max": max(ratios), **fit_fa4_time.fit()}


def table_rows(run_roots: list[Path], mae_pts: float) -> list[dict]:
    """One dict per cell (COLUMNS), ordered by GPU, method and order."""
    newest = {}
    for root in run_roots:
        newest.update(dataset.newest_per_cell(dataset.read(root).to_pylist()))
    cells = list(newest.values())
    originals = {(r["hardware"], r["method"]): r for r in cells if r["variant"] == "original" and r["status"] == "done"}
    out = []
    for r in cells:
        facts = sim.execution_facts(r["backend"], r["hardware"]).with_block_size(r["block_size"])
        base = originals.get((r["hardware"], r["method"]))
        done = r["status"] == "done"
        figure = (lambda value, digits: _rounded(value, digits)) if done else (lambda value, digits: "")
        out.append({
            "gpu": r["hardware"], "backend": r["backend"], "q_rows": facts.q_rows, "scheduler": facts.scheduler,
            "method": r["method"], "tokens": r["seq_len_tokens"], "heads": r["num_heads"], "order": order_name(r),
            "density_pct": figure(100 * (r["density"] or 0.0), 1),
            "l2_hit_pct": figure(r["l2_hit_pct"], 1), "hbm_read_gb": figure(r["hbm_read_bytes"] / 1e9, 1),
            "hbm_read_vs_original": figure(r["hbm_read_bytes"] / base["hbm_read_bytes"], 3) if base else "",
            "kernel_ms": figure(r["kernel_ms_median"], 1), "kernel_speedup": figure(r["speedup_vs_original"], 3),
            "plan_ms": figure(r["reorder_ms"], 2), "net_speedup": figure(r["net_speedup_vs_original"], 3),
            "simulated": bool(r["simulated"]),
            "note": "" if done else f"n/a: {r['error'].split(': ', 1)[-1]}",
            "h200_validation_l2_mae_pts": round(mae_pts, 2)})
    rank = {name: i for i, name in enumerate(ORDER_NAMES.values())}
    out.sort(key=lambda x: (GPU_ORDER.index(x["gpu"]), METHOD_ORDER.index(x["method"]), rank[x["order"]]))
    return out


def _rounded(value: float | None, digits: int) -> float | str:
    """``value`` rounded, or "" where it is unknown (None or NaN: a reorderer with no GPU cost model)."""
    return "" if value is None or math.isnan(value) else round(value, digits)


def markdown(rows: list[dict], check: dict[str, float], command: str, versions: str, checked_on: str) -> str:
    """The table as markdown: 'simulated' in its title and in every row, the H200 check above it."""
    shape = " and ".join(sorted({f"{r['tokens']:,} tokens x {r['heads']} heads" for r in rows}))
    lines = [
        f"# Simulated (not measured): XAttention and VSA at {shape} on H200, H100, B200 and A40",
        "",
        f"- command: `{command}`",
        f"- {versions}; built {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC",
        f"- **the simulator against Nsight Compute on the H200** ({check['rows']} FA4 cells, 363,600 tokens x 40 "
        f"heads, five masks, original and WaveAlign; `{checked_on}`): L2 hit error **{check['l2_mae_pts']:.2f} "
        f"points** on average, {check['l2_max_pts']:.2f} at most; HBM read predicted/measured "
        f"{check['dram_min']:.2f}-{check['dram_max']:.2f}; kernel time (its two constants fitted to these cells' "
        f"timed medians, `fit_fa4_time.py`) within {check['time_max_pct']:.1f}%, and within "
        f"{check['held_out_time_max_pct']:.1f}% with each mask held out (speedup off by at most "
        f"{check['held_out_speedup_max']:.3f})",
        "",
        "| GPU | kernel (query rows per launch row, scheduler) | method | order | density | L2 hit | HBM read GB | "
        "HBM vs original | kernel ms | kernel speedup | plan ms | net speedup | |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        # a refusal's reason, its clause after "but" ("this mask's rows are blocks of its method's own token order")
        reason = r["note"].split(", but ", 1)[-1].split(";")[0]
        label = "simulated" + (f"; n/a: {reason}" if r["note"] else "")
        gpu = hardware.get(r["gpu"]).display_name
        pct = {key: f"{r[key]}%" if r[key] != "" else "" for key in ("density_pct", "l2_hit_pct")}
        lines.append(f"| {gpu} | {r['backend']} ({r['q_rows']}, {r['scheduler']}) | {r['method']} | {r['order']} | "
                     f"{pct['density_pct']} | {pct['l2_hit_pct']} | {r['hbm_read_gb']} | {r['hbm_read_vs_original']} | "
                     f"{r['kernel_ms']} | {r['kernel_speedup']} | {r['plan_ms']} | {r['net_speedup']} | {label} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("run_roots", nargs="+", type=Path)
    parser.add_argument("--validation", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--command", default="bash benchmarks/results/beyond-sim/run.sh sim")
    args = parser.parse_args()
    check = validation(args.validation)
    rows = table_rows(args.run_roots, check["l2_mae_pts"])
    first = dataset.read(args.run_roots[0]).to_pylist()[0]
    versions = (f"code {first['git_sha']}, torch {first['torch_version']}, masks built on "
                f"{first['gpu_name'] or 'a CPU'} ({first['host']}), simulated on its CPU")
    with (args.out / "results.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    (args.out / "table.md").write_text(markdown(rows, check, args.command, versions, str(args.validation)))


if __name__ == "__main__":
    main()
