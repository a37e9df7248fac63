"""Damaged and foreign files in a run root (issue 32): a results file is read only once it was read whole and its
schema checked against ours, otherwise quarantined with its reason; run records, the recorder's flush and the
sqlite MLflow store survive interruption; a copied run root writes only into itself; full or read-only storage is
one line; ids read from files never name a path outside the run root."""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from mlflow.tracking import MlflowClient

from jobs import cli, report, sync_mlflow
from jobs import sweep as sweep_job
from orchestrator import dataset, files, record, sqlite_store, tracking
from wavealign import pipeline
from wavealign.records import Cell

REPO = Path(__file__).resolve().parent.parent
SWEEP = "0123456789abcdef"  # a sweep id of plan.sweep_id's format


def _cells(n: int, start: int = 0) -> list[Cell]:
    return [Cell.from_flat(dict(cell_id=f"c{i}", group_id=f"g{i}", hardware="cpu", profile_hardware="h100",
                                backend="reference", method="random", variant="original", stages="none",
                                skip="force", workload="shape-2h", seq_len_tokens=256, num_heads=1, head_dim=16,
                                block_size=128, wave_size=4, reps=1, warmup=0,
                                method_params={"density": 0.5, "seed": i})) for i in range(start, start + n)]


def _rows(n: int, start: int = 0) -> list[dict]:
    return [dataset.make_row(c, pipeline.run_cell(c), sweep_id=SWEEP, sweep_name="t") for c in _cells(n, start)]


def _flip_bytes(path: Path) -> None:
    """400 bytes inverted at 10 % into the file: inside its data pages, the footer intact."""
    data = bytearray(path.read_bytes())
    start = len(data) // 10
    data[start:start + 400] = bytes(b ^ 0xFF for b in data[start:start + 400])
    path.write_bytes(bytes(data))


def _rewrite(path: Path, change) -> None:
    """The file's table, changed by ``change``, written back as a valid Parquet file."""
    pq.write_table(change(pq.read_table(path)), path)


def _set_column(name: str, values: pa.Array):
    return lambda t: t.set_column(t.schema.get_field_index(name), name, values)


DAMAGE = {
    "bit flips in its data pages": (_flip_bytes, "unreadable"),
    "cut short": (lambda p: p.write_bytes(p.read_bytes()[:100]), "unreadable"),
    "zero bytes": (lambda p: p.write_bytes(b""), "unreadable"),
    "status as int64": (lambda p: _rewrite(p, _set_column("status", pa.array([7], pa.int64()))),
                        "column 'status' is int64; expected string"),
    "kernel_ms_median as text": (
        lambda p: _rewrite(p, _set_column("kernel_ms_median", pa.array(["fast"]))),
        "column 'kernel_ms_median' is string; expected double"),
    "no sweep_id column": (lambda p: _rewrite(p, lambda t: t.drop_columns(["sweep_id"])), "no 'sweep_id' column"),
    "a column not ours": (lambda p: _rewrite(p, lambda t: t.append_column("bogus", pa.array([1]))),
                          "column 'bogus' is not in dataset schema"),
    "a sweep_id naming a folder elsewhere": (
        lambda p: _rewrite(p, _set_column("sweep_id", pa.array(["../../../../tmp/x/secretdir"]))),
        "sweep_id '../../../../tmp/x/secretdir' is not a sweep id"),
    "a status not ours": (lambda p: _rewrite(p, _set_column("status", pa.array(["maybe"]))),
                          "status ['maybe']; expected one of"),
}
# a schema version from the future is no damage: left in place, unread (tests/test_reliability_round4.py)


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_results_file_not_read_whole_as_ours_is_quarantined_with_its_reason_and_the_rest_read(
        tmp_path, damage, caplog):
    victim, keep = dataset.write(tmp_path, _rows(1)) + dataset.write(tmp_path, _rows(1, start=1))
    damage_file, reason = DAMAGE[damage]
    damage_file(victim)
    with caplog.at_level(logging.WARNING):
        table = dataset.read(tmp_path)
    assert table.column("cell_id").to_pylist() == ["c1"]
    moved = tmp_path / "results" / dataset.QUARANTINE / victim.relative_to(tmp_path / "results")
    assert moved.is_file() and not victim.exists() and keep.exists()
    assert reason in moved.with_name(moved.name + dataset.REASON_SUFFIX).read_text()
    assert str(victim) in caplog.text and reason in caplog.text


def test_a_file_outside_the_partition_folders_is_quarantined(tmp_path):
    (written,) = dataset.write(tmp_path, _rows(1))
    stray = tmp_path / "results" / "part-loose.parquet"
    shutil.copy(written, stray)
    assert dataset.read(tmp_path).num_rows == 1
    reason = (tmp_path / "results" / dataset.QUARANTINE / (stray.name + dataset.REASON_SUFFIX)).read_text()
    assert "not in a hardware=<value>/method=<value> folder" in reason


def test_a_file_damaged_after_it_was_trusted_is_caught_by_its_page_checksums(tmp_path):
    (victim,) = dataset.write(tmp_path, _rows(2))
    dataset.write(tmp_path, _rows(1, start=2))
    assert dataset.read(tmp_path).num_rows == 3  # both trusted in this process
    data = bytearray(victim.read_bytes())
    start = len(data) // 10
    data[start:start + 400] = bytes(b ^ 0xFF for b in data[start:start + 400])
    stat = victim.stat()
    victim.write_bytes(bytes(data))
    os.utime(victim, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same size and time: only the pages differ
    assert dataset.read(tmp_path).column("cell_id").to_pylist() == ["c2"]


def test_the_commands_go_on_past_a_damaged_file(tmp_path, capsys):
    victim = dataset.write(tmp_path, _rows(1))[0]
    dataset.write(tmp_path, _rows(1, start=1))
    _rewrite(victim, lambda t: t.drop_columns(["sweep_id"]))  # crashed the start-up sync before
    assert sync_mlflow.main([f"run_root={tmp_path}"]) == 0
    assert "logged 1 missing rows over 1 sweeps" in capsys.readouterr().out
    import analysis

    assert analysis.load(tmp_path)["cell_id"].tolist() == ["c1"]


def test_an_interrupted_flush_writes_the_same_file_again_never_a_second_copy(tmp_path, monkeypatch):
    from omegaconf import OmegaConf

    cfg = OmegaConf.create({"run_root": str(tmp_path), "name": "t", "batch_cells": 32, "overrides": []})
    recorder = record.Recorder(cfg, type("Plan", (), {"sweep_id": SWEEP})(), None, None)
    real_write = dataset.write

    def write_then_interrupt(run_root, rows):
        real_write(run_root, rows)
        monkeypatch.setattr(dataset, "write", real_write)
        raise KeyboardInterrupt  # after the rename, before the buffer is cleared

    monkeypatch.setattr(dataset, "write", write_then_interrupt)
    for row in _rows(2):
        recorder.buffer.append(row)
    with pytest.raises(KeyboardInterrupt):
        recorder.flush()
    recorder.flush()
    table = dataset.read(tmp_path)
    assert sorted(table.column("cell_id").to_pylist()) == ["c0", "c1"]


def _run_record(folder: Path, name: str, interrupted: bool) -> Path:
    return files.write_whole(folder / name, json.dumps({"interrupted": interrupted, "counts": {}}))


def test_a_damaged_run_record_is_skipped_with_its_name_and_the_one_before_it_taken(tmp_path, caplog):
    _run_record(tmp_path, "run-20260101T000000.json", interrupted=False)
    empty = tmp_path / "run-20260102T000000.json"
    empty.write_bytes(b"")
    with caplog.at_level(logging.WARNING):
        assert record.latest_run_record(tmp_path) == {"interrupted": False, "counts": {}}
    assert f"skipped the damaged run record {empty}" in caplog.text


def test_a_run_record_is_written_whole_as_owner_and_group_only(tmp_path):
    outcome = record.SweepOutcome(sweep_id=SWEEP, run_root=tmp_path, tracking_uri=None)
    record.write_run_record(tmp_path, outcome, {})
    (path,) = tmp_path.glob("run-*.json")
    assert json.loads(path.read_text())["sweep_id"] == SWEEP
    assert path.stat().st_mode & 0o777 == files.FILE_MODE
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary left behind


def test_an_id_that_would_name_a_folder_outside_the_run_root_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"sweep_id '\.\./\.\./x' is not a sweep id \(16 lowercase hex digits\)"):
        record.sweep_folder(tmp_path, "../../x")
    with pytest.raises(ValueError, match=r"sweep_id must be 16 lowercase hex digits, got '\.\./x'"):
        dataset.make_row(_cells(1)[0], None, sweep_id="../x", sweep_name="t", status="failed")


def test_a_foreign_sweep_id_s_folder_never_reaches_the_mlflow_store(tmp_path):
    secret = tmp_path / "elsewhere" / "secretdir"
    secret.mkdir(parents=True)
    (secret / "config.yaml").write_text("password: hunter2\n")
    root = tmp_path / "runs"
    (victim,) = dataset.write(root, _rows(1))
    relative = "../" * (len(root.parts) + 2) + str(secret).lstrip("/")
    _rewrite(victim, _set_column("sweep_id", pa.array([relative])))
    dataset.write(root, _rows(1, start=1))
    assert sync_mlflow.main([f"run_root={root}"]) == 0
    artifacts = [p.read_text() for p in (root / "mlartifacts").rglob("*") if p.is_file()]
    assert not any("hunter2" in text for text in artifacts)


# --- the sqlite MLflow store ---

def _half_built(path: Path) -> None:
    """A store as a driver stopped half-way through MLflow's migrations leaves it: tables of a later revision
    created, its schema revision an early one (what `table trace_info already exists` came from)."""
    sqlite_store.prepare(f"sqlite:///{path}")
    with sqlite3.connect(path) as db:
        db.execute("UPDATE alembic_version SET version_num = 'bf29a5ff90ea'")


def test_a_half_built_store_is_named_and_the_sweep_records_to_parquet_only(tmp_path):
    _half_built(tmp_path / "mlflow.db")
    tracker = tracking.Tracker(tracking.default_tracking_uri(tmp_path), "wavealign", run_root=tmp_path)
    assert not tracker.available
    assert tracker.down_reason.startswith(f"the store {tmp_path / 'mlflow.db'} is half-built or of another MLflow")
    assert f"wavealign sync-mlflow run_root={tmp_path}" in tracker.down_reason


def test_sync_mlflow_sets_a_half_built_store_aside_and_rebuilds_it_from_parquet(tmp_path, capsys):
    dataset.write(tmp_path, _rows(2))
    store = tmp_path / "mlflow.db"
    _half_built(store)
    assert sync_mlflow.main([f"run_root={tmp_path}"]) == 0
    out = capsys.readouterr().out
    assert "logged 2 missing rows" in out and f"the store {store} is half-built" in out
    (kept,) = tmp_path.glob("mlflow.db.unusable-*")
    assert sqlite_store.problem(kept) is not None and sqlite_store.problem(store) is None


# SQLite's rollback journal once synced: a transaction a killed process left half-written in the database file
_HOT_JOURNAL_MAGIC = bytes.fromhex("d9d505f920a163d7")


def _killed_mid_commit(store: Path, journal_mode: str = "delete") -> None:
    """A store as a driver SIGKILLed inside one of MLflow's commits leaves it (a loaded disk makes the commit's
    syncs long, so a kill lands there): pages of its transaction in the file, the journal to undo them beside it; or,
    in write-ahead-log mode, a committed table (``committed``) that lives only in the log beside the file."""
    code = ("import sqlite3, sys\ndb = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
            f"db.execute('PRAGMA journal_mode = {journal_mode}')\ndb.execute('PRAGMA cache_size = 1')\n"
            "db.execute('CREATE TABLE committed (x)')\n"
            "db.execute('BEGIN')\ndb.execute('CREATE TABLE half_done (x)')\n"
            "db.executemany('INSERT INTO half_done VALUES (zeroblob(4000))', [()] * 200)\n"
            "print('written', flush=True)\nsys.stdin.read()\n")
    writer = subprocess.Popen([sys.executable, "-c", code, str(store)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    assert writer.stdout.readline() == "written\n"
    writer.kill()
    writer.wait()
    if journal_mode == "wal":
        assert (store.parent / f"{store.name}-wal").stat().st_size > 0
    else:
        assert (store.parent / f"{store.name}-journal").read_bytes()[:8] == _HOT_JOURNAL_MAGIC


def test_a_store_a_driver_was_killed_writing_to_is_rolled_back_and_logs_every_row(tmp_path):
    dataset.write(tmp_path, _rows(2))
    uri = tracking.default_tracking_uri(tmp_path)
    tracking.Tracker(uri, "wavealign", run_root=tmp_path)  # the killed driver's store, made whole
    _killed_mid_commit(tmp_path / "mlflow.db")
    tracker = tracking.Tracker(uri, "wavealign", run_root=tmp_path)  # the resumed driver's
    assert tracker.available, tracker.down_reason
    assert record.sync(tmp_path, tracker) == {SWEEP: 2}
    assert tracker.logged_result_ids(SWEEP) == {r["result_id"] for r in dataset.read(tmp_path).to_pylist()}


@pytest.mark.parametrize("journal_mode", ["delete", "wal"])
def test_a_store_set_aside_takes_its_journal_so_the_rebuilt_one_never_rolls_it_in(tmp_path, journal_mode):
    store = tmp_path / "mlflow.db"
    sqlite_store.prepare(f"sqlite:///{store}")
    _killed_mid_commit(store, journal_mode)
    side = {p.name.removeprefix(store.name): p.read_bytes() for p in tmp_path.glob(f"{store.name}-*")}
    kept = sqlite_store.set_aside(store)
    assert {p.name.removeprefix(kept.name): p.read_bytes() for p in tmp_path.glob(f"{kept.name}-*")} == side
    assert not list(tmp_path.glob(f"{store.name}-*"))
    sqlite_store.prepare(f"sqlite:///{store}")  # rebuilt in its place, as sync-mlflow does
    assert sqlite_store.problem(store) is None and sqlite_store.problem(kept) is None
    with contextlib.closing(sqlite3.connect(kept)) as db:  # the store set aside as its last commit left it
        tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "committed" in tables and "half_done" not in tables


def test_a_store_interrupted_while_it_is_made_leaves_no_store_behind(tmp_path, monkeypatch):
    import mlflow.store.db.utils as db_utils

    def interrupted(engine):
        raise KeyboardInterrupt

    monkeypatch.setattr(db_utils, "_upgrade_db", interrupted)  # a SIGTERM in the middle of the migrations
    with pytest.raises(KeyboardInterrupt):
        sqlite_store.prepare(f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_two_drivers_making_one_fresh_store_at_once_both_use_it(tmp_path):
    uri = f"sqlite:///{tmp_path / 'shared' / 'mlflow.db'}"
    code = ("import sys\nfrom orchestrator import sqlite_store\nfrom mlflow.tracking import MlflowClient\n"
            "sqlite_store.prepare(sys.argv[1])\nMlflowClient(sys.argv[1]).create_experiment(sys.argv[2])\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, uri, f"e{i}"], cwd=REPO, stderr=subprocess.PIPE,
                              text=True) for i in range(2)]
    errors = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errors
    assert {e.name for e in MlflowClient(uri).search_experiments()} >= {"e0", "e1"}


def test_a_made_store_is_owner_and_group_only(tmp_path):
    sqlite_store.prepare(f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path)
    assert (tmp_path / "mlflow.db").stat().st_mode & 0o777 == files.FILE_MODE


def test_a_copied_run_root_s_report_is_logged_into_the_copy_not_the_original(tmp_path, capsys):
    original, copy = tmp_path / "original", tmp_path / "copy"
    dataset.write(original, _rows(2))
    assert sync_mlflow.main([f"run_root={original}"]) == 0
    shutil.copytree(original, copy)
    before = sorted(p.relative_to(original) for p in (original / "mlartifacts").rglob("*"))
    assert report.main(["--run-root", str(copy)]) == 0
    assert sorted(p.relative_to(original) for p in (original / "mlartifacts").rglob("*")) == before
    assert list((copy / "mlartifacts").rglob("report/report.html"))
    run = MlflowClient(tracking.default_tracking_uri(copy)).search_runs(
        [MlflowClient(tracking.default_tracking_uri(copy)).get_experiment_by_name("wavealign").experiment_id],
        "tags.`wavealign.kind` = 'sweep'")[0]
    assert run.info.artifact_uri.startswith(copy.resolve().as_uri() + "/")


# --- storage that refuses writes ---

@pytest.mark.parametrize("command", [["sweep", "~sweep"], ["bench-kernels", "~extra_grids.dense"]])
# (a run root no folder can be made at is refused before the config loads, exit 2: tests/test_newcomer_round3.py)
@pytest.mark.parametrize("obstacle", ["results is a file", ".lock is a folder"])
def test_a_run_root_that_cannot_be_written_is_one_line_before_any_work(tmp_path, obstacle, command, capsys):
    root = tmp_path / "runs"
    if obstacle == "results is a file":
        root.mkdir()
        (root / "results").write_text("")
        expected = f"cannot make the folder {root / 'results'}"
    elif obstacle == ".lock is a folder":
        (root / ".lock").mkdir(parents=True)
        expected = f"cannot open the lock file {root / '.lock'}"
    code = cli.main([*command, "grid.hardware=[cpu]", "grid.backend=[reference]", "grid.method=[random]",
                     "grid.workload=[shape-2h]", "grid.seq_k=[0.5]", "grid.variant=[original]",
                     "progress=false", "mlflow.enabled=false", f"run_root={root}"])
    err = capsys.readouterr().err
    assert code == sweep_job.EXIT_STORAGE_REFUSED
    assert err.startswith(f"wavealign {command[0]}: {expected}") and len(err.strip().splitlines()) == 1
    assert not (root / "sweeps").exists() or not list((root / "sweeps").iterdir())


def test_a_disk_that_fills_mid_sweep_ends_it_in_one_line_with_the_summary_and_what_finished_kept(
        tmp_path, monkeypatch, capsys):
    real_write, calls = pq.write_table, []

    def fills_up(table, where, **kwargs):
        calls.append(where)
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_write(table, where, **kwargs)

    monkeypatch.setattr(pq, "write_table", fills_up)
    monkeypatch.setenv("RAY_ADDRESS", "local")
    root = tmp_path / "runs"
    code = cli.main(["sweep", "~sweep", "grid.hardware=[cpu]", "grid.backend=[reference]", "grid.method=[random]",
                           "grid.workload=[shape-2h]", "grid.seq_k=[0.5]", "grid.seed=[0,1,2]",
                           "grid.variant=[original]", "grid.reps=1", "grid.warmup=0", "progress=false",
                           "mlflow.enabled=false", "ray.num_cpus=1", f"run_root={root}"])
    captured = capsys.readouterr()
    assert code == sweep_job.EXIT_STORAGE_REFUSED
    (line,) = [ln for ln in captured.err.splitlines() if ln.startswith("wavealign")]  # past Ray's own warnings
    assert line.startswith(f"wavealign sweep: cannot write {root / 'results'}") and "No space left on device" in line
    assert "this run: done 1" in captured.out  # the summary, of what reached Parquet
    assert dataset.read(root).num_rows == 1
    assert "Traceback" not in captured.out + captured.err


def test_a_storage_error_names_the_path_and_the_cause(tmp_path):
    error = files.storage_error(tmp_path / "x", OSError(errno.EROFS, "Read-only file system"))
    assert str(error) == f"cannot write {tmp_path / 'x'}: Read-only file system"


def test_every_file_written_whole_is_owner_and_group_only_and_leaves_no_temporary(tmp_path):
    files.write_whole(tmp_path / "a" / "config.yaml", "x: 1\n")
    assert (tmp_path / "a" / "config.yaml").stat().st_mode & 0o777 == files.FILE_MODE
    assert [p.name for p in (tmp_path / "a").iterdir()] == ["config.yaml"]


# --- many small results files ---

def test_a_sweep_s_small_files_are_merged_into_one_per_partition_with_every_row(tmp_path):
    written = [path for i in range(5) for path in dataset.write(tmp_path, _rows(1, start=i))]
    (merged,) = dataset.compact(written, chunk=2)  # 5 files, two at a time: three levels of merging
    assert [p for p in (tmp_path / "results").rglob("*.parquet")] == [merged]
    assert sorted(dataset.read(tmp_path).column("cell_id").to_pylist()) == ["c0", "c1", "c2", "c3", "c4"]


def test_a_merge_stopped_before_it_removed_what_it_merged_leaves_each_result_once(tmp_path, monkeypatch):
    written = [path for i in range(3) for path in dataset.write(tmp_path, _rows(1, start=i))]

    def stopped(self, missing_ok=False):
        raise KeyboardInterrupt  # the merged file is written, its sources not yet removed

    monkeypatch.setattr(Path, "unlink", stopped)
    with pytest.raises(KeyboardInterrupt):
        dataset.compact(written)
    monkeypatch.undo()
    assert len(list((tmp_path / "results").rglob("*.parquet"))) == 4
    assert sorted(dataset.read(tmp_path).column("cell_id").to_pylist()) == ["c0", "c1", "c2"]


def test_a_results_file_copied_under_another_name_is_read_once(tmp_path):
    (path,) = dataset.write(tmp_path, _rows(2))
    shutil.copy(path, path.with_name("part-copy.parquet"))
    assert dataset.read(tmp_path).num_rows == 2
    assert dataset.read(tmp_path, columns=["cell_id"]).column_names == ["cell_id"]
