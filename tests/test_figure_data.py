"""Each figure's data can be checked: a real sweep (Ray, Parquet, the summary) of a small CPU grid (two seeds of the
ablation variants, timed in pairs, and dense cells for Fig. 2) and a simulated H100 one, then the report. Beside each
figure's PNG is the table of what it drew (``<figure>.csv``), and every speedup over the original it draws for one
summary line's cells has that line's point, interval and verdict in ``summary.json`` (``metrics.AGGREGATE_RULE``)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
from sweeps import run_test_sweep

from analysis import figures
from analysis.report import NO_VALUE
from jobs import report
from wavealign import metrics

SWEEP = """# @package _global_
name: figure-data-test
grid:  # predicted speedups: points without intervals
  hardware: [h100]
  backend: [fa4]
  measure: [simulated]
  method: [planted]
  workload: [shape-4h]
  seq_k: [2]
  variant: [original, spatial, temporal, wavealign]
extra_grids:
  cpu_ablation:  # two seeds on one summary line: the rule for several cells
    hardware: [cpu]
    backend: [reference]
    method: [planted]
    workload: [shape-2h]
    seq_k: [1]
    variant: [original, spatial, temporal, wavealign]
    seed: [0, 1]
    reps: 4
    warmup: 0
  cpu_dense:  # Fig. 2's baseline
    hardware: [cpu]
    backend: [reference]
    method: [dense]
    workload: [shape-2h]
    seq_k: [1]
    variant: [original]
    reps: 4
    warmup: 0
"""
CELLS = 4 + 4 * 2 + 1
# the figures that draw a speedup over the original, and how many of their rows stand for one summary line each
SPEEDUP_FIGURES = ("fig10_kernel_latency", "fig12_ablation", "table2_reorderers")
# a figure row's columns that name its cells, and the summary line's fields they match
MATCH = {"hardware": "hardware", "backend": "backend", "method": "method", "workload": "workload",
         "seq_len_tokens": "tokens", "variant": "variant", "simulated": "simulated"}


@pytest.fixture(scope="module")
def swept(tmp_path_factory) -> tuple[Path, Path]:
    """The run root of a real sweep of ``SWEEP`` and its report folder."""
    tmp = tmp_path_factory.mktemp("figure-data")
    root, outcome = run_test_sweep(tmp, "figure_data_test", SWEEP, "mlflow.enabled=false")
    assert outcome.counts == {"done": CELLS}
    out = tmp / "report"
    assert report.main(["--run-root", str(root), "--out", str(out), "--no-mlflow"]) == 0
    return root, out


def _summary(root: Path) -> dict[tuple, dict]:
    (path,) = root.rglob("summary.json")
    return {tuple(str(line[field]) for field in MATCH.values()): line for line in json.loads(path.read_text())}


def _drawn(out: Path, name: str) -> pd.DataFrame:
    return pd.read_csv(out / f"{name}.csv", keep_default_na=False, dtype=str)


def _number(text: str) -> float:
    return math.nan if text == NO_VALUE else float(text)


def _same(drawn: str, summarised: float | None) -> bool:
    value = _number(drawn)
    if summarised is None:
        return math.isnan(value)
    return value == pytest.approx(summarised, rel=1e-9, abs=5e-4)  # the summary's printed precision, or better


def test_every_drawn_figure_has_the_table_of_what_it_drew_beside_it(swept):
    _, out = swept
    pngs = {path.stem for path in out.glob("*.png")}
    assert set(SPEEDUP_FIGURES) | {"fig02_speedup_vs_bound", "fig13_adaptive_skip"} <= pngs
    for name in pngs & set(figures.FIGURES):
        drawn = _drawn(out, name)
        assert len(drawn) and figures.NOTE not in drawn, name


@pytest.mark.parametrize("name", SPEEDUP_FIGURES)
def test_each_speedup_a_figure_draws_has_its_summary_line_s_point_interval_and_verdict(swept, name):
    root, out = swept
    lines = _summary(root)
    drawn = _drawn(out, name)
    drawn = drawn[drawn["speedup_over"] == figures.OVER_ORIGINAL]
    compared = 0
    for _, row in drawn.iterrows():
        line = lines.get(tuple(row[column] for column in MATCH))
        if line is None or int(row["cells"]) != line["cells_done"]:
            continue  # a row standing for more than one summary line's cells: no line to hold it against
        compared += 1
        for column, field in (("speedup", "speedup"), ("speedup_ci_low", "ci_low"), ("speedup_ci_high", "ci_high")):
            assert _same(row[column], line[field]), (name, column, row.to_dict(), line)
        assert row["verdict"] == line["verdict"], (name, row.to_dict(), line)
    # every reordered launch order of both sources, and in Fig. 10 and 12 the originals too
    assert compared >= (6 if name == "table2_reorderers" else 8), (name, compared)


def test_a_line_of_two_seeds_is_drawn_with_the_interval_across_them_not_either_seed_s(swept):
    root, out = swept
    lines = _summary(root)
    cpu = [line for key, line in lines.items() if key[0] == "cpu" and line["variant"] == "wavealign"]
    assert [line["cells_done"] for line in cpu] == [2]
    drawn = _drawn(out, "fig12_ablation")
    bar = drawn[(drawn["hardware"] == "cpu") & (drawn["variant"] == "wavealign")
                & (drawn["speedup_over"] == figures.OVER_ORIGINAL)]
    assert bar["cells"].tolist() == ["2"] and _number(bar["speedup_ci_low"].iloc[0]) < _number(bar["speedup"].iloc[0])
    assert bar["verdict"].iloc[0] in metrics.VERDICTS


def test_simulated_speedups_are_drawn_as_predictions_without_an_interval(swept):
    _, out = swept
    drawn = _drawn(out, "fig10_kernel_latency")
    simulated = drawn[(drawn["simulated"] == "True") & (drawn["variant"] != "original")]
    assert len(simulated) == 3
    assert set(simulated["speedup_ci_low"]) == {NO_VALUE} and set(simulated["kernel_ms_ci_low"]) == {NO_VALUE}
    assert all(verdict.endswith(metrics.PREDICTED) for verdict in simulated["verdict"])
    # a measured bar: the median of its cells' reps with its 95 % interval (figures.median_interval), which two cells
    # of 4 reps have and one of 4 reps is too few for
    measured = drawn[drawn["simulated"] == "False"]
    pooled, alone = measured[measured["cells"] == "2"], measured[measured["cells"] == "1"]
    assert len(pooled) == 4 and len(alone) == 1 and set(alone["kernel_ms_ci_low"]) == {NO_VALUE}
    assert (pooled["kernel_ms_ci_low"].map(float) <= pooled["kernel_ms"].map(float)).all()
    assert (pooled["kernel_ms"].map(float) <= pooled["kernel_ms_ci_high"].map(float)).all()


def test_fig2_draws_each_cpu_method_s_speedup_over_dense_with_an_interval_from_both_cells_reps(swept):
    _, out = swept
    drawn = _drawn(out, "fig02_speedup_vs_bound")
    assert set(drawn["speedup_over"]) == {figures.OVER_DENSE}
    (row,) = drawn[drawn["hardware"] == "cpu"].to_dict("records")
    low, point, high = (_number(row[c]) for c in ("speedup_ci_low", "speedup", "speedup_ci_high"))
    assert low < point < high and row["verdict"] in metrics.VERDICTS and row["cells"] == "2"
