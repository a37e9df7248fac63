"""Recording a sweep's rows: each batch to Parquet first (the record of truth), then the same rows to MLflow;
and one JSON per run of the sweep with its counts and wall times."""

from __future__ import annotations

import json
import shlex
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from orchestrator import dataset, tracking
from orchestrator.plan import SweepPlan
from wavealign.records import CPU, Cell


@dataclass
class SweepOutcome:
    """The result of ``run``: counts, the rows recorded now, and where they are."""

    sweep_id: str
    run_root: Path
    tracking_uri: str | None
    counts: Counter = field(default_factory=Counter)
    rows: list[dict[str, Any]] = field(default_factory=list)
    interrupted: bool = False
    terminated_by: str | None = None  # "SIGTERM" when a signal, not Ctrl-C, stopped the sweep
    mlflow_down_reason: str | None = None
    skipped_done: int = 0
    workers: int = 0
    # wall seconds: starting Ray and the workers (imports, actor start), then dispatching and recording
    # to Parquet, then waiting for MLflow's logging thread to catch up
    startup_s: float = 0.0
    dispatch_s: float = 0.0
    mlflow_drain_s: float = 0.0


def repro_command(cfg: DictConfig, cell: Cell) -> str:
    """The command that re-runs just ``cell``: the sweep's own overrides, that cell only, forced."""
    return "wavealign sweep " + shlex.join([*cfg.overrides, f"only_cells=[{cell.cell_id}]", "force=true"])


class Recorder:
    """Buffers rows; each flush writes one Parquet batch, then logs the same rows to MLflow."""

    def __init__(self, cfg: DictConfig, plan: SweepPlan, tracker: tracking.Tracker | None,
                 parent_run_id: str | None) -> None:
        self.cfg, self.plan = cfg, plan
        self.mlflow = tracking.BackgroundLogger(tracker, parent_run_id) if tracker is not None else None
        self.buffer: list[dict[str, Any]] = []
        self.rows: list[dict[str, Any]] = []
        self.baselines: set[str] = set()  # cell ids run only as a resumed group's reference (see dispatch.queues)

    def recordable(self, group: list[Cell]) -> list[Cell]:
        """The cells of ``group`` this sweep records (not the baselines re-run for a resumed group)."""
        return [c for c in group if c.cell_id not in self.baselines]

    def add(self, cell: Cell, result, **extra: Any) -> dict[str, Any] | None:
        """Buffer ``cell``'s row; a baseline's result is not recorded again (None)."""
        if cell.cell_id in self.baselines:
            return None
        status = extra.pop("status", None)
        error = extra.pop("error", None)
        row = dataset.make_row(cell, result, sweep_id=self.plan.sweep_id, sweep_name=self.cfg.name, status=status,
                               error=error, extra={**extra, "repro_command": repro_command(self.cfg, cell)})
        self.buffer.append(row)
        self.rows.append(row)
        if len(self.buffer) >= self.cfg.batch_cells:
            self.flush()
        return row

    def flush(self) -> None:
        if not self.buffer:
            return
        dataset.write(self.cfg.run_root, self.buffer)  # Parquet first: the record of truth; kept on failure
        batch, self.buffer = self.buffer, []
        if self.mlflow is not None:
            self.mlflow.submit(batch)

    def close(self) -> None:
        """Write what is buffered and wait for MLflow to log everything submitted."""
        self.flush()
        if self.mlflow is not None:
            self.mlflow.close()


def kernel_busy_fraction(rows: list[dict[str, Any]], dispatch_s: float, gpu_workers: int) -> float | None:
    """Share of the GPU workers' dispatch time spent in timed kernel launches ((warm-up + reps) x median);
    mask building, reorder planning and first-call compilation count as not busy."""
    if not gpu_workers or dispatch_s <= 0:
        return None
    busy_s = sum((r["warmup"] + r["reps"]) * r["kernel_ms_median"] / 1e3 for r in rows
                 if r["status"] == "done" and r["timer"] == "cuda_events")
    return busy_s / (dispatch_s * gpu_workers)


def write_run_record(sweep_dir: Path, outcome: SweepOutcome, workers: dict[str, list[Any]]) -> None:
    """One JSON per run of the sweep: counts and wall times, for the overhead and GPU-busy figures."""
    gpu_workers = sum(len(ws) for key, ws in workers.items() if key != CPU)
    record = {"sweep_id": outcome.sweep_id, "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "counts": dict(outcome.counts), "skipped_done": outcome.skipped_done, "interrupted": outcome.interrupted,
              "workers": {key: len(ws) for key, ws in workers.items()}, "startup_s": outcome.startup_s,
              "dispatch_s": outcome.dispatch_s, "mlflow_drain_s": outcome.mlflow_drain_s,
              "kernel_busy_fraction": kernel_busy_fraction(outcome.rows, outcome.dispatch_s, gpu_workers)}
    path = sweep_dir / f"run-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}.json"
    path.write_text(json.dumps(record, indent=2, default=str))
