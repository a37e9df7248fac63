"""Run a sweep: tie together what it would do (``plan``), the Ray workers that run its cells (``dispatch``), the
recording of every result to Parquet first and MLflow second, in batches as cells finish (``record``), and the
final summary (``summary``). The sweep's MLflow parent run is RUNNING while this driver runs it, then ended:
FINISHED or KILLED (interrupted) from the run record, FAILED if the driver raised.

Ctrl-C stops submitting, records what finished and prints how to resume.
"""

from __future__ import annotations

import dataclasses
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from rich.console import Console

from wavealign.orchestrator import dispatch, lock, tracking
from wavealign.orchestrator.plan import SweepPlan, make_plan
from wavealign.orchestrator.progress import SweepProgress
from wavealign.orchestrator.record import Recorder, SweepOutcome, end_parent_run, sync, write_run_record
from wavealign.orchestrator.summary import print_summary


def run(cfg: DictConfig, console: Console | None = None,
        on_workers: Callable[[dict[str, list[dict[str, Any]]]], None] | None = None) -> SweepOutcome:
    """Run the sweep ``cfg`` (validated by ``config.load``), holding its run root's lock (a second
    driver is refused: ``lock.RunRootBusy``). ``on_workers`` receives, once the workers are up, their node and pid
    per placement. SIGTERM is handled as Ctrl-C is: stop submitting, record, summarise, shut Ray down.

    Before the run root is locked or written: a typo'd head, no cluster for ``auto`` or a refused Ray token stop it
    in seconds (``join.CannotJoin``)."""
    import ray

    from wavealign.orchestrator import join

    join.check_run_root(cfg.run_root)
    if not ray.is_initialized():
        join.check(cfg.ray.address)
    with lock.hold(cfg.run_root, f"wavealign sweep {cfg.name}"):
        return _run(cfg, console, on_workers)


@contextmanager
def _sigterm_as_interrupt(outcome: SweepOutcome) -> Iterator[None]:
    """While the block runs, SIGTERM raises KeyboardInterrupt (Ray's own handler would abort the driver and lose
    the summary); the outcome records it. Only the main thread can take signals; elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        outcome.terminated_by = signal.Signals(signum).name
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def _parent_run_ended_on_error(tracker: tracking.Tracker | None, parent_run_id: str | None) -> Iterator[None]:
    """A driver that raises ends the sweep's parent run itself: KILLED for an interrupt that got past the
    dispatch loop, FAILED for anything else."""
    try:
        yield
    except BaseException as exc:
        if tracker is not None:
            tracker.finish(parent_run_id, "KILLED" if isinstance(exc, KeyboardInterrupt) else "FAILED")
        raise


def _run(cfg: DictConfig, console: Console | None,
         on_workers: Callable[[dict[str, list[dict[str, Any]]]], None] | None) -> SweepOutcome:
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
        synced = sync(run_root, tracker)  # rows an earlier run wrote but could not log
        if sum(synced.values()):
            console.print(f"mlflow: logged {sum(synced.values())} rows missing from earlier sweeps")
        parent = tracker.parent_run(plan.sweep_id, cfg.name, config_path)
        tracker.reopen(parent)  # a resumed sweep runs again
        if not tracker.available:
            console.print(f"[yellow]mlflow unreachable ({tracker.down_reason}); recording to Parquet only. "
                          f"Later: wavealign sync-mlflow run_root={cfg.run_root}[/yellow]")
    outcome = SweepOutcome(sweep_id=plan.sweep_id, run_root=run_root, tracking_uri=uri,
                           experiment_id=tracker.experiment_id if tracker is not None else None,
                           skipped_done=plan.done_before)
    console.print(f"sweep {cfg.name} ({plan.sweep_id}): {len(plan.grid.cells)} cells, {plan.done_before} done "
                  f"earlier, {len(plan.pending)} to run; {sum(plan.grid.filtered.values())} combinations filtered")
    recorder = Recorder(cfg, plan, tracker, parent)
    with _parent_run_ended_on_error(tracker, parent):
        workers = _run_cells(cfg, plan, recorder, outcome, console, on_workers)
        outcome.rows = recorder.rows
        outcome.counts = Counter(r["status"] for r in recorder.rows)
        write_run_record(sweep_dir, outcome, workers)
        if tracker is not None and outcome.cluster is not None:
            tracker.log_cluster(parent, outcome.cluster)
        summary_path = sweep_dir / "summary.txt"
        if tracker is not None:
            outcome.mlflow_down_reason = tracker.down_reason
        print_summary(cfg, plan, outcome, console, summary_path)
        if tracker is not None:
            tracker.log_dataset(parent, run_root, summary_path)
            end_parent_run(tracker, parent, run_root, plan.sweep_id)
    return outcome


def _run_cells(cfg: DictConfig, plan: SweepPlan, recorder: Recorder, outcome: SweepOutcome, console: Console,
               on_workers: Callable[[dict[str, list[dict[str, Any]]]], None] | None) -> dict[str, list[Any]]:
    """Run the plan's pending cells on Ray workers, recording each as it finishes; the workers by placement."""
    import ray

    from wavealign.orchestrator import join

    owns_ray = not ray.is_initialized()
    workers: dict[str, list[Any]] = {}
    try:
        if plan.pending:
            target = join.connect(cfg.ray.address, cfg.ray.num_cpus, cfg.ray.num_gpus, cfg.ray.object_store_mb)
            joined = join.joined(target)
            console.print(str(joined), markup=False, highlight=False, soft_wrap=True)
            outcome.cluster = dataclasses.asdict(joined)
            queues, recorder.baselines = dispatch.queues(plan.pending, plan.grid.cells)
            with (_sigterm_as_interrupt(outcome),
                  SweepProgress(dict(plan.pending_by_placement()), console, enabled=cfg.progress) as progress):
                started = time.monotonic()
                workers = dispatch.start_pools(cfg, queues, recorder, progress, console)
                # wait until every worker is up, so that start-up is not counted as cell time
                workers, where = dispatch.await_workers(workers, cfg.ray.worker_start_timeout_s, console)
                dispatch.fail_unstarted(queues, workers, recorder, progress, cfg.ray.worker_start_timeout_s)
                outcome.workers = sum(len(ws) for ws in workers.values())
                outcome.startup_s = time.monotonic() - started
                if on_workers is not None:
                    on_workers(where)
                started = time.monotonic()
                outcome.interrupted = dispatch.dispatch(queues, workers, recorder, progress,
                                                        cfg.ray.worker_start_timeout_s, console,
                                                        prefetch=cfg.ray.prefetch_inputs)
                recorder.flush()
                outcome.dispatch_s = time.monotonic() - started
    except KeyboardInterrupt:  # during start-up; dispatch.dispatch handles it once cells run
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
    return workers
