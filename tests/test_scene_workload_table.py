"""benchmarks/results/scene-workload-h200/table.py on the committed Table I run (issue 12's NCU cells): the markdown
rows carry each method's density, Nsight Compute hits and misses, and a controls run without dense is refused."""

from __future__ import annotations

import runpy
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "benchmarks/results/scene-workload-h200/table.py"
TABLE1_NCU = REPO / "benchmarks/results/table1-fa4-h200/results-ncu"


def script() -> dict:
    return runpy.run_path(str(SCRIPT))


def ncu_run_root(tmp_path: Path) -> Path:
    (tmp_path / "results").symlink_to(TABLE1_NCU)
    return tmp_path


def test_the_table_of_the_committed_table1_run_states_each_method_and_its_misses(tmp_path, capsys):
    assert script()["main"](["table", str(ncu_run_root(tmp_path))]) == 0
    out = capsys.readouterr().out
    minference = next(line for line in out.splitlines() if line.startswith("| wan14b-720p | clusters | minference |"))
    # 33.0% against 18.3%; NCU 42.36% original, 94.2% after S1+S2; 42.36 / 15.77 (the iid control) = 2.69x
    assert "| 33.0% | 18.3% | 1484.4 | 1368.2 | 8.28 | 1.085 |" in minference
    assert "| 42.4% | 94.2% | 21.7% | 2.69x | 2.05x |" in minference
    assert "+14.7 pts density; +20.7 pts L2 hit; +31.2% L2 / random" in minference
    assert "| wan14b-720p | clusters | random |" in out
    assert "Distance to Table I" in out and "wan14b-720p " in out.splitlines()[-1]


def test_settings_need_a_dense_cell_measured_by_nsight_compute(tmp_path, capsys):
    assert script()["main"](["settings", str(ncu_run_root(tmp_path))]) == 2
    assert "no dense cell with an Nsight Compute L2 hit" in capsys.readouterr().err
