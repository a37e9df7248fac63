"""Write the sweep report: the paper's figures as PNGs and one self-contained HTML page, logged to MLflow.

    wavealign report                                   # ./wavealign-runs -> ./wavealign-runs/report/
    wavealign report --run-root DIR --out DIR
    wavealign report --experiment wavealign --tracking-uri sqlite:///wavealign-runs/mlflow.db
    wavealign report --run-root DIR --mask-cell ID [--mask-cell ID ...]   # also Fig. 14 of these cells, any length

The report draws only from the cells present, with a note where a panel lacks data; simulated cells are
drawn hatched/dashed and labelled "simulated". Its files are logged as artifacts (``report/``) of the
MLflow parent run of every sweep it covers, in the tracking store next to the run root (or --tracking-uri).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

from jobs.arguments import Parser, UsageError, output_folder

EXTRAS = ("analysis",)  # logging to MLflow too where it is installed ([sweep])


def _parser() -> argparse.ArgumentParser:
    parser = Parser("report", __doc__)
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--run-root", type=Path, help="the sweep run root holding results/ (default ./wavealign-runs)")
    source.add_argument("--experiment", help="MLflow experiment whose sweeps to report")
    parser.add_argument("--tracking-uri", help="MLflow store (default: sqlite mlflow.db in the run root)")
    parser.add_argument("--out", type=Path, help="output folder (default <run root>/report)")
    parser.add_argument("--no-mlflow", action="store_true", help="do not log the report to MLflow")
    parser.add_argument("--mask-cell", action="append", default=[], metavar="CELL_ID",
                        help="also draw Fig. 14 for this cell (its first head, rebuilt on a GPU when one is visible) "
                             "as fig14_<method>_<cell id>.png; repeatable")
    return parser


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.tracking_uri is not None:  # a scheme MLflow has no store for is refused here, not after its retries
        from orchestrator.config_validate import check_tracking_uri

        check_tracking_uri("--tracking-uri ", args.tracking_uri)
    if args.out is not None:
        output_folder("--out", args.out)
    from orchestrator.run_root import DEFAULT_RUN_ROOT, RunRoot

    runs = args.experiment or args.run_root or DEFAULT_RUN_ROOT
    given = None if args.run_root is None else RunRoot(args.run_root)
    if given is not None and not given.is_run_root():  # before pandas, matplotlib and torch load
        raise UsageError(f"--run-root {args.run_root} {given.state()}")
    import analysis
    from analysis.figures import mask_pictures
    from analysis.load import is_unplaced
    from analysis.report import log_to_sweep_runs

    frame = analysis.load(runs, tracking_uri=args.tracking_uri)
    unknown = sorted(set(args.mask_cell) - set(frame["cell_id"]))
    if unknown:
        raise UsageError(f"--mask-cell {unknown[0]} is not a cell of these results; expected a cell_id of {runs}")
    roots = frame.attrs.get("run_roots") or [str(DEFAULT_RUN_ROOT)]
    out = args.out or Path(roots[0]) / "report"
    files = analysis.write_report(frame, out)
    unplaced = int(is_unplaced(frame).sum())
    apart = f" ({unplaced} more no node could take, listed apart)" if unplaced else ""
    print(f"{len(frame) - unplaced} cells{apart} -> {len(files.figures)} figures, {len(files.tables)} tables")
    for cell_id in args.mask_cell:
        chosen = frame[frame["cell_id"] == cell_id]
        path = out / f"fig14_{chosen.iloc[0]['method']}_{cell_id}.png"
        mask_pictures(frame, cell_id=cell_id).savefig(path, dpi=110)
        print(f"Fig. 14 of {cell_id}: {path}")
    print(f"report: {files.html.resolve()}")
    uri = frame.attrs.get("tracking_uri")
    if args.no_mlflow or uri is None:
        print("not logged to MLflow" + ("" if args.no_mlflow else " (no tracking store found; --tracking-uri)"))
        return 0
    if importlib.util.find_spec("mlflow") is None:
        print("not logged to MLflow: it is not installed (pip install 'wavealign[sweep]')")
        return 0
    from orchestrator import sqlite_store
    from orchestrator.redact import redact

    try:
        sqlite_store.prepare(uri)  # a copied run root's own store: its artifacts go to the copy
    except sqlite_store.StoreUnusable as exc:
        print(f"wavealign report: not logged to MLflow: {exc}", file=sys.stderr)
        return 0
    logged = log_to_sweep_runs(files, frame, uri)
    if logged:
        print(f"logged as artifacts report/ of sweep run(s) {', '.join(logged)} in {redact(uri)}")
    else:
        print(f"no sweep parent run of these results in {redact(uri)}; the report is only on disk")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
