"""The same cells through two checkouts' sweeps, side by side: the figures issue 29's redesign must keep.

    python benchmarks/results/redesign-h200/same_figures.py BEFORE AFTER [--rounds 2] [--out FILE.json] [--dry-run]

``BEFORE`` and ``AFTER`` are checkouts (e.g. ``git archive 673208f | tar -x -C /tmp/before`` and this one). Each
round runs ``python -m jobs.cli sweep`` of each checkout in turn, that checkout first on PYTHONPATH (the
rest of PYTHONPATH, e.g. the Ray/Hydra/MLflow and FA4 bundles, after it), MLflow off, progress off: one H200 group
per backend (fa4, triton, flex: original and WaveAlign order, timed) and one simulated group (fa4's launch on the
H200, original and WaveAlign). A checkout without ``wavealign/measurers`` is spelled the old way (``backend=[sim]``
with ``backend_params.sim.kernel=fa4``), one with it the new way (``measure=[simulated]``). Prints one line per cell:
each checkout's kernel_ms_median (the median over rounds), its IQR, the AFTER/BEFORE ratio, and for simulated cells
the L2 hit and HBM bytes (which must be equal). Writes every row to FILE.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

# sweep=smoke reshaped in both checkouts: its grid becomes the timed H200 groups, its extra grid sim_a40 the
# simulated H200 group (Hydra cannot add a typed extra grid from the command line); planted masks, 16 prototypes
COMMON = ["sweep=smoke", "grid.hardware=[h200]", "grid.backend=[fa4,triton,flex]", "grid.seq_k=[147.6]",
          "grid.variant=[original,wavealign]", "grid.reps=20", "grid.warmup=3", "extra_grids.sim_a40.hardware=[h200]",
          "extra_grids.sim_a40.seq_k=[147.6]", "extra_grids.sim_a40.variant=[original,wavealign]",
          "~extra_grids.cpu_reference", "~extra_grids.cpu_methods", "mlflow.enabled=false", "progress=false"]
SPELLING = {"old": ["extra_grids.sim_a40.backend_params.sim.kernel=fa4"],
            "new": ["grid.measure=[timed]", "extra_grids.sim_a40.backend=[fa4]"]}
COLUMNS = ["backend", "backend_params", "variant", "simulated", "status", "error", "kernel_ms_median",
           "kernel_ms_iqr", "reorder_ms", "l2_hit_pct", "hbm_read_bytes", "density", "timer"]
READ = """
import json, sys
from orchestrator import dataset
rows = dataset.read(sys.argv[1], columns=json.loads(sys.argv[2])).to_pylist()
print(json.dumps(rows, default=str))
"""


def run(checkout: Path, dry_run: bool) -> list[dict]:
    """One sweep of the cells with ``checkout``'s code; its rows, each named ``backend/how/variant``."""
    spelling = "new" if (checkout / "wavealign" / "measurers").is_dir() else "old"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(checkout), os.environ.get("PYTHONPATH")]))}
    with tempfile.TemporaryDirectory(prefix="same-figures-") as runs:
        overrides = [*COMMON, *SPELLING[spelling], f"run_root={runs}", *(["--dry-run"] if dry_run else [])]
        done = subprocess.run([sys.executable, "-m", "jobs.cli", "sweep", *overrides], cwd=checkout,
                              env=env, capture_output=True, text=True, timeout=1800)
        print(done.stdout[-2000:], done.stderr[-2000:], sep="\n", file=sys.stderr)
        if done.returncode != 0 or dry_run:
            return []
        read = subprocess.run([sys.executable, "-c", READ, runs, json.dumps(COLUMNS)], cwd=checkout, env=env,
                              capture_output=True, text=True, check=True)
    rows = json.loads(read.stdout)
    for row in rows:
        kernel = json.loads(row["backend_params"]).get("kernel", row["backend"]) if row["backend"] == "sim" \
            else row["backend"]
        row["cell"] = f"{kernel}/{'simulated' if row['simulated'] else 'timed'}/{row['variant']}"
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--dry-run", action="store_true", help="compose and count the cells; run none")
    args = parser.parse_args()
    rows = [{**row, "code": code, "round": r} for r in range(args.rounds)
            for code, checkout in (("before", args.before), ("after", args.after))
            for row in run(checkout.resolve(), args.dry_run)]
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    by_cell: dict[str, dict[str, list[dict]]] = {}
    for row in rows:
        by_cell.setdefault(row["cell"], {}).setdefault(row["code"], []).append(row)
    print(f"{'cell':<28} {'before ms':>10} {'iqr':>7} {'after ms':>10} {'iqr':>7} {'after/before':>12}  simulated")
    for cell, codes in sorted(by_cell.items()):
        before, after = ([r for r in codes.get(c, []) if r["status"] == "done"] for c in ("before", "after"))
        if not before or not after:
            errors = [r["error"] for side in codes.values() for r in side if r["status"] != "done"]
            print(f"{cell:<28} not done in both: {errors}")
            continue
        ms = [statistics.median(r["kernel_ms_median"] for r in side) for side in (before, after)]
        iqr = [statistics.median(r["kernel_ms_iqr"] for r in side) for side in (before, after)]
        sim = "" if not before[0]["simulated"] else (
            f"L2 hit {before[0]['l2_hit_pct']:.3f} / {after[0]['l2_hit_pct']:.3f} %, HBM "
            f"{before[0]['hbm_read_bytes']:.6g} / {after[0]['hbm_read_bytes']:.6g} B")
        print(f"{cell:<28} {ms[0]:>10.4f} {iqr[0]:>7.4f} {ms[1]:>10.4f} {iqr[1]:>7.4f} {ms[1] / ms[0]:>12.4f}  {sim}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
