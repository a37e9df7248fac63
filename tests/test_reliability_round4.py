"""Issue 48 (round 4), item 3: each defect of the 835-case probe at its mechanism, and item 4, size bounds checked
before any work. Each test fails on ca178fe. (Items 1 and 2, the verdicts, are ``tests/test_compare_aa.py``.)"""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from jobs import cli
from orchestrator import dataset, record, run_root, sqlite_store, tracking
from wavealign import fingerprint, launch_order, masks
from wavealign.masks import svg2
from wavealign.records import Cell, CellResult

CPU_GRID = ["~sweep", "grid.hardware=[cpu]", "grid.backend=[reference]", "grid.method=[planted]",
            "grid.workload=[shape-2h]", "grid.seq_k=[1]", "grid.variant=[original,wavealign]"]
SWEEP_A, SWEEP_B = "aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb"


def one_line(argv: list[str], capsys) -> str:
    """``wavealign <argv>`` refuses with exit 2 and one stderr line (no traceback); that line."""
    assert cli.main(argv) == cli.EXIT_BAD_INPUT
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"wavealign {argv[0]}: "), err
    return err


# --- curve: the cached order is never handed out ---

def test_writing_into_a_one_head_curve_order_leaves_every_later_plan_of_that_latent_whole():
    latent, block = (3, 5, 7), 16
    mb = -(-latent[0] * latent[1] * latent[2] // block)
    mask = torch.ones(1, mb, mb, dtype=torch.bool)

    def plan() -> launch_order.RowOrder:
        return launch_order.plan(mask, wave_size=3, stages="spatial", seed=0, reorderer="curve", latent=latent,
                                 block_size=block)

    first = plan()
    expected = first.perm.clone()
    first.perm.zero_()  # a caller writing into the order it was given
    assert torch.equal(plan().perm, expected)


# --- secrets: an environment variable is never read into what a sweep records ---

@pytest.mark.parametrize("override", ["name=${oc.env:WAVEALIGN_TEST_SECRET}",
                                      "mlflow.experiment=x${oc.env:WAVEALIGN_TEST_SECRET,dflt}"])
def test_an_environment_interpolation_in_the_sweep_config_is_refused_without_its_value(override, capsys,
                                                                                        monkeypatch):
    monkeypatch.setenv("WAVEALIGN_TEST_SECRET", "hunter2")
    err = one_line(["sweep", "--dry-run", *CPU_GRID, override, "run_root=/nonexistent/never"], capsys)
    assert "reads the environment variable WAVEALIGN_TEST_SECRET" in err and "hunter2" not in err


# --- compare: its output and the run roots it reads ---

def _rows(sweep_id: str, ms: float) -> list[dict]:
    rows = []
    for tokens in (512, 1024, 2048):
        cell = Cell.from_flat(dict(cell_id=f"c{tokens}", group_id=f"g{tokens}", hardware="cpu",
                                   profile_hardware="h100", backend="reference", method="random",
                                   variant="original", stages="none", skip="force", workload="shape",
                                   seq_len_tokens=tokens, num_heads=1, head_dim=16, block_size=128, wave_size=4,
                                   reps=4, warmup=0))
        result = CellResult(cell.cell_id, cell.group_id, "done", kernel_ms_median=ms,
                            kernel_ms_reps=[ms, ms * 1.001, ms * 0.999, ms])
        rows.append(dataset.make_row(cell, result, sweep_id=sweep_id, sweep_name="s"))
    return rows


@pytest.fixture
def two_roots(tmp_path) -> tuple[Path, Path]:
    a, b = tmp_path / "a", tmp_path / "b"
    dataset.write(a, _rows(SWEEP_A, 2.0))
    dataset.write(b, _rows(SWEEP_B, 2.0))
    return a, b


def test_compare_replaces_a_link_planted_at_compare_csv_and_never_writes_through_it(two_roots, tmp_path, capsys):
    a, b = two_roots
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "compare.csv").symlink_to(victim)
    cli.main(["compare", str(a), str(b), "--out", str(out)])
    assert victim.read_text() == "keep me\n"
    assert not (out / "compare.csv").is_symlink() and "ratio" in (out / "compare.csv").read_text()


def test_compare_s_default_folder_is_new_each_time_so_the_next_one_overwrites_nothing(two_roots, capsys):
    a, b = two_roots
    folders = []
    for _ in range(2):
        cli.main(["compare", str(a), str(b)])
        folders.append(re.search(r"compare: (\S+)compare\.csv", capsys.readouterr().out).group(1))
    assert folders[0] != folders[1] and all(Path(f).parent == b / "compare" for f in folders)
    assert all((Path(f) / "compare.csv").is_file() for f in folders)


def _newer_file(root: Path) -> Path:
    """A results file as a later version of the dataset writes it: schema v+1, a column this one lacks."""
    table = dataset.read_files(root, dataset.trusted_files(root))
    table = table.drop_columns(list(dataset.PARTITION_COLUMNS))
    table = table.set_column(table.schema.get_field_index("schema_version"), "schema_version",
                             pa.array([dataset.SCHEMA_VERSION + 1] * table.num_rows, pa.int32()))
    table = table.append_column("order_candidate", pa.array(["x"] * table.num_rows))
    path = root / "results" / "hardware=cpu" / "method=random" / "part-newer.parquet"
    pq.write_table(table, path)
    return path


def test_a_newer_dataset_version_s_file_is_left_where_it_is_and_named(two_roots, capsys, caplog):
    a, b = two_roots
    newer = _newer_file(b)
    cli.main(["compare", str(a), str(b), "--out", str(b.parent / "out")])
    assert newer.is_file() and not (b / "results" / dataset.QUARANTINE).exists()
    assert any("written by a newer wavealign" in r.getMessage() for r in caplog.records)


def test_a_parquet_file_made_to_expand_is_refused_from_its_footer_within_a_second_and_a_few_mib(tmp_path):
    import tracemalloc

    root = tmp_path / "runs"
    dataset.write(root, _rows(SWEEP_A, 2.0))
    table = dataset.read(root).drop_columns(list(dataset.PARTITION_COLUMNS)).slice(0, 1)
    huge = "x" * (dataset.MIN_EXPANSION_BYTES + 2 ** 20)  # 65 MiB of one letter: zstd makes it a few KB
    table = table.set_column(table.schema.get_field_index("traceback"), "traceback", pa.array([huge], pa.string()))
    path = root / "results" / "hardware=cpu" / "method=random" / "part-bomb.parquet"
    pq.write_table(table, path, compression="zstd", use_dictionary=False)
    del huge, table
    assert path.stat().st_size < 2 ** 20
    tracemalloc.start()
    reason = dataset.untrusted_reason(path, path.relative_to(dataset.results_dir(root)))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert "made to expand" in reason and peak < 4 * 2 ** 20


# --- sweep config: refused in one line before any work ---

@pytest.mark.parametrize(("override", "needle"), [
    ("grid.ncu=no", "grid.ncu is a switch; expected grid.ncu=true or grid.ncu=false"),
    ("extra_grids=[]", "extra_grids is a map; expected extra_grids={name: ...} (extra_grids={} for none)"),
    ("grid.method_params=[]", "grid.method_params is a map"),
    ("+grid.method_params.svg2.q_clusters=1000000000", "q_clusters must be >= 1 and <= 16384"),
    ("+grid.method_params.svg2.iters=1000000000", "iters must be >= 1 and <= 1000"),
])
def test_a_bad_value_is_one_line_and_exit_2_before_any_work(override, needle, capsys):
    grid = CPU_GRID if "svg2" not in override else [
        *CPU_GRID[:3], f"grid.method=[{override.split('.')[2]}]", "grid.workload=[wan1.3b-480p-2h]",
        "grid.seq_k=[3]", *CPU_GRID[6:]]
    err = one_line(["sweep", "--dry-run", *grid, override, "run_root=/nonexistent/never"], capsys)
    assert needle in err


def test_curve_on_a_workload_without_a_latent_video_is_refused_by_dry_run_not_failed_by_its_cells(capsys):
    err = one_line(["sweep", "--dry-run", *CPU_GRID, "grid.reorderer=[curve]", "run_root=/nonexistent/never"],
                   capsys)
    assert "'curve', which orders blocks by their place in the latent video" in err and "shape-2h" in err


@pytest.mark.parametrize(("method", "params", "needle"), [
    ("svg2", {"q_clusters": 10 ** 9}, "q_clusters must be >= 1 and <= 16384"),
    ("svg2", {"iters": 10 ** 9}, "iters must be >= 1 and <= 1000"),
])
def test_svg2_sizes_are_refused_by_the_library_before_any_allocation(method, params, needle):
    q = torch.randn(1, 1, 256, 16)
    with pytest.raises(ValueError, match=re.escape(needle)):  # the bound's words: no allocation was tried
        masks.build_ordered(method, q, q, q, block_size=64, **params)


def test_svg2_k_means_refuses_more_clusters_or_rounds_than_its_bounds():
    x = torch.randn(1, 64, 8)
    with pytest.raises(ValueError, match="clusters must be >= 1 and <= 16384"):
        svg2.kmeans(x, svg2.MAX_CLUSTERS + 1, 1)
    with pytest.raises(ValueError, match="iters must be >= 1 and <= 1000"):
        svg2.kmeans(x, 4, svg2.MAX_ITERS + 1)


def test_a_radial_latent_of_ten_million_frames_is_refused_before_its_mask_is_drawn():
    with pytest.raises(ValueError, match=r"latent\[0\] must be >= 1 and <= 16384"):
        masks.get("radial").from_shape(1, 78125, 78125, block_size=128, decay_factor=1.0, model_type="wan",
                                       latent=(10 ** 7, 1, 1))


def test_a_latent_of_more_tokens_than_the_bound_is_refused_naming_the_product():
    from wavealign.masks._common import MAX_LATENT_TOKENS, check_latent

    with pytest.raises(ValueError, match=f"at most {MAX_LATENT_TOKENS:,} tokens"):
        check_latent("latent", (16384, 16384, 1))


# --- the user config folder: a FIFO never hangs a command ---

def test_a_fifo_named_yaml_in_the_user_config_folder_does_not_hang_the_code_fingerprint(tmp_path, monkeypatch):
    monkeypatch.setenv("WAVEALIGN_HOME", str(tmp_path))
    (tmp_path / "profiles").mkdir()
    os.mkfifo(tmp_path / "profiles" / "h100.yaml")
    fingerprint.code_version.cache_clear()
    found: list[str] = []
    worker = threading.Thread(target=lambda: found.append(fingerprint.code_version()), daemon=True)
    worker.start()
    worker.join(timeout=30)
    fingerprint.code_version.cache_clear()
    if worker.is_alive():  # unblock the reader so the test process can end: open the FIFO's writing end once
        with open(tmp_path / "profiles" / "h100.yaml", "w"):
            pass
    assert found and ".user" not in found[0]  # answered, and the FIFO is not taken for an installed profile


# --- the library: tensors without values ---

def test_xattention_on_meta_tensors_is_refused_naming_them():
    q = torch.empty(1, 2, 1024, 64, device="meta")
    with pytest.raises(ValueError, match="q, k, v must hold values, got tensors on the meta device"):
        masks.build("xattention", q, q, q)


# --- MLflow: a sweep that measured nothing is not FINISHED ---

def test_a_sweep_whose_every_cell_was_unschedulable_ends_its_parent_run_failed_saying_why(tmp_path):
    from mlflow.tracking import MlflowClient

    folder = record.sweep_folder(tmp_path, SWEEP_A)
    folder.mkdir(parents=True)
    outcome = record.SweepOutcome(sweep_id=SWEEP_A, run_root=tmp_path, tracking_uri=None)
    outcome.counts.update(unschedulable=4)
    record.write_run_record(folder, outcome, {})
    tracker = tracking.Tracker(tracking.default_tracking_uri(tmp_path), "wavealign", run_root=tmp_path)
    parent = tracker.parent_run(SWEEP_A, "s")
    record.end_parent_run(tracker, parent, tmp_path, SWEEP_A, sweep_rows=[])
    run = MlflowClient(tracking.default_tracking_uri(tmp_path)).get_run(parent)
    assert run.info.status == "FAILED"
    assert run.data.tags[tracking.STATUS_REASON_TAG] == "no cell done (4 unschedulable)"


def test_a_sweep_with_a_cell_done_still_ends_finished():
    assert record.ended_status({"interrupted": False, "counts": {"done": 1, "unschedulable": 3}}) == "FINISHED"
    assert record.ended_status({"interrupted": False, "counts": {}, "skipped_done": 4}) == "FINISHED"


# --- report on a run root that cannot be written ---

@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through any file mode: no read-only store to meet")
def test_a_read_only_run_root_s_store_is_read_as_it_stands(tmp_path):
    root = tmp_path / "runs"
    dataset.write(root, _rows(SWEEP_A, 2.0))
    tracking.Tracker(tracking.default_tracking_uri(root), "wavealign", run_root=root)
    moved = tmp_path / "moved"
    root.rename(moved)  # a copied run root: its store's artifact locations name the old place
    for path in [moved, *moved.rglob("*")]:
        path.chmod(path.stat().st_mode & ~0o222)
    try:
        assert sqlite_store.relocate(moved / run_root.STORE, moved) == 0
    finally:
        for path in [moved, *moved.rglob("*")]:
            path.chmod(path.stat().st_mode | 0o200)


@pytest.mark.parametrize("override", ["extra_grids=[]", "grid.ncu=no", "name=${oc.env:HOME}"])
def test_a_command_line_refusal_comes_before_torch_ray_or_mlflow_load(override):
    import subprocess
    import sys

    code = ("import sys\nfrom jobs import cli\n"
            f"status = cli.main(['sweep', '--dry-run', {override!r}, 'run_root=/nonexistent/never'])\n"
            "print(status, *(name in sys.modules for name in ('torch', 'ray', 'mlflow')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.stdout.split() == [str(cli.EXIT_BAD_INPUT), "False", "False", "False"], done.stderr


def test_a_sweep_s_own_read_leaves_a_later_schema_version_s_file_in_place_and_reads_the_rest(two_roots):
    _, b = two_roots
    newer = _newer_file(b)
    assert dataset.read(b).num_rows == 3  # this version's rows; the later one's file is left out, not moved
    assert newer.is_file() and not (b / "results" / dataset.QUARANTINE).exists()


def test_an_embedded_ray_that_cannot_start_is_one_line_and_exit_2_not_ray_s_traceback(tmp_path, capsys,
                                                                                       monkeypatch):
    # a real start-up failure of Ray's own: its temp folder under a file (under load it is its raylet's 30 s)
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / "a-file" / "ray"))
    monkeypatch.setenv("RAY_ADDRESS", "local")
    err = one_line(["sweep", *CPU_GRID, f"run_root={tmp_path / 'runs'}", "mlflow.enabled=false", "progress=false"],
                   capsys)
    assert "the embedded Ray did not start: NotADirectoryError" in err and "load " in err
