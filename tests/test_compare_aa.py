"""The A/A test of ``wavealign compare`` and of a sweep's own verdict lines (issue 48): three sweeps of one identical
CPU config, every cell of every pair compared. Nothing changed between them, so each faster or slower verdict is a
false positive, and their count must be one that a rate of at most 5 % (what a 95 % interval promises) gives: the
test fails where the binomial chance of so many calls at 5 % is under 1 in 1,000, not wherever one run's share
exceeds 5 % (which a verdict exactly at its nominal rate does in half the runs). Within each sweep, a ``twin``
variant (the original's launch, stages none) is timed beside the original: its summary line is an A/A of its own.
Then the rule's other half, on rows made to differ: a real change is still found, a run slowed as a whole is not
called slower where the speedup over its own original can judge, too much spread says ambiguous with a warning."""

from __future__ import annotations

import itertools
import math
import re
from pathlib import Path

import pandas as pd
import pytest
from sweeps import run_test_sweep

from analysis import compare
from jobs import cli
from orchestrator import dataset
from orchestrator.progress import summary_lines
from orchestrator.record import latest_run_record, sweep_folder
from wavealign import metrics
from wavealign.records import Cell, CellResult

FALSE_POSITIVE_RATE = 1 - metrics.LEVEL  # what a 95 % interval promises at most
SIGNIFICANCE = 1e-3  # how rarely the A/A test may fail a verdict rule that keeps its promise
RUNS = 3
AA_SWEEP = """# @package _global_
name: aa_cpu
variants:
  twin: {stages: none}
grid:
  hardware: [cpu]
  backend: [reference]
  method: [planted, random]
  workload: [shape-2h]
  seq_k: [2, 4]
  variant: [original, twin, wavealign]
  reps: 10
"""


@pytest.fixture(scope="module")
def aa_roots(tmp_path_factory) -> list[Path]:
    """Three run roots of the same CPU sweep, run one after the other."""
    roots = []
    for run in range(RUNS):
        root, outcome = run_test_sweep(tmp_path_factory.mktemp(f"aa{run}"), "aa_cpu", AA_SWEEP,
                                       "mlflow.enabled=false")
        assert outcome.counts == {"done": 12}
        roots.append(root)
    return roots


def _called(words: list[str]) -> int:
    return sum(word in ("faster", "slower") for word in words)


def _within_the_promised_rate(called: int, verdicts: int) -> bool:
    """Whether ``called`` false positives among ``verdicts`` are a count that a rate of ``FALSE_POSITIVE_RATE`` gives
    with probability at least ``SIGNIFICANCE`` (binomial upper tail)."""
    p = FALSE_POSITIVE_RATE
    tail = sum(math.comb(verdicts, i) * p**i * (1 - p) ** (verdicts - i) for i in range(called, verdicts + 1))
    return tail >= SIGNIFICANCE


def test_identical_sweeps_compared_pairwise_are_called_faster_or_slower_within_the_false_positive_rate(aa_roots):
    # each pair once: B against A is A against B mirrored, not another draw
    verdicts = [cell.verdict_word for a, b in itertools.combinations(aa_roots, 2)
                for cell in compare.compare(compare.Side(a), compare.Side(b)).cells]
    assert len(verdicts) == RUNS * (RUNS - 1) // 2 * 12
    assert _within_the_promised_rate(_called(verdicts), len(verdicts)), pd.Series(verdicts).value_counts().to_dict()


def test_a_twin_of_the_original_timed_beside_it_is_called_faster_or_slower_within_the_false_positive_rate(aa_roots):
    lines = [line for root in aa_roots
             for line in summary_lines(list(dataset.newest_per_cell(dataset.read(root).to_pylist()).values()))
             if line.variant == "twin"]
    assert len(lines) == RUNS * 4
    assert _within_the_promised_rate(_called([line.verdict for line in lines]), len(lines)), lines


def test_each_run_records_its_host_load_and_compare_reports_it(aa_roots):
    a, b = aa_roots[:2]
    result = compare.compare(compare.Side(a), compare.Side(b))
    record = latest_run_record(sweep_folder(a, result.a_sweep_ids[0]))
    assert record["host"]["cpus"] >= 1 and record["host"]["load_5m"] >= 0
    assert result.a_state.load_per_cpu == pytest.approx(record["host"]["load_5m"] / record["host"]["cpus"])
    assert all(cell.a_load_per_cpu == result.a_state.load_per_cpu for cell in result.cells)
    assert "host load" in " ".join(compare.rules(result))


SWEEP_A, SWEEP_B = "aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb"
STEADY = (1.0, 1.002, 0.998, 1.001, 0.999, 1.0005, 0.9995, 1.0015)  # a spread of 0.2 %


def _rows(sweep_id: str, times: dict[tuple[int, str], float], shape: tuple[float, ...] = STEADY) -> list[dict]:
    """Done rows of one run, paired per group: (tokens, variant) -> its median ms; its reps ``shape`` x that."""
    rows = []
    for (tokens, variant), ms in times.items():
        cell = Cell.from_flat(dict(cell_id=f"{variant}-{tokens}", group_id=f"g{tokens}", hardware="cpu",
                                   profile_hardware="h100", backend="reference", method="random", variant=variant,
                                   stages="none" if variant == "original" else "both", skip="force",
                                   workload="shape", seq_len_tokens=tokens, num_heads=1, head_dim=16,
                                   block_size=128, wave_size=4, reps=len(shape), warmup=0))
        result = CellResult(cell.cell_id, cell.group_id, "done", device="cpu", kernel_ms_median=ms,
                            kernel_ms_reps=[ms * f for f in shape], paired=True)
        rows.append(dataset.make_row(cell, result, sweep_id=sweep_id, sweep_name=sweep_id[:1]))
    return rows


def _compared(tmp_path: Path, a_times: dict, b_times: dict, shape: tuple[float, ...] = STEADY):
    a, b = tmp_path / "a", tmp_path / "b"
    dataset.write(a, _rows(SWEEP_A, a_times, shape))
    dataset.write(b, _rows(SWEEP_B, b_times, shape))
    return compare.compare(compare.Side(a), compare.Side(b))


LENGTHS = (512, 1024, 2048, 4096)


def test_a_run_slowed_as_a_whole_is_not_called_slower_where_its_speedup_over_its_own_original_can_judge(tmp_path):
    a = {(t, v): ms for t in LENGTHS for v, ms in (("original", 10.0), ("wavealign", 8.0))}
    b = {key: 1.3 * ms for key, ms in a.items()}  # a host 30 % slower for the whole of B's run
    cells = {(c.identity["seq_len_tokens"], c.identity["variant"]): c for c in _compared(tmp_path, a, b).cells}
    for tokens in LENGTHS:
        ordered = cells[tokens, "wavealign"]
        assert (ordered.basis, ordered.verdict) == ("speedup", "same")
        assert ordered.speedup_ratio == pytest.approx(1.0)
        # every cell slowed alike is the drift the runs show: the times alone cannot tell it from a change
        assert cells[tokens, "original"].verdict == "ambiguous"


def test_a_real_gain_in_the_speedup_over_the_original_is_found_though_b_ran_slower(tmp_path):
    a = {(t, v): ms for t in LENGTHS for v, ms in (("original", 10.0), ("wavealign", 8.0))}
    b = {(t, v): 1.3 * (ms if (t, v) != (1024, "wavealign") else 6.0) for (t, v), ms in a.items()}
    cells = {(c.identity["seq_len_tokens"], c.identity["variant"]): c for c in _compared(tmp_path, a, b).cells}
    gained = cells[1024, "wavealign"]
    assert (gained.basis, gained.verdict) == ("speedup", "faster")
    assert gained.speedup_ratio == pytest.approx(8.0 / 6.0)


def test_a_real_change_of_one_cell_s_time_is_found_against_the_drift_the_others_show(tmp_path):
    a = {(t, "original"): 10.0 for t in LENGTHS}
    b = {**a, (1024, "original"): 5.0}
    cells = {c.identity["seq_len_tokens"]: c for c in _compared(tmp_path, a, b).cells}
    assert (cells[1024].basis, cells[1024].verdict) == ("time", "faster")
    assert {cells[t].verdict for t in LENGTHS if t != 1024} == {"same"}


def test_reps_spread_beyond_the_limit_say_ambiguous_whatever_the_interval_and_warn(tmp_path, capsys):
    wide = (1.0, 2.0, 0.6, 1.5, 0.8, 1.9, 0.7, 1.2)  # an IQR of about 80 % of the median: a loaded CPU
    assert metrics.spread_pct(wide) > metrics.SPREAD_LIMIT_PCT
    a = {(t, "original"): 10.0 for t in LENGTHS}
    b = {(t, "original"): 2.0 for t in LENGTHS}
    cells = _compared(tmp_path, a, b, wide).cells
    assert all(c.too_spread and c.verdict == "ambiguous" for c in cells)
    status = cli.main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "out")])
    captured = capsys.readouterr()
    assert status == 0
    assert re.search(r"warning: 4 of 4 cells' reps spread beyond 25 % of their median \(up to \d+ %\)", captured.err)


def test_two_run_roots_without_a_cell_in_common_are_one_line_and_exit_2(tmp_path, capsys):
    dataset.write(tmp_path / "a", _rows(SWEEP_A, {(512, "original"): 1.0}))
    dataset.write(tmp_path / "b", _rows(SWEEP_B, {(1024, "original"): 1.0}))
    status = cli.main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "out")])
    error = capsys.readouterr().err
    assert status == cli.EXIT_BAD_INPUT and len(error.strip().splitlines()) == 1
    assert "none of its 1 done cells matches" in error and not (tmp_path / "out").exists()


def test_a_summary_line_on_reps_spread_beyond_the_limit_says_ambiguous():
    wide = (1.0, 2.0, 0.6, 1.5, 0.8, 1.9, 0.7, 1.2)
    rows = _rows(SWEEP_A, {(512, "original"): 10.0, (512, "wavealign"): 5.0}, wide)
    for row in rows:
        if row["variant"] == "wavealign":  # the interval the pipeline would give, far above 1
            row.update(speedup_vs_original=2.0, speedup_ci_low=1.8, speedup_ci_high=2.2, verdict="faster")
    line = next(line for line in summary_lines(rows) if line.variant == "wavealign")
    assert line.verdict == "ambiguous" and line.spread_pct > metrics.SPREAD_LIMIT_PCT
    assert math.isfinite(line.ci_low)  # the interval is kept: only the verdict is withheld


def test_the_sweep_summary_warns_once_naming_the_lines_whose_spread_withheld_their_verdict():
    from orchestrator.summary import spread_warning

    wide = (1.0, 2.0, 0.6, 1.5, 0.8, 1.9, 0.7, 1.2)
    rows = _rows(SWEEP_A, {(512, "original"): 10.0, (512, "wavealign"): 5.0, (1024, "original"): 10.0,
                           (1024, "wavealign"): 5.0}, wide)
    for row in rows:
        if row["variant"] == "wavealign":
            row.update(speedup_vs_original=2.0, speedup_ci_low=1.8, speedup_ci_high=2.2, verdict="faster")
    warning = spread_warning(summary_lines(rows))
    assert re.fullmatch(r"warning: 2 of 2 lines' reps spread beyond 25 % of their median \(up to \d+ %\): .*",
                        warning)
    steady = _rows(SWEEP_A, {(512, "original"): 10.0, (512, "wavealign"): 5.0})
    assert spread_warning(summary_lines(steady)) is None
