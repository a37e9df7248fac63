"""What a user reads: the sweep's summary table, the dry run's time estimate and ``wavealign --version``."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import pytest
from rich.console import Console

import wavealign
from jobs import cli
from orchestrator import config, dataset, plan
from orchestrator.progress import summary_table
from wavealign import environment, metrics, pipeline
from wavealign.records import Cell, CellResult

SWEEP = "0123456789abcdef"  # a sweep id of plan.sweep_id's format

REPO = Path(__file__).resolve().parent.parent
LENGTHS = (512, 1024)


def make_cell(**changes) -> Cell:
    cell = Cell.from_flat(dict(cell_id="c0", group_id="g0", hardware="cpu", profile_hardware="h100",
                               backend="reference", method="planted", variant="original", stages="none",
                               skip="force", workload="shape", seq_len_tokens=1024, num_heads=2, head_dim=32,
                               block_size=128, wave_size=4, reps=2, warmup=0))
    return cell.replaced(**changes)


def group_rows(tokens: int) -> list[dict]:
    """The rows of one group at ``tokens``: original and WaveAlign, run through the real pipeline on the CPU."""
    cells = [make_cell(cell_id=f"orig-{tokens}", group_id=f"g-{tokens}", seq_len_tokens=tokens),
             make_cell(cell_id=f"wa-{tokens}", group_id=f"g-{tokens}", seq_len_tokens=tokens, variant="wavealign",
                       stages="both")]
    results = pipeline.run_group(cells)
    assert all(r.status == "done" for r in results), [r.traceback for r in results]
    return [dataset.make_row(c, r, sweep_id=SWEEP, sweep_name="test") for c, r in zip(cells, results, strict=True)]


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    # the WaveAlign rows first, the longer length first: the table sorts them itself
    return [row for tokens in reversed(LENGTHS) for row in reversed(group_rows(tokens))]


def table_lines(table) -> list[dict[str, str]]:
    """The table's cells as plain text, one dict per line, keyed by header."""
    columns = {str(c.header).replace("\n", " "): [str(cell) for cell in c.cells] for c in table.columns}
    return [dict(zip(columns, values, strict=True)) for values in zip(*columns.values(), strict=True)]


def rendered(table) -> str:
    console = Console(record=True, width=200)
    console.print(table)
    return console.export_text()


# ---- the summary table


def test_summary_has_one_line_per_sequence_length_and_variant(rows):
    lines = table_lines(summary_table(rows, "t"))
    assert [(line["tokens"], line["variant"]) for line in lines] == [
        ("512", "original"), ("512", "wavealign"), ("1,024", "original"), ("1,024", "wavealign")]
    assert all(line["done"] == "1" for line in lines)


def test_summary_names_a_baseline_reorderer_beside_its_variant_and_keeps_workloads_apart(rows):
    baseline = [dict(r, reorderer="lsh", cell_id=r["cell_id"] + "-lsh") for r in rows if r["variant"] == "wavealign"]
    other = [dict(r, workload="shape-4h", cell_id=r["cell_id"] + "-4h") for r in rows]
    lines = table_lines(summary_table([*rows, *baseline, *other], "t"))
    assert {line["variant"] for line in lines} == {"original", "wavealign", "wavealign[lsh]"}
    assert len(lines) == 2 * 3 + 2 * 2
    assert "wavealign[lsh]" in rendered(summary_table([*rows, *baseline], "t"))


def test_summary_speedup_is_each_row_s_own_speedup_with_its_interval_and_verdict(rows):
    for tokens in LENGTHS:
        aligned = next(r for r in rows if r["seq_len_tokens"] == tokens and r["variant"] == "wavealign")
        line = next(line for line in table_lines(summary_table(rows, "t"))
                    if line["tokens"] == f"{tokens:,}" and line["variant"] == "wavealign")
        assert line["speedup [95% CI]"] == metrics.interval_text(
            aligned["speedup_vs_original"], aligned["speedup_ci_low"], aligned["speedup_ci_high"])
        assert line["verdict"] == aligned["verdict"]


def test_the_original_s_own_line_is_the_baseline(rows):
    for line in table_lines(summary_table(rows, "t")):
        if line["variant"] == "original":
            assert (line["speedup [95% CI]"], line["verdict"]) == ("1.000", "baseline")


def test_the_iqr_column_is_the_kernel_iqr_as_a_share_of_its_median(rows):
    timed = [dict(r, kernel_ms_median=8.0 if r["variant"] == "wavealign" else 10.0,
                  kernel_ms_iqr=0.2 if r["variant"] == "wavealign" else 0.5) for r in rows
             if r["seq_len_tokens"] == LENGTHS[0]]
    lines = table_lines(summary_table(timed, "t"))
    assert [(line["variant"], line["IQR %"]) for line in lines] == [("original", "5.0"), ("wavealign", "2.5")]


def test_the_failed_and_unschedulable_columns_appear_only_when_a_line_has_one(rows):
    headers = [c.header for c in summary_table(rows, "t").columns]
    assert "failed" not in headers and "unsched." not in headers


def test_summary_speedup_says_how_it_is_computed_and_judged(rows):
    text = " ".join(rendered(summary_table(rows, "t")).split())  # the notes as one line, however wrapped
    assert "speedup: the original variant's kernel time over the line's" in text
    assert metrics.VERDICT_RULE.format(tol=metrics.TOLERANCE) in text


def test_summary_shows_the_ncu_l2_hit_where_measured_labelled_ncu(rows):
    profiled = [dict(r, ncu_l2_hit_pct=61.25) if r["seq_len_tokens"] == 512 else r for r in rows]
    table = summary_table(profiled, "t")
    l2 = {(line["tokens"], line["variant"]): line["L2 hit %"] for line in table_lines(table)}
    assert l2[("512", "original")] == l2[("512", "wavealign")] == "61.2 (ncu)"
    assert l2[("1,024", "original")] == "-"
    assert "L2 hit % (ncu): measured by Nsight Compute" in rendered(table)


def test_summary_shows_the_simulated_l2_hit_labelled_sim(rows):
    simulated = [dict(r, l2_hit_pct=40.0) for r in rows]
    table = summary_table(simulated, "t")
    assert {line["L2 hit %"] for line in table_lines(table)} == {"40.0 (sim)"}
    assert "L2 hit % (sim): predicted by wavealign.sim" in rendered(table)


def test_summary_prefers_the_ncu_l2_hit_to_a_simulated_one(rows):
    both = [dict(r, l2_hit_pct=40.0, ncu_l2_hit_pct=70.0) for r in rows]
    assert {line["L2 hit %"] for line in table_lines(summary_table(both, "t"))} == {"70.0 (ncu)"}


def test_summary_counts_failed_cells_on_their_length_line(rows):
    failed = dict(rows[0], status="failed", kernel_ms_median=math.nan, speedup_vs_original=math.nan)
    lines = table_lines(summary_table([failed, *rows[1:]], "t"))
    line = next(line for line in lines if (line["tokens"], line["variant"]) == ("1,024", "wavealign"))
    assert (line["done"], line["failed"], line["kernel ms"], line["speedup [95% CI]"]) == ("0", "1", "-", "-")


# ---- the dry run's estimate

GPU_CELLS = ["~sweep", "grid.hardware=[h100]", "grid.backend=[fa4]", "grid.method=[random]",
             "grid.workload=[shape-2h]", "grid.seq_k=[4]", "grid.variant=[original,wavealign]", "grid.reps=2",
             "grid.warmup=0", "progress=false"]


def dry_run_text(tmp_path: Path, *overrides: str) -> str:
    cfg = config.load([*GPU_CELLS, f"run_root={tmp_path / 'fresh'}", *overrides])
    console = Console(record=True, width=400)
    plan.describe(plan.make_plan(cfg), cfg, console)
    return console.export_text()


def test_dry_run_on_a_fresh_run_root_estimates_gpu_cells_from_the_roofline_model(tmp_path):
    out = dry_run_text(tmp_path)
    line = next(line for line in out.splitlines() if line.strip().startswith("estimate h100 workers"))
    assert re.search(r"estimate h100 workers: [0-9.]+ worker-minutes for 2 cells from the roofline model", line)
    assert "no earlier results" not in out
    assert "roofline model: attention FLOPs" in out


def test_dry_run_says_which_model_cells_assume_a_dense_mask(tmp_path):
    out = dry_run_text(tmp_path, "grid.method=[xattention]", "grid.workload=[wan1.3b-480p-2h]")
    assert "2 assumed dense, an upper bound" in out


def test_dry_run_reports_cpu_cells_without_earlier_results_as_not_estimated(tmp_path):
    out = dry_run_text(tmp_path, "grid.hardware=[cpu]", "grid.backend=[reference]")
    assert "estimate cpu workers: 2 cells not estimated: no earlier results" in out
    assert "roofline" not in out


def test_earlier_results_of_the_same_hardware_backend_and_method_win_over_the_model(tmp_path):
    cfg = config.load([*GPU_CELLS, f"run_root={tmp_path}"])
    cells = plan.make_plan(cfg).pending
    earlier = [dataset.make_row(c, CellResult(c.cell_id, c.group_id, "done", cell_wall_s=30.0), sweep_id=SWEEP,
                                sweep_name="earlier") for c in cells]
    dataset.write(tmp_path, earlier)
    estimate = plan.estimate_seconds(cells, tmp_path)["h100"]
    assert (estimate.history_s, estimate.history_cells, estimate.model_cells) == (60.0, 2, 0)


def test_the_roofline_model_is_within_2x_of_the_measured_h200_table1_cells(tmp_path):
    shutil.copytree(REPO / "tests/data/table1-fa4-h200", tmp_path, dirs_exist_ok=True)  # a read may quarantine
    rows = dataset.read(tmp_path).to_pylist()
    assert len(rows) == 10
    for row in rows:
        modelled = plan.model_seconds(Cell.from_flat(json.loads(row["cell_json"])), density=row["density"])
        assert 0.5 <= modelled / row["cell_wall_s"] <= 2.0, (row["method"], row["variant"], modelled)


def test_a_cpu_cell_has_no_model_time():
    assert plan.model_seconds(make_cell()) is None


# ---- wavealign --version


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version_prints_the_package_version_and_git_sha(flag, capsys, monkeypatch):
    monkeypatch.setenv("WAVEALIGN_GIT_SHA", "0123abcd")
    assert cli.main([flag]) == 0
    assert capsys.readouterr().out.strip() == f"wavealign {wavealign.__version__} (git 0123abcd)"


def test_version_without_a_git_checkout_prints_the_version_alone(capsys, monkeypatch):
    monkeypatch.setattr(environment, "git_sha", lambda: None)
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"wavealign {wavealign.__version__}"


def test_sweep_cfg_job_prints_the_composed_config_and_runs_nothing(capsys, tmp_path):
    from omegaconf import OmegaConf

    from jobs import sweep as sweep_job

    assert sweep_job.main(["--cfg", "job", "grid.seq_k=[2,3]", f"run_root={tmp_path}"]) == 0
    printed = OmegaConf.create(capsys.readouterr().out)
    assert list(printed.grid.seq_k) == [2, 3] and printed.name == "smoke"
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize(("argv", "needle"), [
    (["-m", "grid.seq_k=[2,3]"], "there is no multirun; a list is an axis of one sweep"),
    (["--multirun"], "there is no multirun"),
    (["--cfg", "hydra"], "--cfg hydra: expected --cfg job"),
    (["--dryrun"], "--dryrun: not a flag of this command; did you mean --dry-run?"),
])
def test_sweep_refuses_hydra_flags_it_does_not_serve_clearly(argv, needle, capsys):
    from jobs import cli

    assert cli.main(["sweep", *argv]) == 2
    assert needle in capsys.readouterr().err


def test_every_command_that_reads_a_run_root_calls_it_run_root():
    import subprocess
    import sys

    helps = {name: subprocess.run([sys.executable, "-m", "jobs.cli", name, "--help"], capture_output=True,
                                  text=True, timeout=120).stdout for name in ("sweep", "report", "refresh-profiles",
                                                                               "sync-mlflow")}
    assert "run_root=" in helps["sweep"] and "--run-root" in helps["report"]
    assert "run_root=" in helps["refresh-profiles"] and "run_root=" in helps["sync-mlflow"]
    assert not any(re.search(r"--runs\b|\bruns=", text) for text in helps.values())


def test_the_gpu_busy_share_is_timed_kernel_time_over_the_gpu_workers_dispatch_time(tmp_path):
    """Two GPU workers dispatching for 2 s; two done rows timed with CUDA events, 4 calls x 100 ms each, are 0.8 s
    busy: 0.8 / (2 x 2) = 20 %. A cell with warmup=0 still makes its first call (1 + 3 reps), one with warmup=1
    makes 1 + 3 (the first call is its warm-up). A simulated row, a failed row and the CPU worker do not count."""
    import json
    from types import SimpleNamespace

    from omegaconf import OmegaConf
    from rich.console import Console

    from orchestrator.record import SweepOutcome, write_run_record
    from orchestrator.summary import print_summary

    timed = {"status": "done", "timer": "cuda_events", "warmup": 1, "reps": 3, "kernel_ms_median": 100.0}
    failed = {**timed, "status": "failed", "cell_id": "c", "hardware": "h200", "backend": "fa4", "method": "random",
              "variant": "original", "error": "boom"}
    rows = [timed, {**timed, "warmup": 0}, {**timed, "timer": "simulated"}, failed]
    outcome = SweepOutcome(sweep_id=SWEEP, run_root=tmp_path, tracking_uri=None, rows=rows, dispatch_s=2.0)
    write_run_record(tmp_path, outcome, {"h200": ["a", "b"], "cpu": ["c"]})
    assert json.loads(next(tmp_path.glob("run-*.json")).read_text())["kernel_busy_fraction"] == pytest.approx(0.2)
    assert outcome.gpu_workers == 2 and outcome.kernel_busy_fraction == pytest.approx(0.2)
    console = Console(record=True, width=200)
    plan = SimpleNamespace(grid=SimpleNamespace(cells=[]), sweep_id=SWEEP)
    print_summary(OmegaConf.create({"name": "t", "run_root": str(tmp_path)}), plan, outcome, console,
                  tmp_path / "summary.txt")
    assert "GPU busy: 20% of 2 GPU worker(s)' 2 s in timed kernel launches" in console.export_text()
    # a sweep without GPU workers has no such share, and says nothing of it
    cpu_only = SweepOutcome(sweep_id=SWEEP, run_root=tmp_path, tracking_uri=None, rows=rows, dispatch_s=2.0)
    write_run_record(tmp_path, cpu_only, {"cpu": ["c"]})
    assert cpu_only.kernel_busy_fraction is None


# ---- what a sweep that could not measure everything says, and its exit status

def summary_of(tmp_path, rows: list[dict], cells: list[Cell]) -> str:
    """``print_summary``'s text for this run's ``rows`` (also written to the dataset) over a grid of ``cells``."""
    from types import SimpleNamespace

    from omegaconf import OmegaConf

    from orchestrator.record import SweepOutcome
    from orchestrator.summary import print_summary

    dataset.write(tmp_path, rows)
    outcome = SweepOutcome(sweep_id=SWEEP, run_root=tmp_path, tracking_uri=None, rows=rows)
    console = Console(record=True, width=200)
    print_summary(OmegaConf.create({"name": "t", "run_root": str(tmp_path)}),
                  SimpleNamespace(grid=SimpleNamespace(cells=cells), sweep_id=SWEEP), outcome, console,
                  tmp_path / "summary.txt", errors=console)
    return console.export_text()


def not_done(cell_id: str, hardware: str, status: str, error: str) -> tuple[Cell, dict]:
    cell = make_cell(cell_id=cell_id, hardware=hardware)
    return cell, dataset.make_row(cell, None, sweep_id=SWEEP, sweep_name="t", status=status, error=error)


def test_the_summary_lists_cells_not_done_grouped_by_reason_the_largest_group_first(tmp_path):
    absent = "no alive Ray node has a GPU labelled accelerator-type=H100"
    cells, rows = zip(*[*(not_done(f"u{i}", "h100", "unschedulable", absent) for i in range(3)),
                        not_done("f0", "a40", "failed", "FileNotFoundError: [Errno 2] missing.npz\n(more)")],
                      strict=True)
    text = summary_of(tmp_path, list(rows), list(cells))
    assert f"unschedulable 3 cells (h100/reference): {absent}" in text
    assert "failed 1 cell (a40/reference): FileNotFoundError: [Errno 2] missing.npz" in text  # not read as markup
    assert text.index("unschedulable 3 cells") < text.index("failed 1 cell") and "(more)" not in text


def test_a_sweep_that_measured_nothing_prints_no_table_and_no_report_hint(tmp_path):
    cell, row = not_done("u0", "h100", "unschedulable", "no alive Ray node has a GPU labelled accelerator-type=H100")
    text = summary_of(tmp_path, [row], [cell])
    assert " report --run-root " not in text and "kernel ms" not in text
    assert "unschedulable 1 cell (h100/reference)" in text


def test_a_sweep_that_measured_something_prints_its_table_and_the_report_hint(tmp_path, rows):
    cell, absent = not_done("u0", "h100", "unschedulable", "no alive Ray node has a GPU labelled accelerator-type=H100")
    cells = [make_cell(cell_id=r["cell_id"]) for r in rows]
    text = summary_of(tmp_path, [*rows, absent], [*cells, cell])
    assert " report --run-root " in text and "kernel ms" in text


@pytest.mark.parametrize(("counts", "interrupted", "terminated_by", "code"), [
    ({"done": 4}, False, None, 0),
    ({"done": 2, "unschedulable": 2}, False, None, 0),  # partly unschedulable: the rest measured
    ({}, False, None, 0),  # every cell done earlier
    ({"unschedulable": 4}, False, None, 4),
    ({"done": 3, "failed": 1}, False, None, 3),
    ({"failed": 2, "unschedulable": 2}, False, None, 3),
    ({"unschedulable": 4}, True, None, 130),
    ({"done": 1}, True, "SIGTERM", 143),
])
def test_a_sweep_s_exit_status_says_what_it_could_not_do(counts, interrupted, terminated_by, code):
    from collections import Counter

    from jobs import sweep as sweep_job
    from orchestrator.record import SweepOutcome

    outcome = SweepOutcome(sweep_id=SWEEP, run_root=Path("."), tracking_uri=None, counts=Counter(counts),
                           interrupted=interrupted, terminated_by=terminated_by)
    assert sweep_job.exit_code(outcome) == code


def test_a_sweep_of_gpu_cells_on_a_machine_without_that_gpu_exits_4_saying_why(tmp_path, capsys):
    from jobs import sweep as sweep_job

    code = sweep_job.main(["~sweep", "grid.hardware=[h100]", "grid.backend=[reference]", "grid.method=[random]",
                           "grid.workload=[shape-2h]", "grid.seq_k=[0.5]", "progress=false", "mlflow.enabled=false",
                           "ray.num_cpus=1", "ray.num_gpus=0", f"run_root={tmp_path}"])
    out, err = capsys.readouterr()
    assert code == sweep_job.EXIT_NOTHING_PLACED == 4
    assert "unschedulable 2 cells (h100/reference): no alive Ray node has a GPU labelled" in " ".join(err.split())
    assert " report --run-root " not in out and "unschedulable 2 cells" not in out  # the reason is on stderr
