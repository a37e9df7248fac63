"""The table of run_h200.sh: per run of the sweep its GPU-busy fraction and wall times (from the run's
``sweeps/<id>/run-*.json``), then per cell the kernel median of each run and their ratio, marking the cells timed
while their worker prefetched the next group's inputs, so a reader sees whether prefetching moved the medians.

    python3 busy_table.py OFF_ROOT ON_ROOT [--json OUT.json]

Reads the Parquet with pyarrow alone (no wavealign import). Either root may be missing (printed as such).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import sys
from pathlib import Path

import pyarrow.dataset as ds

# what decides a group's inputs (wavealign.pipeline.INPUT_FIELDS, less the placement): two groups in a row on
# different values here mean the worker built (or prefetched) new inputs between them
INPUTS = ("workload", "method", "method_params", "seed", "block_size", "seq_len_tokens", "num_heads", "head_dim",
          "model", "captured", "resolution", "frames", "heads", "layer", "step")
CELL = ("backend", "method", "variant", "seq_k", "seed")  # what the table shows of a cell (matched by cell_id)


def run_record(root: Path) -> dict | None:
    records = sorted(root.glob("sweeps/*/run-*.json"))
    return json.loads(records[-1].read_text()) if records else None


def rows(root: Path) -> list[dict]:
    folder = root / "results"
    if not folder.is_dir():
        return []
    table = ds.dataset(folder, format="parquet", partitioning="hive", ignore_prefixes=[".", "_"]).to_table()
    latest: dict[str, dict] = {}
    for row in table.to_pylist():
        if row["cell_id"] not in latest or row["recorded_at"] > latest[row["cell_id"]]["recorded_at"]:
            latest[row["cell_id"]] = row
    return list(latest.values())


def beside_prefetch(run_rows: list[dict]) -> set[str]:
    """Cell ids of groups timed while their worker built the next group's inputs ahead: on each worker, a group
    followed by a prefetched group on other inputs."""
    groups: dict[str, list[dict]] = {}
    for row in run_rows:
        groups.setdefault(row["group_id"], []).append(row)
    by_worker: dict[object, list[list[dict]]] = {}
    for group in groups.values():
        by_worker.setdefault(group[0]["worker_pid"], []).append(group)
    marked = set()
    for seq in by_worker.values():
        seq.sort(key=lambda g: g[0]["started_at"])
        for current, following in itertools.pairwise(seq):
            other_inputs = any(current[0][k] != following[0][k] for k in INPUTS)
            if other_inputs and any(r.get("inputs_prefetched") for r in following):
                marked |= {r["cell_id"] for r in current}
    return marked


def timed_calls(row: dict) -> int:
    return max(row["warmup"], 1) + row["reps"]


def run_summary(label: str, root: Path, run_rows: list[dict]) -> dict:
    record = run_record(root) or {}
    done = [r for r in run_rows if r["status"] == "done"]
    groups = {r["group_id"]: r for r in done}
    return {"run": label, "root": str(root), "kernel_busy_fraction": record.get("kernel_busy_fraction"),
            "dispatch_s": record.get("dispatch_s"), "startup_s": record.get("startup_s"),
            "workers": record.get("workers"), "cells_done": len(done),
            "cells_failed": sum(r["status"] == "failed" for r in run_rows),
            "kernel_calls_s": sum(timed_calls(r) * r["kernel_ms_median"] for r in done
                                  if r["timer"] == "cuda_events") / 1e3,
            "mask_build_s": sum(g["mask_ms"] for g in groups.values() if g["mask_ms"] is not None
                                and math.isfinite(g["mask_ms"])) / 1e3,
            "compile_s": sum(max(r["first_call_ms"] - r["kernel_ms_median"], 0.0) for r in done
                             if r["first_call_ms"] is not None and math.isfinite(r["first_call_ms"])) / 1e3,
            "groups": len({r["group_id"] for r in run_rows}),
            "groups_prefetched": len({r["group_id"] for r in done if r.get("inputs_prefetched")})}


def fmt(value, spec: str) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("off", type=Path, help="run root of the sweep with ray.prefetch_inputs=false")
    parser.add_argument("on", type=Path, help="run root of the sweep with ray.prefetch_inputs=true")
    parser.add_argument("--json", type=Path, help="also write everything printed here as JSON")
    args = parser.parse_args(argv)
    off_rows, on_rows = rows(args.off), rows(args.on)
    runs = [run_summary("prefetch off", args.off, off_rows), run_summary("prefetch on", args.on, on_rows)]
    print("| run | busy fraction | dispatch s | startup s | kernel calls s | mask builds s | compile s | groups "
          "(prefetched) | cells done / failed |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in runs:
        print(f"| {r['run']} | {fmt(r['kernel_busy_fraction'], '.3f')} | {fmt(r['dispatch_s'], '.1f')} | "
              f"{fmt(r['startup_s'], '.1f')} | {r['kernel_calls_s']:.1f} | {r['mask_build_s']:.1f} | "
              f"{r['compile_s']:.1f} | {r['groups']} ({r['groups_prefetched']}) | {r['cells_done']} / "
              f"{r['cells_failed']} |")

    marked = beside_prefetch(on_rows)
    # cells pair by what they measure, not by id: a cell's id carries the code's fingerprint, which differs when the
    # two runs ran on different commits
    off_by = {tuple(str(r[k]) for k in CELL): r for r in off_rows if r["status"] == "done"}
    on_by = {tuple(str(r[k]) for k in CELL): r for r in on_rows if r["status"] == "done"}
    cells = []
    print()
    print("| backend | method | variant | seq_k | seed | off median ms | on median ms | on / off | "
          "on: inputs prefetched | on: timed beside a prefetch |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for key in sorted({*off_by, *on_by}):
        off, on = off_by.get(key), on_by.get(key)
        ratio = on["kernel_ms_median"] / off["kernel_ms_median"] if off and on else None
        cell_id = on["cell_id"] if on else off["cell_id"]
        cell = {"cell_id": cell_id, **dict(zip(CELL, key, strict=True)),
                "off_ms": off and off["kernel_ms_median"], "on_ms": on and on["kernel_ms_median"], "ratio": ratio,
                "off_iqr_ms": off and off["kernel_ms_iqr"], "on_iqr_ms": on and on["kernel_ms_iqr"],
                "inputs_prefetched": bool(on and on.get("inputs_prefetched")),
                "beside_prefetch": bool(on and on["cell_id"] in marked)}
        cells.append(cell)
        print(f"| {' | '.join(key)} | {fmt(cell['off_ms'], '.2f')} | {fmt(cell['on_ms'], '.2f')} | "
              f"{fmt(ratio, '.4f')} | {'yes' if cell['inputs_prefetched'] else 'no'} | "
              f"{'YES' if cell['beside_prefetch'] else 'no'} |")
    print()
    for name, chosen in (("timed beside a prefetch", [c for c in cells if c["beside_prefetch"]]),
                         ("the other cells", [c for c in cells if not c["beside_prefetch"]])):
        ratios = [c["ratio"] for c in chosen if c["ratio"] is not None]
        if ratios:
            print(f"on / off, {name}: median {statistics.median(ratios):.4f}, min {min(ratios):.4f}, "
                  f"max {max(ratios):.4f} over {len(ratios)} cells")
        else:
            print(f"on / off, {name}: no cells")
    if args.json:
        args.json.write_text(json.dumps({"runs": runs, "cells": cells}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
