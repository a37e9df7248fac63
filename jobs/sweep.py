"""Run a benchmark sweep: Hydra grid -> Ray workers by GPU type -> Parquet + MLflow (`wavealign sweep --help`).

    wavealign sweep                                   # sweep=smoke: a 1-2 minute CPU sweep (make run)
    wavealign sweep sweep=paper_h100 grid.seq_k=[148,364] ray.address=auto
    wavealign sweep --dry-run sweep=paper_a40         # grid size, cells per GPU type, filtered, estimate
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from rich.console import Console

from jobs.arguments import Parser, UsageError, makeable_folder

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from orchestrator.record import SweepOutcome

COMMAND = "wavealign sweep"  # how its stderr lines begin
# the exit status of a sweep that ran (bad input, before anything runs: 2; Ctrl-C: 130; SIGTERM: 143)
EXTRAS = ("sweep",)
EXIT_CELLS_FAILED = 3  # one or more cells failed: their errors are in the summary and their rows
EXIT_NOTHING_PLACED = 4  # every cell to run was unschedulable: no node has its GPU type (the summary says which)
# the run root's storage refused a write (disk full, read-only, a file in a folder's place), or lost rows the sweep
# wrote (a results file damaged or removed under it): one line names the path
EXIT_STORAGE_REFUSED = 5

OVERRIDES = """Hydra overrides of conf/config.yaml (positional PATH=VALUE), e.g.
  sweep=smoke|paper_h100|paper_a40|h200    pick a grid (conf/sweep/)
  grid.seq_k=[148,364] grid.method=[xattention] +grid.method_params.xattention.threshold=[0.8,0.9]
  ray.address=auto | ray://host:10001      join a cluster (default: start a local Ray)
  run_root=DIR  mlflow.tracking_uri=URI    where results go (default ./wavealign-runs, sqlite MLflow there)
  resume=false  force=true  dry_run=true   re-run finished cells / only describe the sweep
  max_cells=N                              refuse a sweep of more cells (--dry-run only counts it)
"""


def parser() -> Parser:
    """The sweep's arguments: its flags, and Hydra overrides of the sweep config. Of Hydra's own flags, ``--cfg job``
    is served here; ``-m``/``--multirun`` is refused, since a list override is already an axis of the grid."""
    from orchestrator.config_compose import override_keys

    parser = Parser("sweep", __doc__, config_paths=override_keys, epilog=OVERRIDES)
    parser.add_argument("--dry-run", action="store_true",
                        help="grid size, cells per GPU type, filtered combinations, a time estimate; runs nothing")
    parser.add_argument("--cfg", metavar="job",
                        help="print the composed, validated config (YAML) and exit, as Hydra's --cfg job does")
    parser.add_argument("-m", "--multirun", action="store_true", help=argparse.SUPPRESS)
    return parser


def _options(argv: list[str]) -> tuple[list[str], bool]:
    """(overrides, print the config?); a ``UsageError`` for an argument the sweep does not take."""
    args = parser().parse_args(argv)
    if args.multirun:
        flag = next(a for a in argv if a in ("-m", "--multirun"))
        raise UsageError(f"{flag}: there is no multirun; a list is an axis of one sweep, so give the values in "
                         "brackets: grid.seq_k=[148,364] grid.method=[xattention,minference]")
    if args.cfg not in (None, "job"):
        raise UsageError(f"--cfg {args.cfg}: expected --cfg job (the sweep's config); Hydra's 'hydra' and 'all' are "
                         "not used here")
    return [*(["dry_run=true"] if args.dry_run else []), *args.overrides], args.cfg is not None


def main(argv: list[str]) -> int:
    from orchestrator import stop

    with stop.handling():  # first: a Ctrl-C or SIGTERM from here on ends the command as in every other phase
        try:
            return _main(argv)
        except KeyboardInterrupt:  # before the sweep began (imports, config): nothing was recorded
            print(f"{COMMAND}: stopped by {stop.requested or 'SIGINT'} before the sweep began; nothing was "
                  "recorded", file=sys.stderr)
            return stop.exit_code() or 130


def check_before_loading(overrides: list[str], show_cfg: bool = False) -> None:
    """What a sweep's command line is refused for before the library (torch), MLflow or Ray is imported, in well
    under a second: each override against the schema and the config groups (``config_compose.check_override``: a
    key, a value of the wrong type, a preset with no YAML), and, for a sweep that runs (no ``--cfg job``, no
    ``dry_run=true``), its run root (the last ``run_root=`` given, else the schema's default) shown to be a folder it
    can make and write. ``config.load`` checks the rest (the registries' names, rules across fields) once the library
    is imported."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from orchestrator.config_compose import check_override, upgrade_overrides
    from orchestrator.config_schema import SweepConfig

    fields = SweepConfig.__dataclass_fields__
    given = {"run_root": fields["run_root"].default, "dry_run": fields["dry_run"].default}
    for override in upgrade_overrides(overrides):  # an old spelling as config.load takes it (grid.ncu=true)
        check_override(override)
        parsed = OverridesParser.create().parse_overrides([override])[0]
        if parsed.key_or_group in given and not parsed.is_delete():
            given[parsed.key_or_group] = parsed.value()
    run_root = given["run_root"]
    if not show_cfg and given["dry_run"] is not True and isinstance(run_root, str) and run_root.strip():
        makeable_folder(f"run_root={run_root}", run_root)  # an empty one is config_validate's to refuse


def _main(argv: list[str]) -> int:
    overrides, show_cfg = _options(argv)
    check_before_loading(overrides, show_cfg)
    from orchestrator import config

    cfg = config.load(overrides)
    from orchestrator import netns, plan

    console = Console()
    if not console.is_terminal:  # logs and `make run | tee`: wide enough for the summary table
        console = Console(width=200)
    if show_cfg:
        print(config.to_yaml(cfg), end="")
        return 0
    if cfg.dry_run:
        plan.dry_run(cfg, console)
        return 0
    plan.check_size(cfg)  # before the run root is locked or Ray started
    if cfg.ray.private_network and not netns.inside():
        reason = netns.unavailable(cfg.mlflow.tracking_uri if cfg.mlflow.enabled else None, cfg.ray.address)
        if reason is not None:
            raise config.ConfigError(f"ray.private_network=true, but {reason}")
        sys.stdout.flush()
        netns.enter(argv)  # this process is replaced by the same command inside the namespace
    if (outcome := run(cfg, console)) is None:
        return EXIT_STORAGE_REFUSED
    return ended(cfg, outcome)


def run(cfg: DictConfig, console: Console, command: str = COMMAND) -> SweepOutcome | None:
    """The sweep run (``orchestrator.sweep.run``) for a command that runs one; None, after one stderr line, if the
    run root refused a write before any cell ran (the command then exits ``EXIT_STORAGE_REFUSED``)."""
    from orchestrator import files, sweep

    try:
        return sweep.run(cfg, console)
    except files.StorageError as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return None


def ended(cfg: DictConfig, outcome: SweepOutcome, command: str = COMMAND) -> int:
    """How a command that ran a sweep (``command``: ``wavealign sweep``, ``wavealign bench-kernels``) ends: one
    stderr line for each loss the sweep's summary cannot show (a run root that refused a write; rows MLflow lacks,
    with the command that logs them), then its exit status (``exit_code``)."""
    from orchestrator import dataset, summary

    if outcome.storage_error is not None:
        print(f"{command}: {outcome.storage_error}; cells that finished after it are not recorded (a resume "
              "runs them)", file=sys.stderr)
    elif outcome.lost_rows:
        print(f"{command}: {outcome.lost_rows} of the rows this run recorded are no longer in "
              f"{dataset.results_dir(cfg.run_root)} (their file was damaged, moved or deleted while the sweep ran: "
              "the warnings above name it); a resume runs those cells again", file=sys.stderr)
    # MLflow is a view of Parquet: the exit status does not change (and a store that lacks none of the rows, as after a
    # storage error that stopped the sweep before any row, needs no line)
    if outcome.mlflow_down_reason is not None and outcome.mlflow_missing_rows:
        print(f"{command}: MLflow lacks {outcome.mlflow_missing_rows} of the sweep's rows "
              f"({outcome.mlflow_down_reason}); they are in Parquet, to log later: {summary.sync_command(cfg)}",
              file=sys.stderr)
    return exit_code(outcome)


def refusals() -> tuple[type[Exception], ...]:
    """What stops a sweep before it runs anything (exit 2, through ``jobs.cli``), besides a bad config or
    argument (a ``ValueError``): a run root another driver holds, a cluster it cannot join."""
    from orchestrator import join, lock

    return lock.RunRootBusy, join.CannotJoin


def exit_code(outcome: SweepOutcome) -> int:
    """A sweep's exit status from its outcome (``sweep.SweepOutcome``)."""
    from orchestrator import stop

    if outcome.storage_error is not None or outcome.lost_rows:
        return EXIT_STORAGE_REFUSED
    if outcome.interrupted:  # 128 + the signal's number, as a shell reports a process that signal ended
        return stop.EXIT_CODES.get(outcome.terminated_by or "SIGINT", 130)
    if outcome.counts and set(outcome.counts) == {"unschedulable"}:
        return EXIT_NOTHING_PLACED
    return EXIT_CELLS_FAILED if outcome.counts.get("failed") else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
