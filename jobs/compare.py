"""Compare two sweeps cell by cell: how many times faster B ran than A, with an interval and a verdict per cell.

    wavealign compare RUN_ROOT_A RUN_ROOT_B
    wavealign compare runs/before:paper_h100 runs/after:3f2a9c0d1e4b5a67   # :SWEEP picks one sweep (name or id)
    wavealign compare A B --tolerance 0.02 --out DIR --mlflow [TRACKING_URI]

Cells match on what they measure (hardware, backend, measure, method, workload, length, variant, reorderer and the
method's and reorderer's parameters); each side's newest done row of a cell counts. The ratio is A's kernel time
over B's (> 1: B faster), with Welch's 95 % interval from both sides' per-rep times (rows of dataset schema 7 on);
older rows compare their medians without an interval (no verdict), simulated rows by their predicted point. Prints
the table, the verdict counts, the cells found on one side only and the verdict rule; writes compare.csv and
compare.html (default: a new folder <RUN_ROOT_B>/compare/<UTC time>-<id> per comparison). Exit status 1 when any
cell is slower, 2 when no cell matched, else 0.

Two runs differ by more than their reps show (load, clocks, memory layout), so a cell timed beside its original in
both runs is judged by its speedup over that original, B's against A's, and every interval is widened by a
between-run noise floor (``analysis.compare.compare_cell``); "ambiguous" where two runs cannot tell, with a
warning on stderr where a run's reps spread too far for any verdict.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from jobs.arguments import Parser, UsageError, output_folder

EXTRAS = ("analysis",)  # --mlflow needs MLflow too ([sweep])
EXIT_SLOWER = 1
WIDE = 1000  # the console's width where stdout is no terminal: wider than any table, so rich folds nothing


def _tolerance(text: str) -> float:
    """``--tolerance`` as a fraction in [0, 1), else a ``UsageError`` naming it."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 <= value < 1:
        raise UsageError(f"--tolerance {text!r}: expected a fraction in [0, 1), e.g. 0.01 for 1 %")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = Parser("compare", __doc__)
    parser.add_argument("a", metavar="RUN_ROOT_A[:SWEEP]", help="the baseline sweep's run root")
    parser.add_argument("b", metavar="RUN_ROOT_B[:SWEEP]", help="the sweep compared with it")
    parser.add_argument("--tolerance", default=None,
                        help="the band 1 +- tolerance that counts as the same time (default: wavealign.metrics')")
    parser.add_argument("--out", type=Path,
                        help="output folder (default: a new <RUN_ROOT_B>/compare/<UTC time>-<id> each time)")
    parser.add_argument("--mlflow", nargs="?", const="", default=None, metavar="TRACKING_URI",
                        help="log the comparison as an MLflow run (default store: <RUN_ROOT_B>/mlflow.db)")
    return parser


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    tolerance = None if args.tolerance is None else _tolerance(args.tolerance)
    if args.mlflow:
        from orchestrator.config_validate import check_tracking_uri

        check_tracking_uri("--mlflow ", args.mlflow)
    from rich.console import Console

    from analysis import compare
    from wavealign import metrics

    tolerance = metrics.TOLERANCE if tolerance is None else tolerance
    a, b = compare.Side.parse("RUN_ROOT_A", args.a), compare.Side.parse("RUN_ROOT_B", args.b)
    comparison = compare.compare(a, b, tolerance)
    if not comparison.cells:
        raise UsageError(f"RUN_ROOT_B {str(b)!r}: none of its {len(comparison.only_b)} done cells matches one of "
                         f"RUN_ROOT_A {str(a)!r} ({len(comparison.only_a)}); expected two sweeps sharing cells")
    out = output_folder("--out", args.out or default_out(b.run_root))  # made only once the input is known good
    terminal = sys.stdout.isatty()
    # a pipe or a file has no width: a cell's name is never folded at rich's default 80 columns there
    console = Console(highlight=False, width=None if terminal else WIDE)
    console.print(compare.rich_table(comparison, one_line=not terminal))
    print("\n".join([comparison.summary(), *compare.one_sided_lines(comparison), *compare.rules(comparison)]))
    for line in comparison.warnings():
        print(line, file=sys.stderr)
    files = compare.write(comparison, out)
    print(f"compare: {files.csv.resolve()}\ncompare: {files.html.resolve()}")
    if args.mlflow is not None:
        _log(comparison, files, args.mlflow or None, b.run_root)
    return EXIT_SLOWER if comparison.counts()["slower"] else 0


def default_out(run_root_b: Path) -> Path:
    """A new folder per comparison, ``<RUN_ROOT_B>/compare/<UTC time>-<8 hex>``: the next comparison into B never
    overwrites this one's files (a fixed ``compare/`` did)."""
    import time
    import uuid

    return run_root_b / "compare" / f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{uuid.uuid4().hex[:8]}"


def _log(comparison, files, tracking_uri: str | None, run_root_b: Path) -> None:
    """Log to MLflow (``tracking_uri``, else B's own store); a store that cannot be used is one line, not a
    failure of the comparison already written."""
    import importlib.util

    if importlib.util.find_spec("mlflow") is None:
        print("not logged to MLflow: it is not installed (pip install 'wavealign[sweep]')")
        return
    from analysis.compare import log_to_mlflow
    from orchestrator import sqlite_store
    from orchestrator.redact import redact
    from orchestrator.tracking import default_tracking_uri

    uri = tracking_uri or default_tracking_uri(run_root_b)
    try:
        sqlite_store.prepare(uri)
    except sqlite_store.StoreUnusable as exc:
        print(f"wavealign compare: not logged to MLflow: {exc}", file=sys.stderr)
        return
    run_id = log_to_mlflow(comparison, files, uri)
    print(f"logged as MLflow run {run_id} in {redact(uri)}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
