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
    from wavealign.orchestrator import config, dataset, lock, record, tracking

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
    try:
        with lock.hold(cfg.run_root, "wavealign sync-mlflow"):
            tracker = tracking.Tracker(uri, cfg.mlflow.experiment, artifact_root=Path(cfg.run_root) / "mlartifacts")
            logged = record.sync(cfg.run_root, tracker)
    except lock.RunRootBusy as exc:
        console.print(f"[red]wavealign sync-mlflow: {exc}[/red]")
        return 2
    if not tracker.available:
        console.print(f"[red]MLflow at {uri} is unreachable: {tracker.down_reason}[/red]")
        return 1
    console.print(f"logged {sum(logged.values())} missing rows over {len(logged)} sweeps to {uri}")
    console.print(f"MLflow UI: {tracking.ui_hint(uri, tracker.experiment_id)}", soft_wrap=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
