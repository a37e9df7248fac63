"""Kernel time of one cell per backend through the old sweep path and the new one, side by side on one GPU.

    python benchmarks/results/one-pipeline-h200/compare_paths.py --old DIR --out FILE.json [--rounds 2]

``DIR`` holds the previous commit's ``wavealign/`` (``git archive e879fcf wavealign``). Each round runs the old
code, then the new, each in its own process (``wavealign.pipeline.run_group`` of that code on the same cells:
8 heads x 147,600 tokens, iid random blocks at rho 0.25, original order and WaveAlign), so both see the same GPU
state in turn and any drift shows as round-to-round spread. Prints one table, writes every row to FILE.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
BACKENDS = [("triton", {}), ("flex", {}), ("fa4", {}), ("flashinfer", {"head_order": "native"})]
SHAPE = {"seq_len_tokens": 147_600, "num_heads": 8, "head_dim": 128, "block_size": 128}


def child(code: str) -> list[dict]:
    """Run every backend's (original, wavealign) group with this process's ``wavealign``."""
    from wavealign import kernels, pipeline

    method, params = (("synthetic-random", {"density": 0.25}) if code == "old"
                      else ("random", {"density": 0.25, "seed": 0}))
    rows = []
    for backend, options in BACKENDS:
        if backend not in kernels.available():
            rows.append({"code": code, "backend": backend, "error": "not available here"})
            continue
        wave = 264 if backend == "flashinfer" else 132  # 2 CTAs/SM for FlashInfer's FA2 prefill on the H200
        cells = [pipeline.Cell(cell_id=f"{backend}-{variant}", group_id=backend, hardware="h200",
                               profile_hardware="h200", backend=backend, method=method, variant=variant,
                               stages=stages, skip="force", workload="shape-8h", wave_size=wave, seed=0,
                               method_params=params, backend_params=options, reps=10, warmup=2, **SHAPE)
                 for variant, stages in (("original", "none"), ("wavealign", "both"))]
        for cell, r in zip(cells, pipeline.run_group(cells), strict=True):
            rows.append({"code": code, "backend": backend, "variant": cell.variant, "status": r.status,
                         "error": r.error, "kernel_ms": r.kernel_ms_median, "kernel_iqr_ms": r.kernel_ms_iqr,
                         "reorder_ms": r.reorder_ms, "density": r.density,
                         "launch_plan_ms": getattr(r, "launch_plan_ms", None)})
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--old", type=Path)
    p.add_argument("--out", type=Path)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--child", choices=("old", "new"))
    args = p.parse_args()
    if args.child:
        print("ROWS " + json.dumps(child(args.child)))
        return 0
    rows = []
    for rnd in range(args.rounds):
        for code, root in (("old", args.old), ("new", REPO)):
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
            done = subprocess.run([sys.executable, __file__, "--child", code], env=env, capture_output=True,
                                  text=True, cwd=root)
            found = [ln for ln in done.stdout.splitlines() if ln.startswith("ROWS ")]
            if done.returncode or not found:
                print(done.stdout[-2000:], done.stderr[-4000:])
                return 1
            rows += [{**r, "round": rnd} for r in json.loads(found[0][5:])]
    args.out.write_text(json.dumps(rows, indent=1))
    print("| backend | variant | old ms (per round) | new ms (per round) | new / old (median) |")
    print("|---|---|---|---|---|")
    for backend, _ in BACKENDS:
        for variant in ("original", "wavealign"):
            times = {c: [r["kernel_ms"] for r in rows if r["code"] == c and r["backend"] == backend
                         and r.get("variant") == variant and r.get("status") == "done"] for c in ("old", "new")}
            if not times["old"] or not times["new"]:
                print(f"| {backend} | {variant} | {times['old']} | {times['new']} | missing |")
                continue
            ratio = statistics.median(times["new"]) / statistics.median(times["old"])
            print(f"| {backend} | {variant} | {', '.join(f'{t:.3f}' for t in times['old'])} | "
                  f"{', '.join(f'{t:.3f}' for t in times['new'])} | {ratio:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
