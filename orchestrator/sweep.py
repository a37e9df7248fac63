"""Run a sweep: expand the grid, skip finished cells, place the rest on Ray workers of the right GPU
type, and record every result to Parquet (first) and MLflow (second) in batches as cells finish.

Cells for GPU types the cluster lacks are recorded ``unschedulable`` (or wait, with
``ray.wait_for_nodes=true``); a cell that raises is recorded ``failed`` with its traceback; a worker that
dies is restarted and its cells retried ``ray.max_retries`` times, after which they are ``failed`` and the
restarted worker takes the next group. A worker not up within ``ray.worker_start_timeout_s`` is dropped (the
cells of a type left with none are ``failed``). Ctrl-C stops submitting, records what finished and prints how to
resume.
"""

from __future__ import annotations

import json
import statistics
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from rich.console import Console

from orchestrator import dataset, tracking
from orchestrator.grid import Grid, expand, stable_hash
from orchestrator.progress import SweepProgress, summary_table
from wavealign import fingerprint
from wavealign.pipeline import CPU, ORIGINAL_VARIANT, Cell

# keys that change what is measured; the rest (where, how, resume...) do not change a sweep's identity
_IDENTITY_KEYS = ("name", "grid", "extra_grids", "variants")


def sweep_id(cfg: DictConfig) -> str:
    """Stable id of a sweep: its grids and variants and the code's fingerprint, not how or where it runs."""
    config = OmegaConf.to_container(cfg, resolve=True)
    return stable_hash({"config": {k: config[k] for k in _IDENTITY_KEYS},
                        "code_version": fingerprint.code_version()})


def placement(cell: Cell) -> str:
    """The worker pool a cell needs: a GPU type, or ``cpu`` for CPU and simulated cells."""
    return CPU if (cell.simulated or cell.hardware == CPU) else cell.hardware


@dataclass
class SweepPlan:
    """What a sweep would do: the grid, which cells are already done, which run now."""

    sweep_id: str
    grid: Grid
    done_before: int
    pending: list[Cell]

    def pending_by_placement(self) -> Counter:
        return Counter(placement(c) for c in self.pending)


@dataclass
class SweepOutcome:
    """The result of ``run``: counts, the rows recorded now, and where they are."""

    sweep_id: str
    run_root: Path
    tracking_uri: str | None
    counts: Counter = field(default_factory=Counter)
    rows: list[dict[str, Any]] = field(default_factory=list)
    interrupted: bool = False
    mlflow_down_reason: str | None = None
    skipped_done: int = 0
    workers: int = 0
    # wall seconds: starting Ray and the workers (imports, actor start), then dispatching and recording
    # to Parquet, then waiting for MLflow's logging thread to catch up
    startup_s: float = 0.0
    dispatch_s: float = 0.0
    mlflow_drain_s: float = 0.0


def make_plan(cfg: DictConfig) -> SweepPlan:
    grid = expand(cfg)
    done = set() if cfg.force or not cfg.resume else dataset.done_cell_ids(cfg.run_root)
    pending = [c for c in grid.cells if c.cell_id not in done]
    return SweepPlan(sweep_id=sweep_id(cfg), grid=grid, done_before=len(grid.cells) - len(pending), pending=pending)


def describe(plan: SweepPlan, cfg: DictConfig, console: Console) -> None:
    """The dry run: grid size, cells per GPU type, filtered combinations, a time estimate from earlier results."""
    console.print(f"sweep {cfg.name} ({plan.sweep_id}): {len(plan.grid.cells)} cells, "
                  f"{plan.done_before} already done, {len(plan.pending)} to run")
    per_type = plan.grid.by_hardware()
    pending = Counter(c.hardware for c in plan.pending)
    simulated = Counter(c.hardware for c in plan.grid.cells if c.simulated)
    for hw in sorted(per_type):
        note = f", {simulated[hw]} simulated on CPU workers" if simulated[hw] else ""
        console.print(f"  {hw:<6} {per_type[hw]:>6} cells  ({pending[hw]} to run{note})")
    if plan.grid.filtered:
        console.print(f"filtered combinations: {sum(plan.grid.filtered.values())}")
        for reason, count in plan.grid.filtered.most_common():
            console.print(f"  {count:>6}  {reason}")
    for key, (seconds, known, unknown) in sorted(estimate_seconds(plan.pending, cfg.run_root).items()):
        if known:
            console.print(f"  estimate {key} workers: {seconds / 60:.1f} worker-minutes for {known} cells like "
                          f"earlier ones (divide by the workers of that type)")
        if unknown:
            console.print(f"  estimate {key} workers: no earlier results for {unknown} cells")


def estimate_seconds(cells: list[Cell], run_root: str | Path) -> dict[str, tuple[float, int, int]]:
    """Per placement: (worker-seconds, cells estimated, cells without history), from the median wall time
    of earlier done cells of the same (hardware, backend, method)."""
    table = dataset.read(run_root, columns=["hardware", "backend", "method", "cell_wall_s", "mask_ms", "status"])
    history: dict[tuple, list[float]] = {}
    for r in table.to_pylist():
        if r["status"] == "done" and r["cell_wall_s"] is not None:
            history.setdefault((r["hardware"], r["backend"], r["method"]), []).append(r["cell_wall_s"])
    out: dict[str, tuple[float, int, int]] = {}
    for cell in cells:
        seconds, known, unknown = out.get(placement(cell), (0.0, 0, 0))
        times = history.get((cell.hardware, cell.backend, cell.method))
        out[placement(cell)] = ((seconds + statistics.median(times), known + 1, unknown) if times
                                else (seconds, known, unknown + 1))
    return out


class Recorder:
    """Buffers rows; each flush writes one Parquet batch, then logs the same rows to MLflow."""

    def __init__(self, cfg: DictConfig, plan: SweepPlan, tracker: tracking.Tracker | None,
                 parent_run_id: str | None) -> None:
        self.cfg, self.plan = cfg, plan
        self.mlflow = tracking.BackgroundLogger(tracker, parent_run_id) if tracker is not None else None
        self.buffer: list[dict[str, Any]] = []
        self.rows: list[dict[str, Any]] = []
        self.baselines: set[str] = set()  # cell ids run only as a resumed group's reference (see _queues)

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
                               error=error, extra=extra)
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


def run(cfg: DictConfig, console: Console | None = None,
        on_workers: Callable[[dict[str, list[dict[str, Any]]]], None] | None = None) -> SweepOutcome:
    """Run the sweep ``cfg`` (validated by ``orchestrator.config.load``). ``on_workers`` receives, once the
    workers are up, their node and pid per placement."""
    import ray

    from orchestrator import cluster

    console = console or Console()
    run_root = Path(cfg.run_root)
    plan = make_plan(cfg)
    sweep_dir = run_root / "sweeps" / plan.sweep_id
    sweep_dir.mkdir(parents=True, exist_ok=True)
    config_path = sweep_dir / "config.yaml"
    config_path.write_text(OmegaConf.to_yaml(cfg, resolve=True))

    tracker, parent, uri = None, None, None
    if cfg.mlflow.enabled:
        uri = cfg.mlflow.tracking_uri or tracking.default_tracking_uri(run_root)
        tracker = tracking.Tracker(uri, cfg.mlflow.experiment, artifact_root=run_root / "mlartifacts")
        synced = tracking.sync(run_root, tracker)  # rows an earlier run wrote but could not log
        if sum(synced.values()):
            console.print(f"mlflow: logged {sum(synced.values())} rows missing from earlier sweeps")
        parent = tracker.parent_run(plan.sweep_id, cfg.name, config_path)
        if not tracker.available:
            console.print(f"[yellow]mlflow unreachable ({tracker.down_reason}); recording to Parquet only. "
                          f"Later: wavealign sync-mlflow run_root={cfg.run_root}[/yellow]")
    outcome = SweepOutcome(sweep_id=plan.sweep_id, run_root=run_root, tracking_uri=uri,
                           skipped_done=plan.done_before)
    console.print(f"sweep {cfg.name} ({plan.sweep_id}): {len(plan.grid.cells)} cells, {plan.done_before} done "
                  f"earlier, {len(plan.pending)} to run; {sum(plan.grid.filtered.values())} combinations filtered")
    recorder = Recorder(cfg, plan, tracker, parent)
    owns_ray = not ray.is_initialized()
    workers: dict[str, list[Any]] = {}
    try:
        if plan.pending:
            cluster.connect(cfg.ray.address, cfg.ray.num_cpus, cfg.ray.num_gpus, cfg.ray.object_store_mb)
            queues, recorder.baselines = _queues(plan.pending, plan.grid.cells)
            with SweepProgress(dict(plan.pending_by_placement()), console, enabled=cfg.progress) as progress:
                started = time.monotonic()
                workers = _start_pools(cfg, queues, recorder, progress, console)
                # wait until every worker is up, so that start-up is not counted as cell time
                workers, where = _await_workers(workers, cfg.ray.worker_start_timeout_s, console)
                _fail_unstarted(queues, workers, recorder, progress, cfg.ray.worker_start_timeout_s)
                outcome.workers = sum(len(ws) for ws in workers.values())
                outcome.startup_s = time.monotonic() - started
                if on_workers is not None:
                    on_workers(where)
                started = time.monotonic()
                outcome.interrupted = _dispatch(queues, workers, recorder, progress,
                                                cfg.ray.worker_start_timeout_s, console)
                recorder.flush()
                outcome.dispatch_s = time.monotonic() - started
    except KeyboardInterrupt:  # during start-up; _dispatch handles it once cells run
        outcome.interrupted = True
    finally:
        started = time.monotonic()
        recorder.close()
        outcome.mlflow_drain_s = time.monotonic() - started
        for ws in workers.values():
            for w in ws:
                ray.kill(w)
        if owns_ray and ray.is_initialized():
            ray.shutdown()
    outcome.rows = recorder.rows
    outcome.counts = Counter(r["status"] for r in recorder.rows)
    _write_run_record(sweep_dir, outcome, workers)
    summary_path = sweep_dir / "summary.txt"
    if tracker is not None:
        outcome.mlflow_down_reason = tracker.down_reason
    _print_summary(cfg, plan, outcome, console, summary_path)
    if tracker is not None:
        tracker.log_dataset(parent, run_root, summary_path)
    return outcome


def kernel_busy_fraction(rows: list[dict[str, Any]], dispatch_s: float, gpu_workers: int) -> float | None:
    """Share of the GPU workers' dispatch time spent in timed kernel launches ((warm-up + reps) x median);
    mask building, reorder planning and first-call compilation count as not busy."""
    if not gpu_workers or dispatch_s <= 0:
        return None
    busy_s = sum((r["warmup"] + r["reps"]) * r["kernel_ms_median"] / 1e3 for r in rows
                 if r["status"] == "done" and r["timer"] == "cuda_events")
    return busy_s / (dispatch_s * gpu_workers)


def _write_run_record(sweep_dir: Path, outcome: SweepOutcome, workers: dict[str, list[Any]]) -> None:
    """One JSON per run of the sweep: counts and wall times, for the overhead and GPU-busy figures."""
    gpu_workers = sum(len(ws) for key, ws in workers.items() if key != CPU)
    record = {"sweep_id": outcome.sweep_id, "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "counts": dict(outcome.counts), "skipped_done": outcome.skipped_done, "interrupted": outcome.interrupted,
              "workers": {key: len(ws) for key, ws in workers.items()}, "startup_s": outcome.startup_s,
              "dispatch_s": outcome.dispatch_s, "mlflow_drain_s": outcome.mlflow_drain_s,
              "kernel_busy_fraction": kernel_busy_fraction(outcome.rows, outcome.dispatch_s, gpu_workers)}
    path = sweep_dir / f"run-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}.json"
    path.write_text(json.dumps(record, indent=2, default=str))


def _queues(cells: list[Cell], grid_cells: list[Cell]) -> tuple[dict[str, deque[list[Cell]]], set[str]]:
    """Pending cells grouped per placement, and the ids of baselines added to them.

    A group resumed without its ``original`` cell (done earlier) gets that cell back as a baseline that runs
    but is not recorded again, so every speedup still comes from cells timed back to back.
    """
    groups: dict[str, list[Cell]] = {}
    for cell in cells:
        groups.setdefault(cell.group_id, []).append(cell)
    originals = {c.group_id: c for c in grid_cells if c.variant == ORIGINAL_VARIANT}
    baselines: set[str] = set()
    queues: dict[str, deque[list[Cell]]] = {}
    for group_id, group in groups.items():
        original = originals.get(group_id)
        if original is not None and all(c.variant != ORIGINAL_VARIANT for c in group):
            group.insert(0, original)
            baselines.add(original.cell_id)
        queues.setdefault(placement(group[0]), deque()).append(group)
    return queues, baselines


def _start_pools(cfg: DictConfig, queues: dict[str, deque[list[Cell]]], recorder: Recorder,
                 progress: SweepProgress, console: Console) -> dict[str, list[Any]]:
    """One actor per GPU of each needed type (cells of absent types become unschedulable), then CPU actors
    on the CPUs the GPU actors leave."""
    from orchestrator import cluster

    inv = cluster.inventory()
    deadline = time.monotonic() + cfg.ray.wait_timeout_s
    missing = [hw for hw in queues if hw != CPU and inv.gpus_for(hw) == 0]
    while missing and cfg.ray.wait_for_nodes and time.monotonic() < deadline:
        console.print(f"waiting for nodes with GPU types {missing} (ray.wait_for_nodes=true)")
        time.sleep(5.0)
        inv = cluster.inventory()
        missing = [hw for hw in queues if hw != CPU and inv.gpus_for(hw) == 0]
    workers: dict[str, list[Any]] = {}
    for hw in list(queues):
        if hw == CPU:
            continue
        if hw in missing:
            reason = (f"no alive Ray node has a GPU labelled {' or '.join(cluster.LABEL_KEYS)}="
                      f"{cluster.hardware_registry.get(hw).ray_accelerator_type} (cluster GPUs by type: "
                      f"{inv.gpus_by_type or 'none'}, unlabelled: {inv.untyped_gpus})")
            for group in queues.pop(hw):
                for cell in group:
                    recorder.add(cell, None, status="unschedulable", error=reason)
                progress.add(hw, unschedulable=len(recorder.recordable(group)))
            continue
        workers[hw] = cluster.start_workers(hw, len(queues[hw]), cfg.ray.max_retries, inv)
    if CPU in queues:
        spare = inv.cpus - sum(len(ws) for ws in workers.values())
        workers[CPU] = cluster.start_workers(CPU, max(1, min(spare, len(queues[CPU]))), cfg.ray.max_retries, inv)
    return workers


def _await_workers(workers: dict[str, list[Any]], timeout_s: float,
                   console: Console) -> tuple[dict[str, list[Any]], dict[str, list[dict[str, Any]]]]:
    """The workers that answer ``where`` within ``timeout_s``, per placement (one left with none is left out),
    and their answers. The others are killed: a worker Ray cannot place would hold the sweep forever."""
    import ray

    calls = [(key, worker, worker.where.remote()) for key, ws in workers.items() for worker in ws]
    ready = set(ray.wait([ref for _, _, ref in calls], num_returns=len(calls), timeout=timeout_s)[0])
    up: dict[str, list[Any]] = {}
    where: dict[str, list[dict[str, Any]]] = {}
    for key, worker, ref in calls:
        try:
            answer = ray.get(ref) if ref in ready else None
        except ray.exceptions.RayError as exc:
            answer = None
            console.print(f"[yellow]a {key} worker failed to start: {exc}[/yellow]")
        if answer is None:
            ray.kill(worker)
        else:
            up.setdefault(key, []).append(worker)
            where.setdefault(key, []).append(answer)
    for key, ws in workers.items():
        if len(up.get(key, [])) < len(ws):
            console.print(f"[yellow]{len(ws) - len(up.get(key, []))} of {len(ws)} {key} workers not up within "
                          f"ray.worker_start_timeout_s={timeout_s:g}; going on without them[/yellow]")
    return up, where


def _fail_unstarted(queues: dict[str, deque[list[Cell]]], workers: dict[str, list[Any]], recorder: Recorder,
                    progress: SweepProgress, timeout_s: float) -> None:
    """Record ``failed`` the queued cells of each placement left with no worker after start-up."""
    for key in [k for k in queues if k not in workers]:
        _fail_all(queues.pop(key), recorder, progress, key,
                  f"no {key} worker started within ray.worker_start_timeout_s={timeout_s:g} (Ray could not place "
                  f"one: its GPUs held by other work or its nodes gone; or it failed to start)")


def _dispatch(queues: dict[str, deque[list[Cell]]], workers: dict[str, list[Any]], recorder: Recorder,
              progress: SweepProgress, probe_timeout_s: float, console: Console) -> bool:
    """Keep every worker busy with one group at a time until the queues drain; True if interrupted.

    A worker that died on a group (Ray's retries spent) is asked ``where`` once: Ray restarts it, and it takes
    the next group if it answers within ``probe_timeout_s``; otherwise it is dropped.
    """
    import ray

    idle = {k: list(ws) for k, ws in workers.items()}
    inflight: dict[Any, tuple[str, Any, list[Cell]]] = {}
    probes: dict[Any, tuple[str, Any, float]] = {}  # where() of a worker that died -> placement, worker, deadline
    try:
        while any(queues.values()) or inflight:
            for key, queue in queues.items():
                while queue and idle[key]:
                    actor, group = idle[key].pop(), queue.popleft()
                    inflight[actor.run.remote(group)] = (key, actor, group)
                    progress.add(key, running=len(recorder.recordable(group)))
                coming = any(k == key for k, _, _ in (*inflight.values(), *probes.values()))
                if queue and not idle[key] and not coming:
                    _fail_all(queue, recorder, progress, key, "every worker of this type died")
            if not inflight and not probes:
                continue
            ready, _ = ray.wait([*inflight, *probes], num_returns=1, timeout=1.0)
            for ref in ready:
                if ref in probes:
                    key, actor, _ = probes.pop(ref)
                    _readmit(ref, actor, key, idle, console)
                    continue
                key, actor, group = inflight.pop(ref)
                progress.add(key, running=-len(recorder.recordable(group)))
                if _collect(ref, actor, group, key, idle, recorder, progress):
                    probes[actor.where.remote()] = (key, actor, time.monotonic() + probe_timeout_s)
                recorder.flush()  # a group's rows reach Parquet as soon as it finishes: a killed driver loses none
            _drop_expired(probes, probe_timeout_s, console)
    except KeyboardInterrupt:
        return True
    return False


def _collect(ref, actor, group: list[Cell], key: str, idle: dict[str, list[Any]], recorder: Recorder,
             progress: SweepProgress) -> bool:
    """Record ``group``'s results and return its worker to ``idle``; True if instead the worker died on it
    (Ray's ``ray.max_retries`` spent), to be probed before it takes another group."""
    import ray

    try:
        outputs = ray.get(ref)
    except ray.exceptions.RayError as exc:
        died = isinstance(exc, ray.exceptions.RayActorError)
        for cell in group:
            recorder.add(cell, None, status="failed",
                         error=f"worker died: {exc}" if died else f"{type(exc).__name__}: {exc}")
        progress.add(key, failed=len(recorder.recordable(group)))
        if not died:
            idle[key].append(actor)
        return died
    idle[key].append(actor)
    for cell, out in zip(group, outputs, strict=True):
        result = out.pop("result")
        if recorder.add(cell, result, **out) is not None:
            progress.add(key, **{"done" if result.status == "done" else "failed": 1})
    return False


def _readmit(ref, actor, key: str, idle: dict[str, list[Any]], console: Console) -> None:
    """Return a worker that died to ``idle`` if its ``where`` answered (Ray restarted it); else drop it."""
    import ray

    try:
        ray.get(ref)
    except ray.exceptions.RayError as exc:
        console.print(f"[yellow]dropped a {key} worker: it died and Ray cannot restart it ({exc})[/yellow]")
        return
    idle[key].append(actor)


def _drop_expired(probes: dict[Any, tuple[str, Any, float]], timeout_s: float, console: Console) -> None:
    """Kill and forget the workers that died and are not back by their deadline (Ray cannot place them again)."""
    import ray

    now = time.monotonic()
    for ref, (key, actor, deadline) in list(probes.items()):
        if now > deadline:
            del probes[ref]
            ray.kill(actor)
            console.print(f"[yellow]dropped a {key} worker: it died and was not back within "
                          f"ray.worker_start_timeout_s={timeout_s:g}[/yellow]")


def _fail_all(queue: deque[list[Cell]], recorder: Recorder, progress: SweepProgress, key: str, reason: str) -> None:
    while queue:
        group = queue.popleft()
        for cell in group:
            recorder.add(cell, None, status="failed", error=reason)
        progress.add(key, failed=len(recorder.recordable(group)))


def _print_summary(cfg: DictConfig, plan: SweepPlan, outcome: SweepOutcome, console: Console, path: Path) -> None:
    ids = {c.cell_id for c in plan.grid.cells}
    latest: dict[str, dict[str, Any]] = {}
    for row in dataset.read(cfg.run_root).to_pylist():
        if row["cell_id"] in ids and (row["cell_id"] not in latest
                                      or row["recorded_at"] >= latest[row["cell_id"]]["recorded_at"]):
            latest[row["cell_id"]] = row
    table = summary_table(list(latest.values()), f"sweep {cfg.name} ({plan.sweep_id})")
    console.print(table)
    with path.open("w") as fh:
        Console(file=fh, width=160).print(table)
    counts = ", ".join(f"{k} {v}" for k, v in sorted(outcome.counts.items())) or "nothing new"
    console.print(f"this run: {counts}; {outcome.skipped_done} cells were already done")
    console.print(f"results: {dataset.results_dir(cfg.run_root).resolve()}  (Parquet, one row per cell)")
    if outcome.tracking_uri:
        console.print(f"MLflow UI: {tracking.ui_command(outcome.tracking_uri)}")
    if outcome.mlflow_down_reason:
        console.print(f"[yellow]MLflow went unreachable ({outcome.mlflow_down_reason}); the rows are in Parquet. "
                      f"Log them later: wavealign sync-mlflow run_root={cfg.run_root}[/yellow]")
    if outcome.interrupted:
        console.print("[yellow]interrupted: finished cells are recorded; run the same command again to resume "
                      "(resume=true skips them)[/yellow]")
    failed = [r for r in outcome.rows if r["status"] == "failed"]
    for row in failed[:5]:
        console.print(f"[red]failed[/red] {row['cell_id']} {row['hardware']}/{row['backend']}/{row['method']}/"
                      f"{row['variant']}: {row['error']}")
    if len(failed) > 5:
        console.print(f"... and {len(failed) - 5} more failed cells (see the 'error' and 'traceback' columns)")
