"""Run a sweep: tie together what it would do (``plan``), the Ray workers that run its cells (``dispatch``), the
recording of every result to Parquet first and MLflow second, in batches as cells finish (``record``), and the
final summary (``summary``). The sweep's MLflow parent run is RUNNING while this driver runs it, then ended:
FINISHED or KILLED (interrupted) from the run record, FAILED if the driver raised.

Ctrl-C or SIGTERM, in any phase, stops submitting, records what finished and prints how to resume (``stop``).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
from omegaconf import DictConfig
from rich.console import Console
from rich.markup import escape

from orchestrator import config, dataset, dispatch, files, lock, netns, sqlite_store, stop, tracking, watchdog
from orchestrator.plan import SweepPlan, make_plan
from orchestrator.progress import SweepProgress
from orchestrator.record import (
    Recorder,
    SweepOutcome,
    end_parent_run,
    next_run_seq,
    sweep_folder,
    sync,
    write_run_record,
)
from orchestrator.run_root import WRITTEN_FOLDERS, RunRoot
from orchestrator.summary import print_summary, sync_command


def run(cfg: DictConfig, console: Console | None = None,
        on_workers: Callable[[dict[str, list[dict[str, Any]]]], None] | None = None) -> SweepOutcome:
    """Run the sweep ``cfg`` (validated by ``config.load``), holding its run root's lock (a second
    driver is refused: ``lock.RunRootBusy``). ``on_workers`` receives, once the workers are up, their node and pid
    per placement. Ctrl-C and SIGTERM (``stop``), and storage that refuses a write (``files.StorageError``), end it
    as every run ends: what finished recorded, the run record, the summary, the MLflow parent run ended.

    Before the run root is locked or written: a typo'd head, no cluster for ``auto`` or a refused Ray token stop it
    in seconds (``join.CannotJoin``), and a run root that cannot be written is one line (``files.StorageError``)."""
    import ray

    from orchestrator import join

    if cfg.ray.private_network and not netns.inside():
        raise config.ConfigError("ray.private_network=true runs through `wavealign sweep` only (it restarts the "
                                 "driver inside the namespace); expected false when calling sweep.run")
    with stop.handling():
        join.check_run_root(cfg.run_root)
        if not ray.is_initialized():
            join.check(cfg.ray.address)
        files.check_writable(Path(cfg.run_root), WRITTEN_FOLDERS)
        with lock.hold(cfg.run_root, f"wavealign sweep {cfg.name}"):
            return _run(cfg, console, on_workers)


@contextmanager
def _parent_run_ended_on_error(tracker: tracking.Tracker | None, parent_run_id: str | None) -> Iterator[None]:
    """A driver that raises while it ends the sweep ends the sweep's parent run itself, FAILED."""
    try:
        yield
    except BaseException:
        if tracker is not None:
            tracker.finish(parent_run_id, "FAILED")
        raise


def _run(cfg: DictConfig, console: Console | None,
         on_workers: Callable[[dict[str, list[dict[str, Any]]]], None] | None) -> SweepOutcome:
    console = console or Console()
    run_root = Path(cfg.run_root)
    for top in (RunRoot(run_root).results, RunRoot(run_root).sweeps):  # made now: one deleted mid-run is caught
        files.make_dir(top)
    plan = make_plan(cfg)
    uri = (cfg.mlflow.tracking_uri or tracking.default_tracking_uri(run_root)) if cfg.mlflow.enabled else None
    check_free_space(run_root, len(plan.pending), uri)
    folder = sweep_folder(run_root, plan.sweep_id)
    config_path = files.write_whole(folder / "config.yaml", config.to_yaml(cfg))
    outcome = SweepOutcome(sweep_id=plan.sweep_id, run_root=run_root, tracking_uri=uri,
                           skipped_done=plan.done_before, run_seq=next_run_seq(run_root))
    tracker, parent = None, None
    recorder = Recorder(cfg, plan, None, None, outcome.run_seq)
    workers: dict[str, list[Any]] = {}
    try:
        if uri is not None:
            tracker = tracking.Tracker(uri, cfg.mlflow.experiment, run_root=run_root)
            outcome.experiment_id = tracker.experiment_id
            synced = sync(run_root, tracker)  # rows an earlier run wrote but could not log
            if sum(synced.values()):
                console.print(f"mlflow: logged {sum(synced.values())} rows missing from earlier sweeps")
            with stop.deferred():  # a run made and then lost to an interrupt would stay RUNNING for ever
                parent = tracker.parent_run(plan.sweep_id, cfg.name, config_path)
                tracker.reopen(parent)  # a resumed sweep runs again
            if stop.requested:
                raise KeyboardInterrupt
            if not tracker.available:
                console.print(f"[yellow]mlflow unreachable ({escape(str(tracker.down_reason))}); recording to Parquet "
                              f"only. Later: {escape(sync_command(cfg))}[/yellow]")
        recorder = Recorder(cfg, plan, tracker, parent, outcome.run_seq)
        console.print(f"sweep {cfg.name} ({plan.sweep_id}): {len(plan.grid.cells)} cells, {plan.done_before} done "
                      f"earlier, {len(plan.pending)} to run; {sum(plan.grid.filtered.values())} combinations "
                      "filtered")
        if plan.pending:
            _run_cells(cfg, plan, recorder, outcome, workers, console, on_workers)
    except KeyboardInterrupt:  # a stop request, in any phase before the end (``stop``)
        outcome.interrupted = True
    except files.StorageError as exc:  # the sweep ends as any other, and says why
        recorder.storage_error = recorder.storage_error or exc
    except BaseException:  # a bug: what finished is still written, and the parent run is FAILED
        with stop.deferred():
            recorder.close()
            if tracker is not None:
                tracker.finish(parent, "FAILED")
        raise
    with stop.deferred(), _parent_run_ended_on_error(tracker, parent):
        _end(cfg, plan, recorder, outcome, workers, tracker, parent, folder, console)
    return outcome


# a sweep's own files beside its rows: config.yaml, the summary, a run record, and their copies as MLflow artifacts
# (12 KB for a 10-cell sweep, 2026-12-02)
SWEEP_FILES_BYTES = 64 * 1024


def check_free_space(run_root: Path, cells: int, tracking_uri: str | None) -> None:
    """Before any cell runs: the run root's file system, and a local MLflow store's, have room for what ``cells``
    cells will write (``dataset.ROW_BYTES`` and ``tracking.CHILD_RUN_BYTES`` each, the sweep's own files, a new
    store's schema), else a ``files.StorageError`` naming the figures: a sweep that cannot record its rows should not
    compute them first."""
    needed = {os.stat(run_root).st_dev: [run_root, SWEEP_FILES_BYTES + cells * dataset.ROW_BYTES]}
    store = sqlite_store.sqlite_path(tracking_uri) if tracking_uri else None
    if store is not None:
        folder = next(p for p in (store.parent, *store.parent.parents) if p.exists())
        entry = needed.setdefault(os.stat(folder).st_dev, [folder, 0])
        entry[1] += cells * tracking.CHILD_RUN_BYTES + (0 if store.exists() else sqlite_store.EMPTY_STORE_BYTES)
    for folder, size in needed.values():
        files.check_free(folder, size, f"recording {cells} cell{'s' * (cells != 1)}")


def _run_cells(cfg: DictConfig, plan: SweepPlan, recorder: Recorder, outcome: SweepOutcome,
               workers: dict[str, list[Any]], console: Console,
               on_workers: Callable[[dict[str, list[dict[str, Any]]]], None] | None) -> None:
    """Run the plan's pending cells on Ray workers, recording each as it finishes (``workers`` receives them, by
    placement); the workers are killed, and the Ray this driver started is shut down, however it ends. A stop
    request leaves as ``KeyboardInterrupt`` (or as ``dispatch`` returning True); the caller ends the sweep."""
    import ray

    from orchestrator import join

    owns_ray = not ray.is_initialized()
    label = dispatch.sweep_label(cfg.name, plan.sweep_id)
    # an embedded Ray this driver starts is stopped with it even if it is killed outright
    embedded = owns_ray and join.resolve(cfg.ray.address).address == join.EMBEDDED
    guard = watchdog.start() if embedded else None
    try:
        with stop.around_ray_init():
            target = join.connect(cfg.ray.address, cfg.ray.num_cpus, cfg.ray.num_gpus, cfg.ray.object_store_mb,
                                  job_name=label)
        joined = join.joined(target)
        console.print(str(joined), markup=False, highlight=False, soft_wrap=True)
        outcome.cluster = dataclasses.asdict(joined)
        queues, recorder.baselines = dispatch.queues(plan.pending, plan.grid.cells)
        with SweepProgress(dict(plan.pending_by_placement()), console, enabled=cfg.progress) as progress:
            started = time.monotonic()
            workers.update(dispatch.start_pools(cfg, queues, recorder, progress, console, label))
            # wait until every worker is up, so that start-up is not counted as cell time
            up, where = dispatch.await_workers(workers, cfg.ray.worker_start_timeout_s, console)
            workers.clear()
            workers.update(up)
            dispatch.fail_unstarted(queues, workers, recorder, progress, cfg.ray.worker_start_timeout_s)
            outcome.workers = sum(len(ws) for ws in workers.values())
            outcome.startup_s = time.monotonic() - started
            if on_workers is not None:
                on_workers(where)
            started = time.monotonic()
            try:
                outcome.interrupted = dispatch.dispatch(queues, workers, recorder, progress,
                                                        cfg.ray.worker_start_timeout_s, console,
                                                        prefetch=cfg.ray.prefetch_inputs, sweep=label)
                recorder.flush()
            finally:
                outcome.dispatch_s = time.monotonic() - started
    finally:
        with stop.deferred():
            for ws in workers.values():
                for w in ws:
                    ray.kill(w)
            if owns_ray and ray.is_initialized():
                ray.shutdown()
            if guard is not None:
                guard.release()


def _end(cfg: DictConfig, plan: SweepPlan, recorder: Recorder, outcome: SweepOutcome, workers: dict[str, list[Any]],
         tracker: tracking.Tracker | None, parent: str | None, folder: Path, console: Console) -> None:
    """How every run of a sweep ends, with signals only noted (``stop.deferred``): the buffered rows written, MLflow's
    logging waited for (until a further signal), the sweep's files merged, the run record, the summary, the parent
    run ended; and, if MLflow failed on the way, one try to catch it up (``_catch_up_mlflow``)."""
    started, signals = time.monotonic(), stop.count
    if not recorder.close(abandon=lambda: stop.count > signals):
        console.print("[yellow]stopped waiting for MLflow's logging; the rest of the rows are in Parquet: "
                      f"{escape(sync_command(cfg))} logs them[/yellow]")
    outcome.mlflow_drain_s = time.monotonic() - started
    recorder.compact()
    if stop.requested:  # also when the KeyboardInterrupt itself was swallowed on its way (``stop``)
        outcome.interrupted, outcome.terminated_by = True, stop.requested
    outcome.rows = recorder.recorded_rows()
    outcome.counts = Counter(r["status"] for r in outcome.rows)
    outcome.storage_error = recorder.storage_error
    lost = set(recorder.written) - {r["result_id"] for r in outcome.rows}
    outcome.lost_rows = len(lost)
    if tracker is not None and lost:  # their child runs stay in MLflow, marked as rows Parquet no longer has
        tracker.flag_orphans(plan.sweep_id, lost)
    summary_path = folder / "summary.txt"
    for step in (lambda: write_run_record(folder, outcome, workers),
                 lambda: print_summary(cfg, plan, outcome, console, summary_path)):
        try:
            step()
        except files.StorageError as exc:
            outcome.storage_error = outcome.storage_error or exc
    if tracker is not None and outcome.cluster is not None:
        tracker.log_cluster(parent, outcome.cluster)
    if tracker is not None:
        if summary_path.is_file():
            tracker.log_dataset(parent, run_root=Path(cfg.run_root), summary_path=summary_path)
        if (outcome.storage_error is not None or outcome.lost_rows) and not outcome.interrupted:
            tracker.finish(parent, "FAILED")  # its run record may be missing, its rows are: not FINISHED
        else:
            end_parent_run(tracker, parent, Path(cfg.run_root), plan.sweep_id)
        if not tracker.available:
            _catch_up_mlflow(cfg, plan.sweep_id, outcome, tracker, parent, lambda: stop.count > signals, console)


def _catch_up_mlflow(cfg: DictConfig, sweep_id: str, outcome: SweepOutcome, tracker: tracking.Tracker,
                     parent: str | None, abandon: Callable[[], bool], console: Console) -> None:
    """MLflow failed during the sweep (``tracker`` stops at its first failure; an sqlite store busy past its timeout,
    a server that missed one request): one more try, with a fresh client, as ``sync-mlflow`` would do it. ``sync``
    logs the rows MLflow lacks and ends the parent run from the run record just written; a further signal
    (``abandon``) cuts it short. Not after a stop request (the user wants out) nor a storage error (the parent run
    stays as that left it). If MLflow is still not whole, ``outcome`` says why and how many of the sweep's rows it
    lacks (counted against what the clients saw MLflow hold: it cannot be asked)."""
    clients, logged = [tracker], {}
    if not outcome.interrupted and outcome.storage_error is None:
        clients.append(tracking.Tracker(tracker.tracking_uri, tracker.experiment_name, run_root=Path(cfg.run_root),
                                        warn=False))  # a failure again is said once, by the sweep's caller
        logged = sync(cfg.run_root, clients[-1], abandon)
        if outcome.cluster is not None:
            clients[-1].log_cluster(parent, outcome.cluster)
    held = set().union(*(c.logged for c in clients))
    rows = dataset.read(cfg.run_root, columns=["result_id"], filter=ds.field("sweep_id") == sweep_id)
    outcome.mlflow_missing_rows = sum(result_id not in held for result_id in rows.column("result_id").to_pylist())
    if clients[-1].available and not outcome.mlflow_missing_rows:
        caught_up = sum(logged.values())
        console.print(f"mlflow: caught up after a failure during the sweep ({tracker.down_reason}): logged "
                      f"{caught_up} missing row{'s' * (caught_up != 1)}", markup=False, highlight=False)
        return
    outcome.mlflow_down_reason = clients[-1].down_reason or f"{stop.requested} stopped the catch-up"
