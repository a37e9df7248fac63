"""Log to MLflow every result row of the Parquet dataset that MLflow lacks (after it was unreachable).

Each sweep's parent run also gets the dataset input (what `wavealign report --experiment` follows to the rows)
and is left ended, not RUNNING.

    wavealign sync-mlflow [run_root=DIR] [mlflow.tracking_uri=URI] [mlflow.experiment=NAME]
"""

from __future__ import annotations

import sys
from pathlib import Path

from rich.console import Console


def main(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__)
        return 0
    from wavealign.orchestrator import config, dataset, files, lock, record, sqlite_store, tracking
    from wavealign.orchestrator.redact import redact

    console = Console()
    try:
        cfg = config.load(argv)
    except config.ConfigError as exc:
        console.print(f"[red]wavealign sync-mlflow: {exc}[/red]")
        return 2
    if not dataset.results_dir(cfg.run_root).is_dir():  # a typo'd root would get an empty store and "0 logged"
        console.print(f"[red]wavealign sync-mlflow: run_root={cfg.run_root!r} has no results/ folder; expected the "
                      "run root of a sweep[/red]")
        return 2
    uri = cfg.mlflow.tracking_uri or tracking.default_tracking_uri(cfg.run_root)
    store = sqlite_store.sqlite_path(uri)
    try:
        with lock.hold(cfg.run_root, "wavealign sync-mlflow"):
            if store is not None and store.exists() and (reason := sqlite_store.problem(store)) is not None:
                moved = sqlite_store.set_aside(store)  # kept, not deleted: its runs may hold more than Parquet
                console.print(f"the store {store} {reason}; moved it to {moved} and rebuilding it from Parquet",
                              soft_wrap=True)
            tracker = tracking.Tracker(uri, cfg.mlflow.experiment, run_root=Path(cfg.run_root))
            logged = record.sync(cfg.run_root, tracker)
    except lock.RunRootBusy as exc:
        console.print(f"[red]wavealign sync-mlflow: {exc}[/red]")
        return 2
    except files.StorageError as exc:
        print(f"wavealign sync-mlflow: {exc}", file=sys.stderr)
        return 1
    if not tracker.available:
        console.print(f"[red]MLflow at {redact(uri)} is unreachable: {tracker.down_reason}[/red]")
        return 1
    console.print(f"logged {sum(logged.values())} missing rows over {len(logged)} sweeps to {redact(uri)}")
    console.print(f"MLflow UI: {tracking.ui_hint(uri, tracker.experiment_id)}", soft_wrap=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
