"""Every command's common mistakes meet one error path: one line on stderr, never wrapped at the terminal's width,
its brackets shown as typed, exit 2, no traceback, nothing written. One argument convention: a command's own options
are flags, a sweep config's paths are ``path=value`` overrides; either given in the other spelling gets the one it
takes, and a mistyped key the nearest key by its full dotted path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import lab_studies
import pytest

from jobs import cli

REPO = Path(__file__).resolve().parent.parent

# (command line, what the one line must say); RUN_ROOT is a folder that does not exist
MISTAKES = [
    (["sweep", "grid.seq_k=abc"], "grid.seq_k=abc: a grid axis is a list of numbers; expected e.g. grid.seq_k=[4.0]"),
    (["sweep", "grid.seed=abc"], "a grid axis is a list of integers; expected e.g. grid.seed=[0]"),
    (["sweep", "grid.seq_k=148"], "a grid axis is a list; expected grid.seq_k=[148]"),
    (["swep"], "unknown command 'swep'; did you mean sweep?"),
    (["sweep", "grid.seq_k=148,364"], "a list is written in brackets, grid.seq_k=[148,364]"),
    (["sweep", "-m", "grid.seq_k=[148,364]"], "there is no multirun; a list is an axis of one sweep"),
    (["sweep", "--multirun"], "give the values in brackets: grid.seq_k=[148,364]"),
    (["sweep", "seq_k=[148]"], "seq_k=[148] is not a sweep config key; did you mean grid.seq_k=[148]?"),
    (["sweep", "reps=three"], "did you mean grid.reps=three?"),
    (["sweep", "grid.reps=three"], "grid.reps=three: expected an integer"),
    (["sweep", "grid.seq_k=[148"], "'grid.seq_k=[148' is not a KEY=VALUE override"),
    (["sweep", "sweep=nope"], "sweep=nope has no conf/sweep/nope.yaml"),
    (["sweep", "grid.method=[nope]"], "grid.method has unknown method 'nope'"),
    (["sweep", "--run-root", "RUN_ROOT"], "a sweep config path is given as path=value: expected run_root=RUN_ROOT"),
    (["sweep", "--tracking-uri=x"], "expected mlflow.tracking_uri=x"),
    (["sweep", "--cfg", "all"], "--cfg all: expected --cfg job"),
    (["sync-mlflow", "--run-root", "RUN_ROOT"], "expected run_root=RUN_ROOT"),
    (["sync-mlflow", "run_root=RUN_ROOT"], "run_root='RUN_ROOT' has no results/ folder"),
    (["bench-kernels", "--run-root", "RUN_ROOT"], "expected run_root=RUN_ROOT"),
    (["refresh-profiles", "hardware=h200"], "hardware is an option of this command, not a sweep config path; use "
                                            "--hardware h200"),
    (["refresh-profiles", "hardwares=h200"], "did you mean --hardware h200?"),
    (["refresh-profiles", "--run-root", "RUN_ROOT"], "expected run_root=RUN_ROOT"),
    (["sweep", "dry_run"], "'dry_run' is not a KEY=VALUE override"),
    (["bench-kernels", "grid.reps=three"], "grid.reps=three: expected an integer"),
    (["report", "run_root=RUN_ROOT"], "this command takes flags: --run-root RUN_ROOT"),
    (["report", "--run_root", "RUN_ROOT"], "did you mean --run-root?"),
    (["report", "--run-root", "RUN_ROOT"], "--run-root RUN_ROOT is no such folder"),
    (["demo", "--heads", "0"], "heads must be >= 1, got 0"),
    (["bench-reorder", "--device", "cuda:99"], "--device 'cuda:99': this machine has"),
    (["capture", "--out", "RUN_ROOT", "--pipeline", "nowhere", "--layers", "x"], "--layers must be comma-separated"),
    (["no-such-command"], "unknown command 'no-such-command'"),
]
# the lab's studies (python lab/<name>.py ARGV) meet the same path: (study and arguments, what the one line says)
LAB_MISTAKES = [
    (["bench_orchestration", "cells=5"], "this command takes flags: --cells 5"),
    (["sim_paper"], "the following arguments are required: --out"),
    (["validate_sim"], "the following arguments are required: measurements, --out"),
    (["bench_masks", "--methods", "nope"], "--methods: ['nope'] not in"),
    (["mask_fidelity", "--heads", "0,99"], "--heads must lie in [0, 40), got '0,99'"),
    (["calibrate_workload", "--layers", "99"], "--layers has [99]"),
    (["calibrate_workload", "--generator", "nope"], "argument --generator: invalid choice: 'nope'"),
    (["calibrate_workload", "--generator", "scene", "--search", "objects=-1"], "objects must be >= 0, got -1"),
    (["mask_fidelity", "--generator", "nope"], "argument --generator: invalid choice: 'nope'"),
    (["bench_e2e", "--forwards", "0"], "--forwards must be >= 1, got 0"),
]


@pytest.mark.parametrize("columns", ["80", "200"])
@pytest.mark.parametrize(("argv", "says"), MISTAKES, ids=[" ".join(a) for a, _ in MISTAKES])
def test_a_mistake_is_one_whole_line_on_stderr_and_exit_2(argv, says, columns, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", columns)
    monkeypatch.delenv("WAVEALIGN_TRACEBACK", raising=False)
    monkeypatch.chdir(tmp_path)
    missing = str(tmp_path / "runs" / "typo")
    assert cli.main([a.replace("RUN_ROOT", missing) for a in argv]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert err.startswith(f"wavealign {argv[0]}: " if argv[0] in cli.commands() else "wavealign: ")
    assert says.replace("RUN_ROOT", missing) in err, err
    assert list(tmp_path.iterdir()) == []  # nothing written: no run root, no output folder


@pytest.mark.parametrize(("argv", "says"), LAB_MISTAKES, ids=[" ".join(a) for a, _ in LAB_MISTAKES])
def test_a_lab_study_s_mistake_is_one_line_naming_the_script_and_exit_2(argv, says, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("WAVEALIGN_TRACEBACK", raising=False)
    monkeypatch.chdir(tmp_path)
    assert lab_studies.run(argv[0], argv[1:]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and err.startswith(f"lab/{argv[0]}.py: "), err
    assert says in err, err
    assert list(tmp_path.iterdir()) == []


def test_with_wavealign_traceback_set_the_mistake_is_raised_to_show_where(monkeypatch):
    monkeypatch.setenv("WAVEALIGN_TRACEBACK", "1")
    with pytest.raises(ValueError, match=r"did you mean grid\.seq_k"):
        cli.main(["sweep", "seq_k=[148]"])


@pytest.mark.parametrize("columns", ["80", "200"])
def test_a_mistake_from_the_console_script_at_any_width_is_one_line_without_traceback(columns, tmp_path):
    # a real process without a terminal, as CI runs it: nothing reads the width to wrap the line
    done = subprocess.run([sys.executable, "-m", "jobs.cli", "sync-mlflow", f"run_root={tmp_path / 'x'}"],
                          capture_output=True, text=True, timeout=120, cwd=REPO,
                          env={**_environment(), "COLUMNS": columns})
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (f"wavealign sync-mlflow: run_root='{tmp_path / 'x'}' has no results/ folder; expected the "
                           "run root of a sweep\n")


def _environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "WAVEALIGN_TRACEBACK"}


def test_every_command_s_summary_in_help_is_a_whole_sentence(capsys):
    assert cli.main(["--help"]) == 0
    commands = cli.commands()
    listed = [line for line in capsys.readouterr().out.splitlines() if line.split()[:1] and line.split()[0] in commands]
    assert len(listed) == len(commands)
    for line in listed:
        assert line.rstrip().endswith((".", ")")), line


def test_a_summary_is_the_first_sentence_of_the_first_paragraph():
    assert cli.summary("Time it on a CPU or a\nGPU. Then more.\n\nDetails.") == "Time it on a CPU or a GPU."
    assert cli.summary("Fit it (e.g. this); register it.\n") == "Fit it (e.g. this); register it."
