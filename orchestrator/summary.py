"""The end of a sweep: the table of the latest row of every cell of the grid (also written to ``summary.txt``),
this run's counts, where the results are, and what to do next (log to MLflow later, resume, read the failures)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from omegaconf import DictConfig
from rich.console import Console
from rich.text import Text

from wavealign.orchestrator import dataset, files, tracking
from wavealign.orchestrator.plan import SweepPlan
from wavealign.orchestrator.progress import summary_table
from wavealign.orchestrator.record import SweepOutcome


def print_summary(cfg: DictConfig, plan: SweepPlan, outcome: SweepOutcome, console: Console, path: Path) -> None:
    ids = {c.cell_id for c in plan.grid.cells}
    latest: dict[str, dict[str, Any]] = {}
    for row in dataset.read(cfg.run_root).to_pylist():
        if row["cell_id"] in ids and (row["cell_id"] not in latest
                                      or row["recorded_at"] >= latest[row["cell_id"]]["recorded_at"]):
            latest[row["cell_id"]] = row
    table = summary_table(list(latest.values()), f"sweep {cfg.name} ({plan.sweep_id})")
    measured = any(row["status"] == "done" for row in latest.values())
    if measured:  # a table of nothing but dashes says less than the reasons below
        console.print(table)
    text = Console(file=io.StringIO(), width=200)
    text.print(table)
    files.write_whole(path, text.file.getvalue())
    counts = ", ".join(f"{k} {v}" for k, v in sorted(outcome.counts.items())) or "nothing new"
    console.print(f"this run: {counts}; {outcome.skipped_done} cells were already done")
    if outcome.kernel_busy_fraction is not None:
        console.print(f"GPU busy: {outcome.kernel_busy_fraction:.0%} of {outcome.gpu_workers} GPU worker(s)' "
                      f"{outcome.dispatch_s:.0f} s in timed kernel launches (the rest: building inputs and masks, "
                      "planning orders, compiling)")
    console.print(f"results: {dataset.results_dir(cfg.run_root).resolve()}  (Parquet, one row per cell)")
    if measured:
        console.print(f"next: wavealign report --run-root {cfg.run_root}  (the paper's figures and tables as PNGs and "
                      "one HTML page)", soft_wrap=True)
    if outcome.tracking_uri:
        console.print(f"MLflow UI: {tracking.ui_hint(outcome.tracking_uri, outcome.experiment_id)}", soft_wrap=True)
    if outcome.mlflow_down_reason:
        console.print(f"[yellow]MLflow went unreachable ({outcome.mlflow_down_reason}); the rows are in Parquet. "
                      f"Log them later: wavealign sync-mlflow run_root={cfg.run_root}[/yellow]")
    if outcome.interrupted:
        console.print("[yellow]interrupted: finished cells are recorded; run the same command again to resume "
                      "(resume=true skips them)[/yellow]")
    groups = reasons(outcome.rows)
    for (status, error), rows in groups[:MAX_REASONS]:
        where = ", ".join(sorted({f"{r['hardware']}/{r['backend']}" for r in rows}))
        console.print(Text.assemble((status, "red" if status == "failed" else "yellow"),
                                    f" {len(rows)} cell{'s' * (len(rows) != 1)} ({where}): {error}"))
    if len(groups) > MAX_REASONS:
        console.print(f"... and {len(groups) - MAX_REASONS} more reasons (the rows' 'error' and 'traceback' columns)")


MAX_REASONS = 5  # the reasons a summary prints, most cells first


def reasons(rows: list[dict[str, Any]]) -> list[tuple[tuple[str, str], list[dict[str, Any]]]]:
    """The rows that are not done, grouped by (status, first line of the error), the largest group first."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        if row["status"] != "done":
            groups.setdefault((row["status"], (row["error"] or "no error recorded").splitlines()[0]), []).append(row)
    return sorted(groups.items(), key=lambda item: -len(item[1]))
