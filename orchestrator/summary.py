"""The end of a sweep: the table of the latest row of every cell of the grid (also written to ``summary.txt``, and its
lines as records to ``summary.json`` and ``summary.csv`` beside it: ``progress.SummaryLine``),
this run's counts, where the results are, and what to do next (log to MLflow later, resume, read the failures),
each as a command that runs as printed from where the sweep ran (``runnable``). What explains an exit status other
than 0 (an interruption, the cells that failed or that no node could take) goes to stderr; the rest to stdout."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig
from rich.console import Console
from rich.text import Text

from orchestrator import dataset, files, tracking
from orchestrator.config_schema import MlflowConfig
from orchestrator.plan import SweepPlan
from orchestrator.progress import SummaryLine, summary_lines, summary_table
from orchestrator.record import SweepOutcome
from orchestrator.redact import redact
from wavealign import metrics


def print_summary(cfg: DictConfig, plan: SweepPlan, outcome: SweepOutcome, console: Console, path: Path,
                  errors: Console | None = None) -> None:
    """The summary on ``console``, and what explains a status other than 0 on ``errors`` (default: stderr); the table
    written to ``path`` and its lines to ``summary.json`` and ``summary.csv`` in the same folder."""
    ids = {c.cell_id for c in plan.grid.cells}
    latest = dataset.newest_per_cell([row for row in dataset.read(cfg.run_root).to_pylist() if row["cell_id"] in ids])
    table = summary_table(list(latest.values()), f"sweep {cfg.name} ({plan.sweep_id})")
    measured = any(row["status"] == "done" for row in latest.values())
    if measured:  # a table of nothing but dashes says less than the reasons below
        console.print(table)
    text = Console(file=io.StringIO(), width=200)
    text.print(table)
    files.write_whole(path, text.file.getvalue())
    lines = summary_lines(list(latest.values()))
    write_lines(lines, Path(path).parent)
    counts = ", ".join(f"{k} {v}" for k, v in sorted(outcome.counts.items())) or "nothing new"
    console.print(f"this run: {counts}; {outcome.skipped_done} cells were already done")
    if outcome.kernel_busy_fraction is not None:
        console.print(f"GPU busy: {outcome.kernel_busy_fraction:.0%} of {outcome.gpu_workers} GPU worker(s)' "
                      f"{outcome.dispatch_s:.0f} s in timed kernel launches (the rest: building inputs and masks, "
                      "planning orders, compiling)")
    say = _plain(console)
    say(f"results: {dataset.results_dir(cfg.run_root).resolve()}  (Parquet, one row per cell)")
    if measured:
        say(f"report:  {runnable('wavealign')} report --run-root {shlex.quote(str(cfg.run_root))}  (figures and "
            "tables, one HTML page)")
    if outcome.tracking_uri:
        say(f"MLflow:  {tracking.ui_hint(outcome.tracking_uri, outcome.experiment_id, runnable('mlflow'))}")
    errors = errors or Console(stderr=True, soft_wrap=True)
    if warning := spread_warning(lines):
        errors.print(Text(warning, style="yellow"))
    if outcome.interrupted:
        errors.print("[yellow]interrupted: finished cells are recorded; run the same command again to resume "
                     "(resume=true skips them)[/yellow]")
    groups = reasons(outcome.rows)
    for (status, error), rows in groups[:MAX_REASONS]:
        where = ", ".join(sorted({f"{r['hardware']}/{r['backend']}" for r in rows}))
        errors.print(Text.assemble((status, "red" if status == "failed" else "yellow"),
                                   f" {len(rows)} cell{'s' * (len(rows) != 1)} ({where}): {error}"))
    if len(groups) > MAX_REASONS:
        errors.print(f"... and {len(groups) - MAX_REASONS} more reasons (the rows' 'error' and 'traceback' columns)")


def spread_warning(lines: list[SummaryLine]) -> str | None:
    """One line naming how many of the summary's judged lines had reps spread beyond ``metrics.SPREAD_LIMIT_PCT``
    (their verdicts say ambiguous: ``metrics.SPREAD_RULE``), the widest spread and what to do; None where none."""
    judged = [line for line in lines if line.verdict not in (metrics.NO_VERDICT, metrics.BASELINE)]
    spread = [line for line in judged if metrics.too_spread(line.spread_pct)]
    if not spread:
        return None
    return (f"warning: {len(spread)} of {len(judged)} lines' reps spread beyond {metrics.SPREAD_LIMIT_PCT:.0f} % of "
            f"their median (up to {max(line.spread_pct for line in spread):.0f} %): the machine was too busy for a "
            "verdict, so they say ambiguous; rerun on a quiet machine or with more reps")


MAX_REASONS = 5  # the reasons a summary prints, most cells first
LINE_FIELDS = tuple(f.name for f in dataclasses.fields(SummaryLine))


def write_lines(lines: list[SummaryLine], folder: Path) -> None:
    """The summary's lines as records, one per line: ``summary.json`` (a list of objects; a figure without a value is
    null) and ``summary.csv`` (``LINE_FIELDS`` as its header; such a figure is empty)."""
    records = [{k: None if isinstance(v, float) and math.isnan(v) else v for k, v in dataclasses.asdict(line).items()}
               for line in lines]
    files.write_whole(folder / "summary.json", json.dumps(records, indent=1) + "\n")
    table = io.StringIO()
    writer = csv.DictWriter(table, fieldnames=LINE_FIELDS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(records)
    files.write_whole(folder / "summary.csv", table.getvalue())


def sync_command(cfg: DictConfig) -> str:
    """The ``sync-mlflow`` command that logs the rows the sweep's MLflow store lacks, as printed (``runnable``): the
    run root, and the tracking URI (``redact``ed: the password goes through MLflow's environment variables) and
    experiment where the sweep did not use the defaults."""
    args = [f"run_root={cfg.run_root}"]
    if cfg.mlflow.tracking_uri is not None:
        args.append(f"mlflow.tracking_uri={redact(cfg.mlflow.tracking_uri)}")
    if cfg.mlflow.experiment != MlflowConfig.experiment:
        args.append(f"mlflow.experiment={cfg.mlflow.experiment}")
    return f"{runnable('wavealign')} sync-mlflow {shlex.join(args)}"


def runnable(tool: str) -> str:
    """How to run ``tool`` (``wavealign``, ``mlflow``) of this Python environment from the current folder, as printed:
    its bare name where ``PATH`` finds that very script (an activated venv, a pip install), else its path (relative
    to the current folder when inside it: ``.venv/bin/wavealign`` after ``make run``), else ``python -m``."""
    script = Path(sys.executable).parent / tool
    if not script.is_file():
        module = "jobs.cli" if tool == "wavealign" else tool
        return f"{shlex.quote(sys.executable)} -m {module}"
    found = shutil.which(tool)
    if found is not None and Path(found).resolve() == script.resolve():
        return tool
    here = Path.cwd()
    return shlex.quote(os.path.relpath(script, here) if script.is_relative_to(here) else str(script))


def _plain(console: Console):
    """``console.print`` for lines that carry the user's own text (run roots, URIs): never read as markup, never
    broken at the terminal's width (a command must stay whole to be copied)."""
    def say(text: str, style: str | None = None) -> None:
        console.print(Text(text, style=style or ""), soft_wrap=True)
    return say


def reasons(rows: list[dict[str, Any]]) -> list[tuple[tuple[str, str], list[dict[str, Any]]]]:
    """The rows that are not done, grouped by (status, first line of the error), the largest group first."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        if row["status"] != "done":
            groups.setdefault((row["status"], (row["error"] or "no error recorded").splitlines()[0]), []).append(row)
    return sorted(groups.items(), key=lambda item: -len(item[1]))
