"""Run a benchmark sweep: Hydra grid -> Ray workers by GPU type -> Parquet + MLflow (`wavealign sweep --help`).

    wavealign sweep                                   # sweep=smoke: a 1-2 minute CPU sweep (make run)
    wavealign sweep sweep=paper_h100 grid.seq_k=[148,364] ray.address=auto
    wavealign sweep --dry-run sweep=paper_a40         # grid size, cells per GPU type, filtered, estimate
"""

from __future__ import annotations

import sys

from rich.console import Console

USAGE = """usage: wavealign sweep [--dry-run] [KEY=VALUE ...]

Hydra overrides of conf/config.yaml, e.g.
  sweep=smoke|paper_h100|paper_a40|h200    pick a grid (conf/sweep/)
  grid.seq_k=[148,364] grid.method=[xattention] +grid.method_params.xattention.threshold=[0.8,0.9]
  ray.address=auto | ray://host:10001      join a cluster (default: start a local Ray)
  run_root=DIR  mlflow.tracking_uri=URI    where results go (default ./wavealign-runs, sqlite MLflow there)
  resume=false  force=true  dry_run=true   re-run finished cells / only describe the sweep
  max_cells=N                              refuse a sweep of more cells (--dry-run only counts it)
"""


def main(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        print(USAGE + "\n" + (__doc__ or ""))
        return 0
    overrides = ["dry_run=true" if a == "--dry-run" else a for a in argv]
    from orchestrator import config, lock, plan, sweep

    console = Console()
    if not console.is_terminal:  # logs and `make run | tee`: wide enough for the summary table
        console = Console(width=160)
    try:
        cfg = config.load(overrides)
        if cfg.dry_run:
            plan.dry_run(cfg, console)
            return 0
        plan.check_size(cfg)  # before the run root is locked or Ray started
        outcome = sweep.run(cfg, console)
    except (config.ConfigError, lock.RunRootBusy) as exc:
        console.print(f"[red]wavealign sweep: {exc}[/red]")
        return 2
    if outcome.terminated_by == "SIGTERM":
        return 143  # 128 + SIGTERM, as a shell reports a process that signal ended
    return 130 if outcome.interrupted else (1 if outcome.counts.get("failed") else 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
