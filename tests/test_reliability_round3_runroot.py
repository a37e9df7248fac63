"""A run root and its stores under issue 39's probe: one driver per run root even when ``.lock`` is deleted or
replaced; passwords with any URI-special character redacted and an unanswering server said in one line; no link
followed and no folder open to other users; rows and run records ordered by the run root's own sequence, not a
clock; a damaged, deleted or moved store of the running sweep said in one line; free space and a locked store
checked before any work. Every crafted file is made by its test."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from omegaconf import OmegaConf
from test_reliability_runs import _holder
from test_reliability_stores import SWEEP, _cells, _flip_bytes, _rows

from analysis.load import latest_per_configuration
from jobs import cli, sync_mlflow
from jobs import sweep as sweep_job
from orchestrator import dataset, files, lock, record, run_root, sqlite_store, tracking
from orchestrator.redact import redact

ONE_CELL = ["~sweep", "grid.hardware=[cpu]", "grid.backend=[reference]", "grid.method=[random]",
            "grid.workload=[shape-2h]", "grid.seq_k=[0.5]", "grid.variant=[original]", "grid.reps=1", "grid.warmup=0",
            "progress=false", "ray.num_cpus=1"]


# --- item 2: one driver per run root, whatever happens to .lock ---

@contextlib.contextmanager
def _held_elsewhere(run_root: Path):
    holder = _holder(run_root)
    try:
        yield holder
    finally:
        holder.kill()
        holder.wait()


def test_deleting_the_lock_file_under_a_running_driver_does_not_let_a_second_one_in(tmp_path, capsys):
    (tmp_path / "results").mkdir()
    with _held_elsewhere(tmp_path):
        (tmp_path / run_root.LOCK).unlink()
        with pytest.raises(lock.RunRootBusy), lock.hold(tmp_path, "wavealign sweep mine"):
            pass
        assert cli.main(["sync-mlflow", f"run_root={tmp_path}", "mlflow.enabled=false"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "is in use by" in err


def test_replacing_the_lock_file_does_not_let_a_second_driver_in(tmp_path):
    with _held_elsewhere(tmp_path):
        (tmp_path / "other").write_text("{}")
        os.replace(tmp_path / "other", tmp_path / run_root.LOCK)
        with pytest.raises(lock.RunRootBusy, match="names no holder"), lock.hold(tmp_path, "wavealign sweep mine"):
            pass


def test_a_driver_of_an_earlier_version_holding_only_the_lock_file_is_not_run_beside(tmp_path):
    code = ("import fcntl, os, time\n"
            f"fd = os.open({str(tmp_path / run_root.LOCK)!r}, os.O_RDWR | os.O_CREAT)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('held', flush=True)\ntime.sleep(300)\n")
    earlier = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert earlier.stdout.readline().strip() == "held"
        with pytest.raises(lock.RunRootBusy, match="an earlier version"), lock.hold(tmp_path, "wavealign sweep t"):
            pass
    finally:
        earlier.kill()
        earlier.wait()


# --- item 3: one redaction, for every character a password may hold ---

@pytest.mark.parametrize("password", ["p@ssW0rdQQ", "a:b:c", "pa/ss/w", "it's", 'say"hi"', "100%25off", "h#sh",
                                      "why?not", "@:/'\"%#?"])
@pytest.mark.parametrize("where", ["{}", "mlflow.tracking_uri={} run_root=/r", "'{}'", '{{"command": "{}"}}'])
@pytest.mark.parametrize("user", ["alice", "alice@corp.example"])
def test_a_password_with_any_uri_special_character_is_redacted_whole(password, where, user):
    text = where.format(f"http://{user}:{password}@127.0.0.1:9/api")
    redacted = redact(text)
    assert password not in redacted and f"http://{user}:***@127.0.0.1:9/api" in redacted


@pytest.mark.parametrize(("text", "expected"), [
    ("https://h/p?key=abc123&x=1", "https://h/p?key=***&x=1"),
    ("https://h/p#access_token=abc123", "https://h/p#access_token=***"),
    ("https://h/p?a=1&token=abc123#x", "https://h/p?a=1&token=***#x"),
])
def test_query_and_fragment_secrets_are_redacted(text, expected):
    assert redact(text) == expected


def test_the_repro_command_and_the_lock_file_hold_no_password(tmp_path, monkeypatch):
    password = "p@ss:w/o'r\"d#?%"  # shlex quotes it: each argument is redacted before the command is joined
    uri = f"mlflow.tracking_uri=http://alice:{password}@127.0.0.1:9"
    cfg = OmegaConf.create({"overrides": [uri]})
    command = record.repro_command(cfg, _cells(1)[0])
    monkeypatch.setattr(sys, "argv", ["wavealign", "sweep", uri])
    with lock.hold(tmp_path, "wavealign sweep t") as path:
        note = path.read_text()
    for text in (command, note):
        assert "alice:***@127.0.0.1:9" in text and "w/o" not in text and "p@ss" not in text


def test_an_unanswering_tracking_server_is_one_line_without_its_password(tmp_path, capsys):
    dataset.write(tmp_path, _rows(1))
    code = sync_mlflow.main([f"run_root={tmp_path}", "mlflow.tracking_uri=http://alice:p@ss/w0rd@127.0.0.1:9"])
    err = capsys.readouterr().err
    assert code == 1 and len(err.strip().splitlines()) == 1
    assert "does not answer" in err and "p@ss" not in err and "w0rd" not in err


def test_a_report_on_an_experiment_of_an_unanswering_server_is_one_line_without_its_password(tmp_path, capsys):
    code = cli.main(["report", "--experiment", "wavealign", "--tracking-uri", "http://alice:p@ss/w0rd@127.0.0.1:9",
                     "--out", str(tmp_path / "report")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "does not answer" in err
    assert "p@ss" not in err and "w0rd" not in err


# --- item 4: no link followed in a run root; folders for the owner and group only ---

def test_a_lock_file_planted_as_a_link_is_not_followed(tmp_path):
    target = tmp_path / "victim.txt"
    target.write_text("keep me")
    target.chmod(0o644)
    root = tmp_path / "runs"
    root.mkdir()
    (root / run_root.LOCK).symlink_to(target)
    with pytest.raises(files.StorageError, match="symbolic link"), lock.hold(root, "wavealign sweep t"):
        pass
    assert target.read_text() == "keep me" and target.stat().st_mode & 0o777 == 0o644


@pytest.mark.parametrize("planted", run_root.WRITTEN_FOLDERS)
def test_a_top_folder_planted_as_a_link_is_refused_before_any_work(tmp_path, planted):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    root = tmp_path / "runs"
    root.mkdir()
    (root / planted).symlink_to(elsewhere)
    with pytest.raises(files.StorageError, match="symbolic link"):
        files.check_writable(root, run_root.WRITTEN_FOLDERS)


def test_rows_are_never_written_through_a_link_inside_a_held_run_root(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    root = tmp_path / "runs"
    (root / "results").mkdir(parents=True)
    (root / "results" / "hardware=cpu").symlink_to(elsewhere)
    with lock.hold(root, "wavealign sweep t"), pytest.raises(files.StorageError, match="symbolic link"):
        dataset.write(root, _rows(1))
    assert list(elsewhere.iterdir()) == []


def test_a_link_under_results_is_quarantined_not_read(tmp_path):
    outside = tmp_path / "outside.parquet"
    dataset.write(tmp_path / "other", _rows(1))
    shutil.copy(next((tmp_path / "other" / "results").rglob("*.parquet")), outside)
    folder = tmp_path / "runs" / "results" / "hardware=cpu" / "method=random"
    folder.mkdir(parents=True)
    (folder / "part-x.parquet").symlink_to(outside)
    assert dataset.read(tmp_path / "runs").num_rows == 0
    assert (tmp_path / "runs" / "results" / dataset.QUARANTINE / "hardware=cpu" / "method=random" /
            "part-x.parquet").is_symlink()


@pytest.mark.parametrize("umask", [0o000, 0o077])
def test_folders_are_owner_and_group_only_whatever_the_umask(tmp_path, umask):
    before = os.umask(umask)
    try:
        with lock.hold(tmp_path / "runs", "wavealign sweep t"):
            dataset.write(tmp_path / "runs", _rows(1))
            os.makedirs(tmp_path / "runs" / "mlartifacts" / "made-by-mlflow")  # a library's own folder, no mode
    finally:
        os.umask(before)
    ours = [tmp_path / "runs", *(p for p in (tmp_path / "runs" / "results").rglob("*") if p.is_dir())]
    assert [p.name for p in ours] == ["runs", "hardware=cpu", "method=random"]
    assert {oct(p.stat().st_mode & 0o777) for p in [*ours, tmp_path / "runs" / "results"]} == {oct(0o750)}
    for library_made in (tmp_path / "runs" / "mlartifacts", tmp_path / "runs" / "mlartifacts" / "made-by-mlflow"):
        assert library_made.stat().st_mode & 0o027 == 0  # neither group-writable nor for others


# --- item 6: order by the run root's own sequence, never the clock ---

A_YEAR_S = 366 * 24 * 3600


def _rerun(row: dict, run_seq: int, recorded_at: float, kernel_ms: float) -> dict:
    return {**row, "result_id": f"{row['result_id']}-{run_seq}", "run_seq": run_seq, "recorded_at": recorded_at,
            "kernel_ms_median": kernel_ms}


def test_the_newest_row_of_a_cell_is_the_later_run_even_under_a_clock_that_ran_ahead(tmp_path):
    (row,) = _rows(1)
    ahead = _rerun(row, 1, time.time() + A_YEAR_S, 1.0)  # measured under a clock a year ahead
    later = _rerun(row, 2, time.time(), 2.0)  # re-measured (force=true) on the true clock
    dataset.write(tmp_path, [ahead])
    dataset.write(tmp_path, [later])
    rows = dataset.read(tmp_path).to_pylist()
    assert tracking.sweep_metrics(rows, None)["cells_done"] == 1
    frame = latest_per_configuration(dataset.read(tmp_path).to_pandas())
    assert frame["kernel_ms_median"].tolist() == [2.0]


def _record(folder: Path, run_seq: int, interrupted: bool, gmtime: time.struct_time, monkeypatch) -> None:
    outcome = record.SweepOutcome(sweep_id=SWEEP, run_root=folder, tracking_uri=None, interrupted=interrupted)
    outcome.run_seq = run_seq
    monkeypatch.setattr(time, "gmtime", lambda *_: gmtime)
    record.write_run_record(folder, outcome, {})
    monkeypatch.undo()


def test_a_run_record_written_under_a_clock_ahead_is_not_taken_as_the_latest(tmp_path, monkeypatch):
    _record(tmp_path, 1, True, time.gmtime(time.time() + A_YEAR_S), monkeypatch)  # interrupted, clock ahead
    _record(tmp_path, 2, False, time.gmtime(), monkeypatch)  # the resume, which finished
    assert record.ended_status(record.latest_run_record(tmp_path)) == "FINISHED"


def test_a_new_run_is_numbered_past_every_row_and_run_record_of_the_run_root(tmp_path, monkeypatch):
    (row,) = _rows(1)
    dataset.write(tmp_path, [_rerun(row, 4, time.time(), 1.0)])
    _record(record.sweep_folder(tmp_path, SWEEP), 6, False, time.gmtime(), monkeypatch)
    assert record.next_run_seq(tmp_path) == 7


def test_rows_written_before_runs_were_numbered_read_as_older_than_any_numbered_row(tmp_path):
    (row,) = _rows(1)
    (path,) = dataset.write(tmp_path, [row])
    old = pq.read_table(path)
    old = old.drop_columns(["run_seq"]).set_column(0, "schema_version", pa.array([5], pa.int32()))
    pq.write_table(old, path, write_page_checksum=True)
    dataset.write(tmp_path, [_rerun(row, 1, time.time() - A_YEAR_S, 2.0)])
    table = dataset.read(tmp_path)
    assert sorted(table.column("run_seq").to_pylist()) == [0, 1]
    frame = latest_per_configuration(table.to_pandas())
    assert frame["kernel_ms_median"].tolist() == [2.0]


# --- item 9: the running sweep's own files damaged, deleted or moved ---

def _damage_in_place(path: Path) -> None:
    """Bit flips in the data pages, the file's size and times kept: no version change to notice it by."""
    stat = path.stat()
    _flip_bytes(path)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_a_damaged_file_of_the_running_sweep_is_quarantined_and_the_merge_goes_on(tmp_path, caplog):
    written = [p for i in range(3) for p in dataset.write(tmp_path, _rows(1, start=i))]
    _damage_in_place(written[1])
    (merged,) = dataset.compact(written)
    assert sorted(pq.read_table(merged).column("cell_id").to_pylist()) == ["c0", "c2"]
    assert not written[1].exists() and "moved" in caplog.text


def test_a_file_removed_under_the_sweep_is_left_out_of_what_mlflow_is_handed(tmp_path):
    first, second = dataset.write(tmp_path, _rows(1)) + dataset.write(tmp_path, _rows(1, start=1))
    first.unlink()
    assert dataset.read_written(tmp_path, [first, second]).column("cell_id").to_pylist() == ["c1"]


def test_a_run_root_moved_under_its_driver_stops_the_writes_in_one_line(tmp_path):
    root = tmp_path / "runs"
    with lock.hold(root, "wavealign sweep t"):
        dataset.write(root, _rows(1))
        root.rename(tmp_path / "moved")
        with pytest.raises(files.StorageError, match="moved or deleted while this driver held it"):
            dataset.write(root, _rows(1, start=1))
    assert not root.exists()


def test_results_deleted_under_the_driver_stops_the_writes_in_one_line(tmp_path):
    with lock.hold(tmp_path, "wavealign sweep t"):
        dataset.write(tmp_path, _rows(1))
        shutil.rmtree(tmp_path / "results")
        with pytest.raises(files.StorageError, match="results was deleted or replaced"):
            dataset.write(tmp_path, _rows(1, start=1))


def test_mlflow_child_runs_whose_rows_left_parquet_are_flagged(tmp_path, caplog):
    first, _ = dataset.write(tmp_path, _rows(1)) + dataset.write(tmp_path, _rows(1, start=1))
    tracker = tracking.Tracker(tracking.default_tracking_uri(tmp_path), "t", run_root=tmp_path)
    record.sync(tmp_path, tracker)
    first.unlink()
    with caplog.at_level(logging.WARNING):
        record.sync(tmp_path, tracker)
    assert "1 child run(s) of sweep" in caplog.text
    key, value = tracking.ORPHAN_TAG.split("=")
    flagged = tracker.client.search_runs([tracker.experiment_id], f"tags.`{key}` = '{value}'")
    assert [r.data.tags["wavealign.cell_id"] for r in flagged] == ["c0"]


def _second_write_does(fault: str, root: Path, real_write):
    """``pq.write_table`` that, before the sweep's second results file, does ``fault`` to the run root: the first
    file's data pages damaged in place (its size and times kept), ``results/`` deleted, or the run root moved."""
    calls = []

    def write(table, where, **kwargs):
        calls.append(where)
        if len(calls) == 2 and "results" in Path(where).parts:
            if fault == "damaged":
                _damage_in_place(next((root / "results").rglob("part-*.parquet")))
            elif fault == "deleted":
                shutil.rmtree(root / "results")
            else:
                root.rename(root.with_name("moved"))
        real_write(table, where, **kwargs)
    return write


@pytest.mark.parametrize("fault", ["damaged", "deleted", "moved"])
def test_a_run_root_damaged_deleted_or_moved_mid_sweep_ends_it_in_one_line_with_exit_5(
        tmp_path, monkeypatch, capsys, fault):
    root = tmp_path / "runs"
    monkeypatch.setattr(pq, "write_table", _second_write_does(fault, root, pq.write_table))
    monkeypatch.setenv("RAY_ADDRESS", "local")
    code = cli.main(["sweep", *ONE_CELL, "grid.seed=[0,1,2]", "batch_cells=1", f"run_root={root}"])
    captured = capsys.readouterr()
    assert code == sweep_job.EXIT_STORAGE_REFUSED
    (line,) = [ln for ln in captured.err.splitlines() if ln.startswith("wavealign")]  # past Ray's own warnings
    assert {"damaged": "are no longer in", "deleted": "was deleted or replaced",
            "moved": "was moved or deleted"}[fault] in line
    assert "Traceback" not in captured.out + captured.err
    if fault == "damaged":  # the other two rows kept; the lost one's child run marked, the parent run not FINISHED
        assert dataset.read(root).num_rows == 2
        tracker = tracking.Tracker(tracking.default_tracking_uri(root), "wavealign", run_root=root)
        runs = tracker.client.search_runs([tracker.experiment_id], "")
        key, value = tracking.ORPHAN_TAG.split("=")
        assert sum(r.data.tags.get(key) == value for r in runs) == 1
        assert {r.info.status for r in runs if r.data.tags.get(f"{tracking.TAG}kind") == "sweep"} == {"FAILED"}
    else:  # nothing written at the old place after the fault, in a second run root or elsewhere
        assert dataset.read(root).num_rows == 0


# --- item 10: storage checked before any work ---

def test_a_sweep_without_room_for_its_rows_is_refused_before_any_cell_runs(tmp_path, monkeypatch, capsys):
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda _: usage._replace(free=64 * 1024))
    monkeypatch.setenv("RAY_ADDRESS", "local")
    code = cli.main(["sweep", *ONE_CELL, f"run_root={tmp_path / 'runs'}"])
    err = capsys.readouterr().err
    assert code == sweep_job.EXIT_STORAGE_REFUSED
    assert len(err.strip().splitlines()) == 1 and "0.06 MiB free" in err and "needs about" in err
    assert dataset.read(tmp_path / "runs").num_rows == 0


@contextlib.contextmanager
def _locked(store: Path):
    """Another process holding ``store`` locked (an exclusive transaction) until the block ends."""
    code = (f"import sqlite3, time\ndb = sqlite3.connect({str(store)!r}, isolation_level=None)\n"
            "db.execute('BEGIN EXCLUSIVE')\nprint('locked', flush=True)\ntime.sleep(300)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "locked"
        yield
    finally:
        proc.kill()
        proc.wait()


def test_a_locked_store_is_called_locked_and_never_set_aside(tmp_path, capsys):
    dataset.write(tmp_path, _rows(1))
    store = tmp_path / run_root.STORE
    sqlite_store.create(store, tmp_path / "mlartifacts")
    with _locked(store):
        code = sync_mlflow.main([f"run_root={tmp_path}"])
    err = capsys.readouterr().err
    assert code == 1 and len(err.strip().splitlines()) == 1 and "is locked by another process" in err
    assert [p.name for p in tmp_path.glob("mlflow.db*")] == [run_root.STORE]
    with contextlib.closing(sqlite3.connect(store)) as db:
        assert db.execute("SELECT count(*) FROM alembic_version").fetchone() == (1,)
