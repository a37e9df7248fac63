"""The sweep's summary judges each speedup by its interval (``wavealign.metrics``), writes its lines as records
(``summary.json``, ``summary.csv``), and a sweep whose console is not a terminal prints plain progress lines."""

from __future__ import annotations

import csv
import io
import json
import math
import statistics
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf
from rich.console import Console

from orchestrator import dataset
from orchestrator.progress import SweepProgress, summary_lines, summary_table
from orchestrator.record import SweepOutcome
from orchestrator.summary import print_summary
from wavealign import metrics
from wavealign.records import Cell, CellResult

SWEEP = "0123456789abcdef"


def row(variant: str, speedup: float, low: float = math.nan, high: float = math.nan, *, seed: int = 0,
        simulated: bool = False, tokens: int = 4096, kernel_ms: float = 2.0) -> dict:
    """A done row of hand-set figures, through the dataset's own row maker; its verdict as the pipeline gives it."""
    cell = Cell.from_flat(dict(cell_id=f"{variant}-{seed}-{tokens}", group_id=f"g{seed}-{tokens}", hardware="h100",
                               profile_hardware="h100", backend="fa4", method="random", variant=variant, stages="both",
                               skip="force", workload="shape", seq_len_tokens=tokens, num_heads=2, head_dim=64,
                               block_size=128, wave_size=4, reps=10, warmup=1, seed=seed))
    baseline = variant == "original"
    result = CellResult(cell_id=cell.cell_id, group_id=cell.group_id, status="done", simulated=simulated,
                        timer="simulated" if simulated else "cuda_events", kernel_ms_median=kernel_ms,
                        kernel_ms_iqr=0.0 if simulated else 0.1, reorder_ms=0.0, speedup_vs_original=speedup,
                        speedup_ci_low=low, speedup_ci_high=high, verdict_tolerance=metrics.TOLERANCE,
                        verdict=None if baseline else metrics.verdict(low, high, point=speedup))
    return dataset.make_row(cell, result, sweep_id=SWEEP, sweep_name="t")


def only_line(rows: list[dict]):
    return next(line for line in summary_lines(rows) if line.variant != "original")


@pytest.mark.parametrize(("low", "high", "verdict"), [
    (1.08, 1.12, "faster"), (0.88, 0.93, "slower"), (0.995, 1.004, "same"), (0.98, 1.05, "ambiguous")])
def test_one_cell_s_line_shows_its_own_interval_and_verdict(low, high, verdict):
    point = math.sqrt(low * high)
    rows = [row("original", 1.0), row("wavealign", point, low, high)]
    line = only_line(rows)
    assert (line.speedup, line.ci_low, line.ci_high, line.verdict) == (point, low, high, verdict)
    printed = next(r for r in summary_table(rows, "t").columns if "speedup" in str(r.header)).cells
    assert list(map(str, printed)) == ["1.000", metrics.interval_text(point, low, high)]


def test_seeds_on_one_line_give_their_geometric_mean_with_a_t_interval_across_them():
    points = (1.10, 1.12, 1.14)
    rows = [r for seed, p in enumerate(points) for r in (row("original", 1.0, seed=seed),
                                                          row("wavealign", p, p - 0.01, p + 0.01, seed=seed))]
    line = only_line(rows)
    logs = [math.log(p) for p in points]
    mean, reach = sum(logs) / 3, 4.303 * statistics.stdev(logs) / math.sqrt(3)  # t_{0.975, 2}
    assert line.cells_done == 3 and line.speedup == pytest.approx(math.exp(mean))
    assert (line.ci_low, line.ci_high) == pytest.approx((math.exp(mean - reach), math.exp(mean + reach)))
    assert line.verdict == metrics.verdict(line.ci_low, line.ci_high) == "faster"
    notes = summary_table(rows, "t").caption
    assert metrics.AGGREGATE_RULE in notes


def test_a_line_of_one_cell_does_not_state_the_rule_for_several():
    assert metrics.AGGREGATE_RULE not in summary_table([row("original", 1.0), row("wavealign", 1.1, 1.05, 1.15)],
                                                       "t").caption


def test_a_measured_cell_without_an_interval_has_no_verdict_not_a_prediction_s():
    line = only_line([row("original", 1.0), row("wavealign", 1.3)])  # one rep: a point, no interval
    assert (line.speedup, line.verdict) == (1.3, metrics.NO_VERDICT)


def test_seeds_that_disagree_are_ambiguous_though_each_is_clear():
    rows = [r for seed, (p, lo, hi) in enumerate([(1.2, 1.18, 1.22), (0.9, 0.88, 0.92)])
            for r in (row("original", 1.0, seed=seed), row("wavealign", p, lo, hi, seed=seed))]
    assert {r["verdict"] for r in rows if r["variant"] == "wavealign"} == {"faster", "slower"}
    assert only_line(rows).verdict == "ambiguous"


def test_a_simulated_line_is_a_point_with_no_spread_never_zero():
    rows = [r for seed in (0, 1) for r in (row("original", 1.0, seed=seed, simulated=True),
                                           row("wavealign", 1.3, seed=seed, simulated=True))]
    line = only_line(rows)
    assert line.simulated and math.isnan(line.ci_low) and math.isnan(line.ci_high)
    assert line.verdict == "faster" + metrics.PREDICTED
    table = summary_table(rows, "t")
    columns = {str(c.header).replace("\n", " "): [str(cell) for cell in c.cells] for c in table.columns}
    assert columns["IQR %"] == ["-", "-"]
    assert columns["speedup [95% CI]"] == ["1.000", "1.300"]


def test_the_table_keeps_to_80_columns_and_cuts_no_figure():
    rows = [row("original", 1.0), row("wavealign", 1.102, 1.095, 1.110),
            row("original", 1.0, tokens=32768), row("wavealign", 0.97, 0.95, 1.02, tokens=32768)]
    console = Console(file=io.StringIO(), width=80)
    console.print(summary_table(rows, "sweep t (0123456789abcdef)"))
    text = console.file.getvalue()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text
    assert "1.102 [1.095, 1.110]" in text and "ambiguous" in text


def test_print_summary_writes_its_lines_as_json_and_csv(tmp_path):
    rows = [row("original", 1.0), row("wavealign", 1.102, 1.095, 1.110)]
    dataset.write(tmp_path, rows)
    cells = [SimpleNamespace(cell_id=r["cell_id"]) for r in rows]
    console = Console(file=io.StringIO(), width=200)
    print_summary(OmegaConf.create({"name": "t", "run_root": str(tmp_path)}),
                  SimpleNamespace(grid=SimpleNamespace(cells=cells), sweep_id=SWEEP),
                  SweepOutcome(sweep_id=SWEEP, run_root=tmp_path, tracking_uri=None, rows=rows), console,
                  tmp_path / "summary.txt", errors=console)
    records = json.loads((tmp_path / "summary.json").read_text())
    assert [(r["variant"], r["speedup"], r["ci_low"], r["ci_high"], r["verdict"]) for r in records] == [
        ("original", 1.0, None, None, metrics.BASELINE), ("wavealign", 1.102, 1.095, 1.110, "faster")]
    assert records[1]["hardware"] == "h100" and records[1]["tokens"] == 4096 and records[1]["cells_done"] == 1
    assert records[1]["kernel_ms"] == 2.0 and records[1]["simulated"] is False
    with open(tmp_path / "summary.csv", newline="") as fh:
        table = list(csv.DictReader(fh))
    assert [(r["variant"], r["ci_low"], r["verdict"]) for r in table] == [("original", "", metrics.BASELINE),
                                                                          ("wavealign", "1.095", "faster")]


# ---- progress on a console that is not a terminal


class FakeClock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def plain_progress(totals: dict[str, int], every_s: float = 10.0) -> tuple[SweepProgress, io.StringIO, FakeClock]:
    out, clock = io.StringIO(), FakeClock()
    console = Console(file=out, force_terminal=False, width=200)
    assert not console.is_terminal
    return SweepProgress(totals, console, every_s=every_s, clock=clock), out, clock


def test_progress_off_a_terminal_prints_a_plain_line_once_per_interval_and_at_the_end():
    progress, out, clock = plain_progress({"h100": 4})
    with progress:
        progress.add("h100", running=1)  # nothing is due yet
        clock.now_s += 10
        progress.add("h100", running=-1, done=1)
        clock.now_s += 3
        progress.add("h100", running=1)  # 3 s after the last line: not due
        clock.now_s += 7
        progress.add("h100", running=-1, failed=1)
    lines = out.getvalue().splitlines()
    assert lines == ["progress: done 1/4 failed 0 running 0 eta 30s",
                     "progress: done 1/4 failed 1 running 0 eta 20s",
                     "progress: done 1/4 failed 1 running 0 eta 20s"]


def test_progress_off_a_terminal_counts_every_placement_and_names_each():
    progress, out, _ = plain_progress({"h100": 2, "cpu": 3})
    with progress:
        progress.add("cpu", running=2)
    assert out.getvalue().splitlines() == ["progress: done 0/5 failed 0 running 2 eta - (h100 0/2, cpu 0/3)"]


def test_progress_disabled_prints_nothing_off_a_terminal():
    out = io.StringIO()
    with SweepProgress({"cpu": 1}, Console(file=out, force_terminal=False), enabled=False, clock=FakeClock()) as p:
        p.add("cpu", done=1)
    assert out.getvalue() == ""


def test_progress_refuses_an_interval_that_is_not_positive():
    with pytest.raises(ValueError, match="every_s must be > 0, got 0"):
        SweepProgress({"cpu": 1}, Console(file=io.StringIO()), every_s=0)



def test_cells_timed_two_ways_in_one_sweep_are_two_lines_named_by_the_parameter_that_differs():
    """sweep=paired_h200 times each cell blocked and paired: one interval across both would mix two methods."""
    rows = []
    for paired, (low, high) in ((False, (0.95, 0.97)), (True, (0.995, 1.004))):
        for r in (row("original", 1.0), row("wavealign", math.sqrt(low * high), low, high)):
            r.update(measure_params=json.dumps({"paired": paired, "budget_s": 3.0}),
                     cell_id=f"{r['cell_id']}-{paired}")
            rows.append(r)
    lines = [line for line in summary_lines(rows) if line.variant != "original"]
    assert sorted((line.measure, line.verdict) for line in lines) == [("timed paired=false", "slower"),
                                                                     ("timed paired=true", "same")]
