"""``wavealign compare``: two real run roots (rows written with ``dataset.make_row`` and ``dataset.write``), cells
made clearly faster, slower and the same in B, one found in B only, one simulated and one without per-rep times; the
verdicts, the exit status, the CSV read back, the HTML, the MLflow run and the refusals."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd
import pytest

from analysis.compare import IDENTITY
from jobs import cli
from orchestrator import dataset
from wavealign import metrics
from wavealign.records import Cell, CellResult

SWEEP_A, SWEEP_B, SWEEP_B2 = "aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb", "cccccccccccccccc"
STEADY = (1.0, 1.002, 0.998, 1.001, 0.999)  # per-rep times relative to a cell's median: a spread of 0.2 %


def _cell(tokens: int, **changes) -> Cell:
    cell = Cell.from_flat(dict(cell_id=f"c{tokens}", group_id=f"g{tokens}", hardware="cpu", profile_hardware="h100",
                               backend="reference", method="random", variant="wavealign", stages="both",
                               skip="force", workload="shape", seq_len_tokens=tokens, num_heads=1, head_dim=16,
                               block_size=128, wave_size=4, reps=5, warmup=0))
    return cell.replaced(**changes)


def _row(cell: Cell, ms: float, sweep_id: str, sweep_name: str, reps: bool = True, simulated: bool = False) -> dict:
    result = CellResult(cell.cell_id, cell.group_id, "done", simulated=simulated, kernel_ms_median=ms,
                        kernel_ms_reps=[ms * f for f in STEADY] if reps else [], speedup_vs_original=1.5,
                        speedup_ci_low=1.4, speedup_ci_high=1.6)
    return dataset.make_row(cell, result, sweep_id=sweep_id, sweep_name=sweep_name)


# seq_len_tokens -> (A's ms, B's ms): B faster, slower, the same (four cells: the unchanged cells tell how far
# the two runs drift apart, metrics.run_drift_sd); a simulated pair; a pair without per-rep times
UNCHANGED = (2048, 2304, 2560, 2816)
TIMES = {512: (10.0, 5.0), 1024: (5.0, 10.0), **{t: (8.0, 8.0) for t in UNCHANGED}}
SIMULATED, OLD, ONLY_B = 4096, 8192, 16384


@pytest.fixture(scope="module")
def roots(tmp_path_factory) -> tuple[Path, Path]:
    a, b = tmp_path_factory.mktemp("a"), tmp_path_factory.mktemp("b")
    sim = _cell(SIMULATED, measure="simulated", hardware="h100")
    dataset.write(a, [*(_row(_cell(t), ms, SWEEP_A, "before") for t, (ms, _) in TIMES.items()),
                      _row(sim, 2.0, SWEEP_A, "before", reps=False, simulated=True),
                      _row(_cell(OLD), 3.0, SWEEP_A, "before", reps=False)])
    dataset.write(b, [*(_row(_cell(t), ms, SWEEP_B, "after") for t, (_, ms) in TIMES.items()),
                      _row(sim, 1.0, SWEEP_B, "after", reps=False, simulated=True),
                      _row(_cell(OLD), 1.0, SWEEP_B, "after", reps=False),
                      _row(_cell(ONLY_B), 1.0, SWEEP_B, "after")])
    # a second sweep in B that re-ran only the cell that was faster
    dataset.write(b, [_row(_cell(512, cell_id="c512-again"), 5.0, SWEEP_B2, "again")])
    return a, b


def _compared(capsys, *argv: str) -> tuple[int, str, pd.DataFrame]:
    status = cli.main(["compare", *argv])
    printed = capsys.readouterr().out
    out = Path(re.search(r"compare: (\S+compare\.csv)", printed).group(1))
    return status, printed, pd.read_csv(out)


def test_each_cell_gets_the_verdict_its_times_were_made_for(roots, tmp_path, capsys):
    a, b = roots
    status, printed, table = _compared(capsys, str(a), str(b), "--out", str(tmp_path))
    verdicts = dict(zip(table["seq_len_tokens"], table["verdict"], strict=True))
    assert verdicts == {512: "faster", 1024: "slower", **dict.fromkeys(UNCHANGED, "same"),
                        SIMULATED: "faster" + metrics.PREDICTED, OLD: "-"}
    assert status == 1  # a cell is slower
    # the predicted faster counts with the measured one; the cell without reps has no verdict
    assert "8 cells matched: 2 faster / 1 slower / 4 same / 0 ambiguous (1 without an interval" in printed
    assert [line for line in printed.splitlines() if line.startswith("only in")] == [
        f"only in B: cpu timed random {ONLY_B} wavealign"]
    assert metrics.VERDICT_RULE.format(tol=metrics.TOLERANCE) in " ".join(printed.split())
    assert (tmp_path / "compare.html").read_text().count("data:image/png;base64,") == 1


def test_the_ratio_is_a_over_b_of_the_geometric_means_with_an_interval_around_it(roots, tmp_path, capsys):
    a, b = roots
    _, _, table = _compared(capsys, str(a), str(b), "--out", str(tmp_path))
    by_length = table.set_index("seq_len_tokens")
    for tokens, (a_ms, b_ms) in TIMES.items():
        # the same relative spread on both sides: the geometric means' ratio is the medians' ratio
        assert by_length.loc[tokens, "ratio"] == pytest.approx(a_ms / b_ms)
        assert by_length.loc[tokens, "ratio_ci_low"] < a_ms / b_ms < by_length.loc[tokens, "ratio_ci_high"]
    assert by_length.loc[OLD, "ratio"] == pytest.approx(3.0) and math.isnan(by_length.loc[OLD, "ratio_ci_low"])
    assert by_length.loc[512, "b_speedup_ci_high"] == pytest.approx(1.6)


def test_a_chosen_sweep_of_b_compares_its_cells_only_and_one_cell_alone_is_ambiguous(roots, tmp_path, capsys):
    a, b = roots
    status, printed, table = _compared(capsys, str(a), f"{b}:again", "--out", str(tmp_path))
    # twice as fast, but with no other cell of both runs to show how far they drift apart, two runs cannot tell
    assert list(table["seq_len_tokens"]) == [512] and list(table["verdict"]) == ["ambiguous"]
    assert table["ratio"][0] == pytest.approx(2.0)
    assert status == 0
    assert printed.count("only in A:") == len(TIMES) - 1 + 2


def test_piped_without_columns_each_cell_is_one_line_never_folded_at_80(roots, tmp_path, capsys, monkeypatch):
    from analysis.compare import cell_labels

    monkeypatch.delenv("COLUMNS", raising=False)
    a, b = roots
    _, printed, table = _compared(capsys, str(a), str(b), "--out", str(tmp_path))
    lines = printed.splitlines()
    lines = lines[:next(i for i, line in enumerate(lines) if "cells matched:" in line)]
    labels = cell_labels(table[list(IDENTITY)].to_dict("records"))
    assert max(map(len, labels)) > 20  # long enough that rich's 80 columns folded them before
    for label in labels:  # each cell's label and its verdict on one line
        assert len([line for line in lines if label in line and ("(time)" in line or "-" in line)]) == 1
    assert len([line for line in lines if line.strip()]) == len(labels) + 3  # the title, the header, its rule


@pytest.mark.parametrize(("argv", "needle"), [
    (["{tmp}/missing", "{b}"], "RUN_ROOT_A"),
    (["{a}", "{b}:nosuch"], "no sweep named 'nosuch'"),
    (["{a}", "{b}", "--tolerance", "2"], "--tolerance '2': expected a fraction in [0, 1)"),
    (["{a}", "{b}", "--tolerance", "abc"], "--tolerance 'abc'"),
    (["{a}", "{empty}"], "RUN_ROOT_B"),
])
def test_bad_input_is_one_line_naming_the_argument_and_exit_2(roots, tmp_path, capsys, argv, needle):
    a, b = roots
    empty = tmp_path / "empty"
    dataset.write(empty, [dataset.make_row(_cell(512), None, sweep_id=SWEEP_A, sweep_name="x", status="failed")])
    argv = [s.format(a=a, b=b, tmp=tmp_path, empty=empty) for s in argv]
    assert cli.main(["compare", *argv, "--out", str(tmp_path / "out")]) == cli.EXIT_BAD_INPUT
    error = capsys.readouterr().err
    assert needle in error and len(error.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()  # nothing written


def test_the_comparison_is_logged_to_mlflow_with_both_sweeps_parent_runs(roots, tmp_path, capsys):
    from mlflow.tracking import MlflowClient

    a, b = roots
    uri = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    (tmp_path / "store").mkdir()
    client = MlflowClient(tracking_uri=uri)
    experiment = client.create_experiment("wavealign", artifact_location=(tmp_path / "artifacts").as_uri())
    parent = client.create_run(experiment, tags={"wavealign.kind": "sweep", "wavealign.sweep_id": SWEEP_A})
    status = cli.main(["compare", str(a), str(b), "--out", str(tmp_path / "out"), "--mlflow", uri])
    assert status == 1
    run_id = re.search(r"logged as MLflow run (\w+)", capsys.readouterr().out).group(1)
    run = client.get_run(run_id)
    assert run.data.tags["wavealign.compare.a_parent_run"] == parent.info.run_id
    assert run.data.tags["wavealign.compare.b_parent_run"] == ""  # no parent run of B's sweeps in this store
    assert run.data.tags["wavealign.compare.b_sweep_ids"] == f"{SWEEP_B},{SWEEP_B2}"
    assert run.data.metrics["n_slower"] == 1 and run.data.metrics["n_only_b"] == 1
    assert {f.path for f in client.list_artifacts(run_id, "compare")} == {"compare/compare.csv",
                                                                          "compare/compare.html"}


def test_a_cell_s_label_names_its_launch_order_as_the_summary_does_and_the_csv_keeps_each_column(roots, tmp_path,
                                                                                                capsys):
    from analysis.compare import IDENTITY, cell_labels

    base = dict.fromkeys(IDENTITY, "x") | {"method": "xattention", "variant": "wavealign", "reorderer": "wavealign",
                                           "reorderer_params": "{}"}
    identities = [base, base | {"reorderer": "minhash", "reorderer_params": '{"bands": 8}'},
                  base | {"variant": "spatial", "reorderer": "minhash", "reorderer_params": '{"bands": 8}'},
                  base | {"reorderer": "minhash", "reorderer_params": '{"bands": 16}'}]
    assert cell_labels(identities[:3]) == ["xattention wavealign", "xattention wavealign[minhash]",
                                           "xattention spatial[minhash]"]
    # params only where two cells would otherwise read alike
    assert cell_labels(identities)[1:4:2] == ['xattention wavealign[minhash] {"bands": 8}',
                                              'xattention wavealign[minhash] {"bands": 16}']
    a, b = roots
    _, _, table = _compared(capsys, str(a), str(b), "--out", str(tmp_path))
    assert list(table.columns[:len(IDENTITY)]) == list(IDENTITY)
