"""Measure the sweep's orchestration overhead: time per cell spent outside the cell's own work.

    python lab/bench_orchestration.py [--cells 500] [--no-mlflow] [--run-root DIR]

Runs ``--cells`` trivial cells (the reference kernel on one 128-token block, one repetition) through the
real sweep path (grid -> Ray CPU workers -> Parquet + MLflow sqlite) and reports
(dispatch wall time x workers - sum of the cells' own work) / cells, Ray and worker start-up excluded.
"""

from __future__ import annotations

import sys
import tempfile
import time

from common import argument_parser, run_study
from rich.console import Console


def main(argv: list[str]) -> int:
    parser = argument_parser("bench_orchestration", __doc__)
    parser.add_argument("--cells", type=int, default=500)
    parser.add_argument("--no-mlflow", action="store_true", help="record to Parquet only")
    parser.add_argument("--run-root", default=None, help="default: a fresh temporary folder")
    args = parser.parse_args(argv)
    from orchestrator import config, sweep

    root = args.run_root or tempfile.mkdtemp(prefix="wavealign-bench-")
    cfg = config.load(["~sweep", "grid.hardware=[cpu]", "grid.backend=[reference]", "grid.method=[random]",
                       "grid.workload=[shape-2h]", "grid.seq_k=[0.128]", "grid.variant=[original]",
                       f"grid.seed=[{','.join(map(str, range(args.cells)))}]", "grid.reps=1", "grid.warmup=0",
                       f"run_root={root}", "progress=false", f"mlflow.enabled={str(not args.no_mlflow).lower()}"])
    start = time.monotonic()
    outcome = sweep.run(cfg, Console(quiet=True))
    total_s = time.monotonic() - start
    done = [r for r in outcome.rows if r["status"] == "done"]
    own_s = sum(r["cell_wall_s"] + r["mask_ms"] / 1e3 for r in done)
    overhead_ms = (outcome.dispatch_s * outcome.workers - own_s) / len(outcome.rows) * 1e3
    print("| cells | done | workers | MLflow | start-up s | dispatch s | cell's own work ms | overhead ms / cell | "
          "MLflow drain s | total s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    print(f"| {len(outcome.rows)} | {len(done)} | {outcome.workers} | {'no' if args.no_mlflow else 'sqlite'} | "
          f"{outcome.startup_s:.1f} | {outcome.dispatch_s:.1f} | {own_s / max(len(done), 1) * 1e3:.2f} | "
          f"{overhead_ms:.1f} | {outcome.mlflow_drain_s:.1f} | {total_s:.1f} |")
    return 0 if len(done) == len(outcome.rows) == args.cells else 1


if __name__ == "__main__":
    sys.exit(run_study("bench_orchestration", main))
