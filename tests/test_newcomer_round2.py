"""Issue 42, a newcomer's first hour, round 2: each trap between the README and what a command does, driven the way
the newcomer met it (the installed ``wavealign`` script, a fresh folder), one behaviour per test."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import analysis
from jobs import cli
from orchestrator import dataset
from wavealign import pipeline
from wavealign.records import Cell

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SWEEP = "0123456789abcdef"  # a sweep id of plan.sweep_id's format


def _wavealign(*args: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    script = BIN / "wavealign"
    argv = [str(script)] if script.is_file() else [sys.executable, "-m", "jobs.cli"]
    return subprocess.run([*argv, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


# --- install and checkout hygiene ---------------------------------------------------------------------------------

def test_a_make_run_with_another_run_root_leaves_nothing_git_would_add():
    default = re.search(r"^RUN_ROOT \?= (\S+)", (ROOT / "Makefile").read_text(), re.MULTILINE).group(1)
    for run_root in (default, f"{default}-2"):
        ignored = subprocess.run(["git", "check-ignore", "-q", f"{run_root}/results/part.parquet"], cwd=ROOT)
        assert ignored.returncode == 0, f"make run RUN_ROOT={run_root} leaves a folder git does not ignore"


def test_building_the_metadata_prints_no_setuptools_deprecation(tmp_path):
    built = subprocess.run(
        [sys.executable, "-W", "always", "-c",
         f"from setuptools import build_meta; build_meta.prepare_metadata_for_build_wheel({str(tmp_path)!r})"],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr[-2000:]
    assert "SetuptoolsDeprecationWarning" not in built.stderr, built.stderr[-2000:]


# --- wavealign report ---------------------------------------------------------------------------------------------

def _cell(seed: int, hardware: str = "cpu") -> Cell:
    return Cell.from_flat(dict(cell_id=f"c{seed}{hardware}", group_id=f"g{seed}", hardware=hardware,
                               profile_hardware="h100", backend="reference", method="random", variant="original",
                               stages="none", skip="force", workload="shape", seq_len_tokens=256, num_heads=1,
                               head_dim=16, block_size=128, wave_size=4, seed=seed, reps=1, warmup=0))


def _unplaced_row(cell: Cell, sweep_id: str = SWEEP) -> dict:
    return dataset.make_row(cell, None, sweep_id=sweep_id, sweep_name="paper_h100", status="unschedulable",
                            error="no alive Ray node has a GPU labelled accelerator-type=H100")


def test_report_on_an_existing_empty_folder_says_it_has_no_results_yet(tmp_path, capsys):
    assert cli.main(["report", "--run-root", str(tmp_path), "--no-mlflow"]) == cli.EXIT_BAD_INPUT
    error = capsys.readouterr().err
    assert "has no results yet" in error and "no such folder" not in error


def test_report_counts_the_placed_cells_and_lists_the_unplaced_apart(tmp_path, capsys):
    done = _cell(0)
    dataset.write(tmp_path, [dataset.make_row(done, pipeline.run_cell(done), sweep_id=SWEEP, sweep_name="smoke"),
                             *(_unplaced_row(_cell(seed, "h100")) for seed in (1, 2))])
    assert cli.main(["report", "--run-root", str(tmp_path), "--out", str(tmp_path / "report"), "--no-mlflow"]) == 0
    assert capsys.readouterr().out.startswith("1 cells (2 more no node could take, listed apart)")
    page = (tmp_path / "report" / "report.html").read_text()
    counts = page.split("<h2", 1)[0]
    assert "<b>cells</b>: 1<" in counts and "unschedulable" not in counts and "h100" not in counts
    assert 'id="not-placed"' in page


def test_a_later_unplaced_row_never_hides_an_earlier_measurement_of_the_same_configuration(tmp_path):
    cell = _cell(0)
    dataset.write(tmp_path, [dataset.make_row(cell, pipeline.run_cell(cell), sweep_id=SWEEP, sweep_name="smoke")])
    dataset.write(tmp_path, [_unplaced_row(cell, sweep_id="fedcba9876543210")])
    assert analysis.load(tmp_path)["status"].tolist() == ["done"]


# --- the first answer: help and mistakes before the heavy machinery ----------------------------------------------

# command lines whose answer (help, or one line naming the mistake) needs none of torch, Ray or MLflow; their import
# is seconds on a 2-core machine, the answer a few tenths
LIGHT_ANSWERS = [["--help"], ["swep"], ["sweep", "grid.seed=abc"], ["sweep", "seq_k=[148]"],
                 *([name, flag] for name in cli.commands() for flag in ("--help", "--bogus"))]
HEAVY = ("torch", "ray", "mlflow")


def test_help_and_a_mistyped_argument_answer_before_torch_ray_or_mlflow_is_imported():
    program = ("import contextlib, io, sys\nfrom jobs import cli\n"
               f"for argv in {LIGHT_ANSWERS!r}:\n"
               "    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
               "        try:\n"
               "            status = cli.main(argv)\n"
               "        except SystemExit as exc:  # argparse's --help\n"
               "            status = exc.code\n"
               f"    heavy = [m for m in {HEAVY!r} if m in sys.modules]\n"
               "    if heavy or status not in (0, 2):\n"
               "        sys.exit(f'{argv}: exit {status}, imported {heavy}')\n")
    ran = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-2000:]


def test_a_mistyped_command_gets_the_nearest_one(capsys):
    assert cli.main(["swep"]) == cli.EXIT_BAD_INPUT
    assert "did you mean sweep?" in capsys.readouterr().err


def test_a_list_axis_given_text_that_is_no_number_suggests_a_list_that_composes(capsys):
    assert cli.main(["sweep", "grid.seed=abc"]) == cli.EXIT_BAD_INPUT
    error = capsys.readouterr().err
    assert "[abc]" not in error
    suggested = re.search(r"expected e\.g\. (\S+)", error).group(1)
    from orchestrator import config

    assert config.load(["sweep=smoke", suggested]).grid.seed == config.GridConfig().seed


# --- Ray: what a local run prints where, and how the dashboard names a sweep ---------------------------------------

RAY_PROGRAM = """
import json, os, signal, sys
import ray
from orchestrator import cluster, join

label = sys.argv[1]
join.connect(None, num_cpus=1, job_name=label)
[worker] = cluster.start_workers("cpu", 1, 0, cluster.inventory(), label)
named = ray.get_actor(f"{label} cpu worker 0")  # Ray's actor name: the dashboard's Name column
jobs = ray._private.worker.global_worker.gcs_client.get_all_job_info().values()

@ray.remote(max_retries=0, num_cpus=0)
def dies():
    os.kill(os.getpid(), signal.SIGKILL)

try:
    ray.get(dies.remote())  # the raylet reports the dead worker to this driver
except ray.exceptions.WorkerCrashedError:
    pass
found = {"repr": ray.get(named.__ray_call__.remote(repr)), "jobs": [dict(j.config.metadata) for j in jobs]}
ray.shutdown()
print(json.dumps(found), file=sys.stderr)
"""


def test_a_local_ray_keeps_stdout_clean_warns_nothing_of_its_token_and_names_the_sweep(tmp_path):
    label = "wavealign smoke 0123456789abcdef"
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_MODE", "RAY_ADDRESS")}
    ran = subprocess.run([sys.executable, "-c", RAY_PROGRAM, label], capture_output=True, text=True, timeout=300,
                         env=env, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout == ""  # the raylet's "(raylet) A worker died ..." went to stderr
    assert "(raylet)" in ran.stderr and "A worker died" in ran.stderr
    assert "RAY_AUTH_MODE=disabled to opt out" not in ran.stderr
    found = json.loads(ran.stderr.strip().splitlines()[-1])
    assert found["repr"] == f"{label} cpu worker 0"
    assert {"job_name": label} in found["jobs"]


# --- MLflow: names that lead with what differs, an experiment of machine learning ----------------------------------

def test_a_child_run_name_leads_with_method_length_and_order_and_the_experiment_is_machine_learning(tmp_path):
    from orchestrator import tracking

    cell = _cell(0)
    row = dataset.make_row(cell, pipeline.run_cell(cell), sweep_id=SWEEP, sweep_name="smoke")
    name = tracking.run_name(row)
    assert name.startswith(f"{cell.inputs.method} {cell.inputs.seq_len_tokens:,} {cell.attention.variant} ")
    tracker = tracking.Tracker(tracking.default_tracking_uri(tmp_path), "wavealign", run_root=tmp_path)
    parent = tracker.parent_run(SWEEP, "smoke")
    tracker.log_rows(parent, [row])
    [child] = tracker.client.search_runs([tracker.experiment_id], f"tags.`{tracking.TAG}kind` = 'cell'")
    assert child.info.run_name == name
    key, kind = tracking.EXPERIMENT_KIND
    assert tracker.client.get_experiment(tracker.experiment_id).tags[key] == kind
    made_before = tracker.client.create_experiment("made-before")  # an experiment of an earlier version: no kind
    again = tracking.Tracker(tracking.default_tracking_uri(tmp_path), "made-before", run_root=tmp_path)
    assert again.experiment_id == made_before and again.client.get_experiment(made_before).tags[key] == kind


# --- the sweep's summary: what explains a non-zero exit is on stderr ---------------------------------------------

def test_an_interrupted_sweep_s_line_and_its_unplaced_cells_reasons_go_to_stderr(tmp_path, capsys):
    from types import SimpleNamespace

    from omegaconf import OmegaConf
    from rich.console import Console

    from orchestrator.record import SweepOutcome
    from orchestrator.summary import print_summary

    cell = _cell(1, "h100")
    row = _unplaced_row(cell)
    dataset.write(tmp_path, [row])
    outcome = SweepOutcome(sweep_id=SWEEP, run_root=tmp_path, tracking_uri=None, rows=[row], interrupted=True)
    print_summary(OmegaConf.create({"name": "smoke", "run_root": str(tmp_path)}),
                  SimpleNamespace(grid=SimpleNamespace(cells=[cell]), sweep_id=SWEEP), outcome, Console(),
                  tmp_path / "summary.txt")
    out, err = capsys.readouterr()
    assert "this run:" in out and "interrupted:" not in out and "unschedulable 1 cell" not in out
    assert "interrupted: finished cells are recorded" in err and "unschedulable 1 cell (h100/reference)" in err
