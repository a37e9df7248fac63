"""Recording a sweep's rows: each batch to Parquet first (the record of truth), then the same rows to MLflow;
one JSON per run of the sweep with its counts and wall times; the end of the sweep's MLflow parent run; and
``sync``, which logs to MLflow what Parquet holds and MLflow lacks."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
from omegaconf import DictConfig

from orchestrator import dataset, files, tracking
from orchestrator.plan import SweepPlan
from orchestrator.redact import redact
from orchestrator.run_root import RunRoot
from wavealign.measurers.timed import calls as timed_calls
from wavealign.placement import CPU_POOLS
from wavealign.records import Cell

_RUN_RECORD_PREFIX = "run-"  # sweeps/<sweep_id>/run-<UTC time>.json: one per run of the sweep
_log = logging.getLogger(__name__)


@dataclass
class SweepOutcome:
    """The result of ``run``: counts, the rows recorded now, and where they are."""

    sweep_id: str
    run_root: Path
    tracking_uri: str | None
    run_seq: int = 0  # this run's place among the run root's runs (``dataset.ORDER_COLUMNS``)
    experiment_id: str | None = None  # the MLflow experiment's id, for the UI's address
    counts: Counter = field(default_factory=Counter)
    rows: list[dict[str, Any]] = field(default_factory=list)
    interrupted: bool = False
    terminated_by: str | None = None  # "SIGTERM" when a signal, not Ctrl-C, stopped the sweep
    # why MLflow was unavailable at the sweep's end (None: it was not, or the end caught it up), and how many of the
    # sweep's Parquet rows it lacked then (``sync-mlflow`` logs them)
    mlflow_down_reason: str | None = None
    mlflow_missing_rows: int = 0
    skipped_done: int = 0
    workers: int = 0
    # wall seconds: starting Ray and the workers (imports, actor start), then dispatching and recording
    # to Parquet, then waiting for MLflow's logging thread to catch up
    startup_s: float = 0.0
    dispatch_s: float = 0.0
    mlflow_drain_s: float = 0.0
    gpu_workers: int = 0
    kernel_busy_fraction: float | None = None  # ``kernel_busy_fraction``, set with the run record
    cluster: dict[str, Any] | None = None  # the Ray cluster joined (``join.JoinedCluster``); None: no cell ran
    # the storage refused a write (disk full, read-only): what finished before it is recorded, the rest is not
    storage_error: files.StorageError | None = None
    # rows this run wrote that its results no longer hold at the end: their file damaged (quarantined), moved or
    # deleted while the sweep ran; a resume runs those cells again
    lost_rows: int = 0


def repro_command(cfg: DictConfig, cell: Cell) -> str:
    """The command that re-runs just ``cell``: the sweep's own overrides, that cell only, forced; without the
    password of a tracking URI (``redact``: give it through MLflow's environment variables instead)."""
    return "wavealign sweep " + shlex.join(redact(item) for item in [*cfg.overrides, f"only_cells=[{cell.cell_id}]",
                                                                      "force=true"])


class Recorder:
    """Buffers rows; each flush writes one Parquet batch, then has MLflow log the same rows from the files written.
    Once written, a row is kept only as its id (``written``), so the driver's memory stays flat however long the
    sweep; ``recorded_rows`` reads them back."""

    def __init__(self, cfg: DictConfig, plan: SweepPlan, tracker: tracking.Tracker | None,
                 parent_run_id: str | None, run_seq: int = 0) -> None:
        self.cfg, self.plan, self.run_seq = cfg, plan, run_seq
        self.mlflow = (tracking.BackgroundLogger(tracker, parent_run_id, Path(cfg.run_root)) if tracker is not None
                       else None)
        self.buffer: list[dict[str, Any]] = []
        self.written: dict[str, None] = {}  # result ids written to Parquet, in order
        self.paths: list[Path] = []  # the files they are in
        self.storage_error: files.StorageError | None = None
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
                               error=error, extra={**extra, "repro_command": repro_command(self.cfg, cell),
                                                        "run_seq": self.run_seq})
        self.buffer.append(row)
        if len(self.buffer) >= self.cfg.batch_cells:
            self.flush()
        return row

    def flush(self) -> None:
        """Write the buffered rows to Parquet, then hand them to MLflow. Idempotent: a flush interrupted after its
        files are renamed into place and before the buffer is cleared writes the same files again
        (``dataset.file_name``), never a second copy of the rows. Once the storage has refused a write
        (``storage_error``), nothing more is written: the buffered cells are not recorded, so a resume runs them."""
        if not self.buffer or self.storage_error is not None:
            return
        try:
            paths = dataset.write(self.cfg.run_root, self.buffer)  # Parquet first: the record of truth
        except files.StorageError as exc:
            self.storage_error = exc
            raise
        self.written.update(dict.fromkeys(r["result_id"] for r in self.buffer))
        self.paths += paths
        self.buffer = []
        if self.mlflow is not None:
            self.mlflow.submit(paths)

    def compact(self) -> None:
        """Merge the files this sweep wrote into one per partition (``dataset.compact``), once nothing reads them:
        not after a storage failure, nor while MLflow's thread may still be reading them."""
        if self.storage_error is None and (self.mlflow is None or self.mlflow.done):
            try:
                self.paths = dataset.compact(self.paths)
            except OSError as exc:  # files.StorageError too: the files stay as they are, every row in them
                _log.warning("results: the sweep's %d files were left unmerged (%s)", len(self.paths), exc)

    def recorded_rows(self) -> list[dict[str, Any]]:
        """The rows this sweep wrote to Parquet, read back (those a storage failure kept out are not among them)."""
        if not self.written:
            return []
        wanted = (ds.field("sweep_id") == self.plan.sweep_id) & ds.field("result_id").isin(list(self.written))
        return dataset.read(self.cfg.run_root, filter=wanted).to_pylist()

    def close(self, abandon: Callable[[], bool] = lambda: False) -> bool:
        """Write what is buffered and wait for MLflow to log everything submitted, unless ``abandon()`` turns
        true meanwhile (its rows are in Parquet: ``sync`` logs them later); True if MLflow caught up."""
        with contextlib.suppress(files.StorageError):  # kept in ``storage_error``, for the summary
            self.flush()
        return self.mlflow.close(abandon) if self.mlflow is not None else True


def kernel_busy_fraction(rows: list[dict[str, Any]], dispatch_s: float, gpu_workers: int) -> float | None:
    """Share of the GPU workers' dispatch time spent in the kernel calls of timed GPU cells: per done cell, the
    calls it made (``measurers.timed.calls``: the first call, the remaining warm-ups, the repetitions) x its kernel
    median. The first call is counted at the median like the others, though the compile/JIT time inside it is not
    kernel time and is left out (it is ``first_call_ms`` minus about one median); mask building, reorder and launch
    planning count as not busy."""
    if not gpu_workers or dispatch_s <= 0:
        return None
    busy_s = sum(timed_calls(r["warmup"], r["reps"]) * r["kernel_ms_median"] / 1e3 for r in rows
                 if r["status"] == "done" and r["timer"] == "cuda_events")
    return busy_s / (dispatch_s * gpu_workers)


def host_load() -> dict[str, float | int | None]:
    """The driver host's load averages over the last 1, 5 and 15 minutes and its CPU count, as a run ends: what
    ``wavealign compare`` weighs a CPU cell's time by (a run that shared its cores with others ran slower, whatever
    its reps' spread says). None where the platform has no load average."""
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        one = five = fifteen = None
    return {"load_1m": one, "load_5m": five, "load_15m": fifteen, "cpus": os.cpu_count()}


def write_run_record(sweep_dir: Path, outcome: SweepOutcome, workers: dict[str, list[Any]]) -> None:
    """One JSON per run of the sweep: counts and wall times, for the overhead and GPU-busy figures (and the
    metrics of the sweep's MLflow parent run); the GPU workers and their busy share go on ``outcome`` too."""
    gpu_workers = sum(len(ws) for key, ws in workers.items() if key not in CPU_POOLS)
    outcome.gpu_workers = gpu_workers
    outcome.kernel_busy_fraction = kernel_busy_fraction(outcome.rows, outcome.dispatch_s, gpu_workers)
    record = {"sweep_id": outcome.sweep_id, "run_seq": outcome.run_seq,
              "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "counts": dict(outcome.counts), "skipped_done": outcome.skipped_done, "interrupted": outcome.interrupted,
              "workers": {key: len(ws) for key, ws in workers.items()}, "startup_s": outcome.startup_s,
              "dispatch_s": outcome.dispatch_s, "mlflow_drain_s": outcome.mlflow_drain_s,
              "kernel_busy_fraction": outcome.kernel_busy_fraction, "cluster": outcome.cluster,
              "host": host_load()}
    path = sweep_dir / f"{_RUN_RECORD_PREFIX}{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}.json"
    files.write_whole(path, json.dumps(record, indent=2, default=str))


def run_records(sweep_dir: Path) -> list[dict[str, Any]]:
    """The sweep's run records, oldest first: by ``run_seq`` (records before it have 0), then by name (the UTC time
    of the run's end), never by the clock first (a run under a clock a year ahead must not stay the latest). A record
    that does not read as one (emptied, cut short, edited) is skipped with a warning naming it."""
    found = []
    for path in sorted(sweep_dir.glob(f"{_RUN_RECORD_PREFIX}*.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            _log.warning("skipped the damaged run record %s (%s)", path, str(exc).splitlines()[0])
            continue
        if isinstance(record, dict) and isinstance(record.get("interrupted"), bool):
            found.append((_run_seq(record), path.name, record))
        else:
            _log.warning("skipped the run record %s: not a wavealign run record", path)
    return [record for _, _, record in sorted(found, key=lambda item: item[:2])]


def _run_seq(record: dict[str, Any]) -> int:
    return record["run_seq"] if type(record.get("run_seq")) is int else 0


def latest_run_record(sweep_dir: Path) -> dict[str, Any] | None:
    """The run record of the sweep's latest run that got to write one (``run_records``), or None."""
    records = run_records(sweep_dir)
    return records[-1] if records else None


def next_run_seq(run_root: Path) -> int:
    """The ``run_seq`` of a new run of ``run_root`` (``dataset.next_run_seq``), also past every run record: a run
    that recorded no row still took its number."""
    seen = [_run_seq(record) for folder in RunRoot(run_root).sweeps.glob("*")
            if dataset.is_sweep_id(folder.name) for record in run_records(folder)]
    return dataset.next_run_seq(run_root, max(seen, default=0))


def sweep_folder(run_root: Path, sweep_id: str) -> Path:
    """``<run_root>/sweeps/<sweep_id>``, for an id of our own format only (``dataset.is_sweep_id``): ids come from
    Parquet rows, and one such as ``../../elsewhere`` must not name a folder outside the run root."""
    if not dataset.is_sweep_id(sweep_id):
        raise ValueError(f"sweep_id {sweep_id!r} is not a sweep id ({dataset.SWEEP_ID_FORMAT})")
    return RunRoot(run_root).sweep(sweep_id)


def ended_status(run_record: dict[str, Any] | None) -> str:
    """The MLflow status a sweep's parent run ends with, from its latest run record (``ended_reason`` says why
    where it is not FINISHED): FINISHED when that run went to the end and has a cell done (failed cells are counted
    in its metrics); FAILED when it went to the end with no cell done (every cell failed or found no node: the sweep
    exited non-zero, and a green tick said otherwise); KILLED when it was interrupted (Ctrl-C, SIGTERM) or no run
    wrote a record (a driver killed outright). A driver that raised ends it FAILED itself."""
    if run_record is None or run_record["interrupted"]:
        return "KILLED"
    return "FAILED" if _none_done(run_record) else "FINISHED"


def _none_done(run_record: dict[str, Any]) -> bool:
    counts = run_record.get("counts") or {}
    return bool(counts) and not counts.get("done") and not run_record.get("skipped_done")


def ended_reason(run_record: dict[str, Any] | None) -> str | None:
    """Why ``ended_status`` is not FINISHED, in a line for the parent run's ``tracking.STATUS_REASON_TAG``."""
    if run_record is None or run_record["interrupted"]:
        return "interrupted, or its driver was killed before it wrote a run record"
    if _none_done(run_record):
        counts = ", ".join(f"{n} {status}" for status, n in sorted(run_record["counts"].items()))
        return f"no cell done ({counts})"
    return None


def end_parent_run(tracker: tracking.Tracker, parent_run_id: str | None, run_root: Path, sweep_id: str,
                   sweep_rows: list[dict[str, Any]] | None = None) -> None:
    """Log the sweep's metrics (``tracking.sweep_metrics``: its rows in the dataset and its latest run record)
    to its parent run and end it (``ended_status``, its reason as the run's ``tracking.STATUS_REASON_TAG``)."""
    if parent_run_id is None or not tracker.available:
        return
    if sweep_rows is None:
        sweep_rows = dataset.read(run_root, filter=ds.field("sweep_id") == sweep_id).to_pylist()
    record = latest_run_record(sweep_folder(run_root, sweep_id))
    tracker.finish(parent_run_id, ended_status(record), tracking.sweep_metrics(sweep_rows, record),
                   ended_reason(record))


def sync(run_root: str | Path, tracker: tracking.Tracker,
         abandon: Callable[[], bool] = lambda: False) -> dict[str, int]:
    """Log every dataset row MLflow lacks, per sweep; returns rows logged per sweep id. ``abandon()`` turning true
    (checked before each row) stops it after the row it is logging; the next sync logs the rest.

    Each sweep's parent run also gets the dataset input (``Tracker.log_dataset``, which ``report --experiment``
    follows to the rows) when rows were logged to it or it has none, and is left ended: one still RUNNING (MLflow
    went down, or the driver was killed, before the sweep ended it) is ended as ``end_parent_run`` ends it."""
    run_root = Path(run_root)
    table = dataset.read(run_root)
    logged: dict[str, int] = {}
    if table.num_rows == 0 or not tracker.available:
        return logged
    by_sweep: dict[str, list[dict[str, Any]]] = {}
    for row in table.to_pylist():
        by_sweep.setdefault(row["sweep_id"], []).append(row)
    for sweep_id, sweep_rows in by_sweep.items():
        folder = sweep_folder(run_root, sweep_id)
        parent = tracker.parent_run(sweep_id, sweep_rows[0]["sweep_name"] or "sweep", folder / "config.yaml")
        have = tracker.logged_result_ids(sweep_id)
        if parent is None or have is None:
            break
        missing = [r for r in sweep_rows if r["result_id"] not in have]
        if orphans := have - {r["result_id"] for r in sweep_rows}:
            _log.warning("mlflow: %d child run(s) of sweep %s hold rows no longer in Parquet (their files were deleted "
                         "or quarantined; the dataset is the record): tagged %s", len(orphans), sweep_id,
                         tracking.ORPHAN_TAG)
            tracker.flag_orphans(sweep_id, orphans)
        logged[sweep_id] = tracker.log_rows(parent, missing, abandon)
        if abandon():
            break
        run = tracker.get_run(parent)
        if run is None:
            break
        if logged[sweep_id] or not tracking.has_dataset(run, run_root):
            tracker.log_dataset(parent, run_root, folder / "summary.txt")
        if run.info.status == "RUNNING":
            end_parent_run(tracker, parent, run_root, sweep_id, sweep_rows)
    return logged

