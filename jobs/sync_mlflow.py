"""Log to MLflow every result row of the Parquet dataset that MLflow lacks (after it was unreachable).

Each sweep's parent run also gets the dataset input (what `wavealign report --experiment` follows to the rows)
and is left ended, not RUNNING.

    wavealign sync-mlflow [run_root=DIR] [mlflow.tracking_uri=URI] [mlflow.experiment=NAME]
"""

from __future__ import annotations

import sys
from pathlib import Path

from jobs.arguments import Parser, UsageError

EXTRAS = ("sweep",)


def refusals() -> tuple[type[Exception], ...]:
    """What stops it before it logs anything (exit 2), besides a bad argument: a run root another driver holds."""
    from orchestrator import lock

    return (lock.RunRootBusy,)


def main(argv: list[str]) -> int:
    from orchestrator.config_compose import override_keys

    overrides = Parser("sync-mlflow", __doc__, config_paths=override_keys).parse_args(argv).overrides
    from orchestrator import config

    cfg = config.load(overrides)
    from orchestrator import dataset, files, lock, record, sqlite_store, tracking
    from orchestrator.redact import redact
    from orchestrator.summary import runnable

    if not dataset.results_dir(cfg.run_root).is_dir():  # a typo'd root would get an empty store and "0 logged"
        raise UsageError(f"run_root={cfg.run_root!r} has no results/ folder; expected the run root of a sweep")
    uri = cfg.mlflow.tracking_uri or tracking.default_tracking_uri(cfg.run_root)
    store = sqlite_store.sqlite_path(uri)
    try:
        with lock.hold(cfg.run_root, "wavealign sync-mlflow"):
            if store is not None and store.exists() and (reason := sqlite_store.problem(store)) is not None:
                moved = sqlite_store.set_aside(store)  # kept, not deleted: its runs may hold more than Parquet
                print(f"the store {store} {reason}; moved it to {moved} and rebuilding it from Parquet")
            tracker = tracking.Tracker(uri, cfg.mlflow.experiment, run_root=Path(cfg.run_root), warn=False)
            logged = record.sync(cfg.run_root, tracker)
    except (files.StorageError, sqlite_store.StoreLocked) as exc:
        print(f"wavealign sync-mlflow: {exc}", file=sys.stderr)
        return 1
    if not tracker.available:  # a reason that names the store already (``sqlite_store.prepare``) is said as it is
        reason = tracker.down_reason if redact(uri) in tracker.down_reason else \
            f"MLflow at {redact(uri)} is unreachable: {tracker.down_reason}"
        print(f"wavealign sync-mlflow: {reason}", file=sys.stderr)
        return 1
    print(f"logged {sum(logged.values())} missing rows over {len(logged)} sweeps to {redact(uri)}")
    print(f"MLflow: {tracking.ui_hint(uri, tracker.experiment_id, runnable('mlflow'))}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
