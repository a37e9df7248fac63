"""Faults around a sweep's run root (issue 19): unreadable result files, two drivers, and SIGTERM never lose a
finished row nor stop the next command from working."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobs import cli
from orchestrator import dataset, lock, run_root
from wavealign import pipeline
from wavealign.records import Cell

SWEEP = "0123456789abcdef"  # a sweep id of plan.sweep_id's format

REPO = Path(__file__).resolve().parent.parent


def _rows(n: int) -> list[dict]:
    cells = [Cell.from_flat(dict(cell_id=f"c{i}", group_id=f"g{i}", hardware="cpu", profile_hardware="h100",
                                 backend="reference", method="random", variant="original", stages="none",
                                 skip="force", workload="shape-2h", seq_len_tokens=256, num_heads=1, head_dim=16,
                                 block_size=128, wave_size=4, reps=1, warmup=0,
                                 method_params={"density": 0.5, "seed": i})) for i in range(n)]
    return [dataset.make_row(c, pipeline.run_cell(c), sweep_id=SWEEP, sweep_name="t") for c in cells]


@pytest.mark.parametrize("damage", ["truncated", "empty", "stray text"])
def test_an_unreadable_results_file_is_moved_aside_and_the_rest_still_reads(tmp_path, damage, caplog):
    rows = _rows(2)
    victim, _ = dataset.write(tmp_path, rows[:1]) + dataset.write(tmp_path, rows[1:])  # two files
    if damage == "truncated":
        victim.write_bytes(victim.read_bytes()[:100])
    elif damage == "empty":
        victim.write_bytes(b"")
    else:
        victim = victim.with_name("notes.txt")
        victim.write_text("my notes")
    table = dataset.read(tmp_path)
    expected = 2 if damage == "stray text" else 1  # a damaged Parquet file's rows are gone; the others are not
    assert table.num_rows == expected
    moved = tmp_path / "results" / dataset.QUARANTINE / victim.relative_to(tmp_path / "results")
    assert moved.is_file() and not victim.exists()
    assert str(victim) in caplog.text and "unreadable" in caplog.text


def test_the_cells_of_a_quarantined_file_are_not_done_so_a_resume_runs_them_again(tmp_path):
    first, second = dataset.write(tmp_path, _rows(1))[0], dataset.write(tmp_path, _rows(2)[1:])[0]
    first.write_bytes(b"")
    assert dataset.done_cell_ids(tmp_path) == {"c1"}
    assert second.exists()


def _holder(run_root: Path) -> subprocess.Popen:
    """Another process holding the run root's lock until killed."""
    code = ("from orchestrator import lock\nimport time\n"
            f"with lock.hold({str(run_root)!r}, 'wavealign sweep other'):\n"
            "    print('held', flush=True)\n    time.sleep(300)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_driver_on_a_run_root_is_refused_naming_the_holder(tmp_path):
    holder = _holder(tmp_path)
    try:
        with pytest.raises(lock.RunRootBusy, match=rf"wavealign sweep other \(pid {holder.pid} on "), \
                lock.hold(tmp_path, "wavealign sweep mine"):
            pass
        assert cli.main(["sync-mlflow", f"run_root={tmp_path}", "mlflow.enabled=false"]) == 2
    finally:
        holder.kill()
        holder.wait()
    with lock.hold(tmp_path, "wavealign sweep mine"):  # the kernel released the dead holder's lock
        assert json.loads((tmp_path / run_root.LOCK).read_text())["pid"] == os.getpid()


def test_sigterm_stops_a_sweep_like_ctrl_c_keeping_rows_summary_and_run_record(tmp_path):
    runs = tmp_path / "runs"
    overrides = ["~sweep", "grid.hardware=[cpu]", "grid.backend=[reference]", "grid.method=[random]",
                 "grid.workload=[shape-2h]", "grid.seq_k=[2.048]", "grid.seed=[0,1,2,3,4,5]",
                 "grid.variant=[original]", "grid.reps=40", "grid.warmup=0", "progress=false",
                 "mlflow.enabled=false", "ray.num_cpus=1", f"run_root={runs}"]
    proc = subprocess.Popen([sys.executable, "-m", "jobs.cli", "sweep", *overrides], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 300
    while not list((runs / "results").rglob("*.parquet")):  # the first group is done: cells are running
        assert proc.poll() is None and time.monotonic() < deadline, "the sweep ended before it could be stopped"
        time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 143, out[-3000:]
    assert "interrupted" in out
    assert list(runs.glob("sweeps/*/run-*.json")) and list(runs.glob("sweeps/*/summary.txt"))
    done = dataset.read(runs).num_rows
    assert 1 <= done < 6


def test_an_mlflow_store_deleted_mid_sweep_is_named_in_one_line_and_no_row_is_lost(tmp_path):
    runs = tmp_path / "runs"
    overrides = ["~sweep", "grid.hardware=[cpu]", "grid.backend=[reference]", "grid.method=[random]",
                 "grid.workload=[shape-2h]", "grid.seq_k=[2.048]", "grid.seed=[0,1,2,3]", "grid.variant=[original]",
                 "grid.reps=20", "grid.warmup=0", "progress=false", "ray.num_cpus=1", "batch_cells=1",
                 f"run_root={runs}"]
    proc = subprocess.Popen([sys.executable, "-m", "jobs.cli", "sweep", *overrides], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 300
    while not list((runs / "results").rglob("*.parquet")):  # MLflow is in use: rows are being logged
        assert proc.poll() is None and time.monotonic() < deadline, "the sweep ended before its store could go"
        time.sleep(0.2)
    (runs / "mlflow.db").unlink()
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-3000:]
    assert "Traceback" not in out
    assert f"the store {runs / 'mlflow.db'} no longer exists (deleted while the sweep ran)" in out
    assert dataset.read(runs).num_rows == 4


# --- issue 32: signals in every phase, and a driver killed outright ---

SMALL = ["~sweep", "grid.hardware=[cpu]", "grid.backend=[reference]", "grid.method=[random]",
         "grid.workload=[shape-2h]", "grid.seq_k=[2.048]", "grid.seed=[0,1,2,3]", "grid.variant=[original]",
         "grid.reps=40", "grid.warmup=0", "progress=false", "ray.num_cpus=1"]


def _sweep(runs: Path, *overrides: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "jobs.cli", "sweep", *SMALL, f"run_root={runs}",
                             *overrides], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "RAY_ADDRESS": "local"})


def _until(proc: subprocess.Popen, reached, what: str) -> None:
    deadline = time.monotonic() + 300
    while not reached():
        assert proc.poll() is None and time.monotonic() < deadline, f"the sweep ended before {what}"
        time.sleep(0.05)


def _ray_started(proc: subprocess.Popen) -> bool:
    from orchestrator import watchdog

    names = []
    for pid in watchdog.descendants(proc.pid):
        with contextlib.suppress(OSError):  # ended meanwhile
            names.append(Path(f"/proc/{pid}/comm").read_text().strip())
    return "raylet" in names


def _parent_status(runs: Path) -> str:
    from mlflow.tracking import MlflowClient

    from orchestrator import tracking

    client = MlflowClient(tracking.default_tracking_uri(runs))
    (run,) = client.search_runs([client.get_experiment_by_name("wavealign").experiment_id],
                                "tags.`wavealign.kind` = 'sweep'")
    return run.info.status


@pytest.mark.parametrize(("phase", "signum", "code"), [
    ("mlflow set-up", signal.SIGINT, 130), ("ray start-up", signal.SIGTERM, 143)])
def test_a_signal_during_start_up_ends_the_sweep_as_any_interrupt_does(tmp_path, phase, signum, code):
    runs = tmp_path / "runs"
    proc = _sweep(runs)
    if phase == "mlflow set-up":  # its parent run is made (its config logged), Ray not started yet
        reached = lambda: list(runs.glob("mlartifacts/*/artifacts/config.yaml"))  # noqa: E731
    else:
        reached = lambda: _ray_started(proc)  # noqa: E731
    _until(proc, reached, phase)
    proc.send_signal(signum)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == code, out[-3000:]
    assert "interrupted: finished cells are recorded" in out and "this run:" in out
    assert "Traceback" not in out
    assert list(runs.glob("sweeps/*/run-*.json")) and _parent_status(runs) == "KILLED"


def test_a_signal_before_the_sweep_began_is_one_line(tmp_path):
    proc = _sweep(tmp_path / "runs")
    time.sleep(1.0)  # the command is starting: finding its extras, importing, composing its config
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 143
    assert out.strip().splitlines()[-1].startswith("wavealign sweep: stopped by SIGTERM")  # nothing recorded yet


def test_a_signal_the_moment_the_handlers_are_installed_is_one_line_and_puts_the_old_handlers_back(
        monkeypatch, capsys):
    from orchestrator import stop

    installed = stop.install

    def install_then_signal() -> None:  # SIGTERM lands right after the handlers go in, before anything else
        installed()
        stop._handle(signal.SIGTERM, None)

    monkeypatch.setattr(stop, "install", install_then_signal)
    before = signal.getsignal(signal.SIGTERM)
    assert cli.main(["sweep", "~sweep"]) == 143
    assert capsys.readouterr().err.strip() == "wavealign sweep: stopped by SIGTERM"
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_stop_request_whose_interrupt_was_swallowed_still_stops_the_dispatch_loop():
    from collections import deque

    from orchestrator import dispatch, stop

    queued = deque([["a group"]])
    with stop.handling():
        stop.note("SIGINT")  # the handler ran, its KeyboardInterrupt lost in a callback that swallows exceptions
        assert dispatch.dispatch({"cpu": queued}, {"cpu": [object()]}, None, None, 1.0, None) is True
        assert stop.exit_code() == 130
    assert len(queued) == 1  # nothing more was handed out


def test_a_signal_while_the_sweep_ends_is_noted_not_raised():
    from orchestrator import stop

    with stop.handling():
        with stop.deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)  # the handler runs between bytecodes: it would have raised by now
        assert stop.requested == "SIGTERM"
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)


def test_a_further_signal_stops_the_wait_for_mlflow_s_logging_and_the_rows_stay_in_parquet(tmp_path):
    from orchestrator import tracking

    rows = [{**row, "result_id": f"r{i}"} for i, row in enumerate(_rows(1) * 300)]  # minutes of sqlite round trips
    paths = dataset.write(tmp_path, rows)
    tracker = tracking.Tracker(tracking.default_tracking_uri(tmp_path), "wavealign", run_root=tmp_path)
    logger = tracking.BackgroundLogger(tracker, tracker.parent_run(SWEEP, "t"), tmp_path)
    logger.submit(paths)
    assert logger.close(abandon=lambda: True) is False
    logger._thread.join(timeout=60)  # it stops after the row it is logging
    assert not logger._thread.is_alive()
    assert len(tracker.logged_result_ids(SWEEP)) < len(rows)  # the rest is for `sync-mlflow`, from Parquet


def test_a_driver_killed_outright_takes_its_embedded_ray_and_workers_with_it(tmp_path):
    from orchestrator import watchdog

    runs = tmp_path / "runs"
    proc = _sweep(runs, "mlflow.enabled=false", "grid.reps=150")
    _until(proc, lambda: list((runs / "results").rglob("*.parquet")), "its first cell finished")
    noted = watchdog.descendants(proc.pid)  # Ray's GCS, raylet, agents and the worker, busy with the next cell
    proc.kill()
    proc.communicate(timeout=60)
    deadline = time.monotonic() + 30  # Ray alone leaves them running for over a minute
    while (alive := [pid for pid, started in noted.items() if watchdog._processes().get(pid, (0, -1))[1] == started]):
        assert time.monotonic() < deadline, f"still running: {alive}"
        time.sleep(0.5)


def test_a_stop_request_lost_in_a_callback_that_swallows_exceptions_prints_no_traceback(capsys):
    from orchestrator import stop

    class SwallowsOnCollection:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGINT)  # the handler raises here; Python ignores what __del__ raises
            time.sleep(0.2)

    with stop.handling():
        SwallowsOnCollection()  # collected at once: its __del__ runs and loses the KeyboardInterrupt
        assert stop.requested == "SIGINT"
    assert "Traceback" not in capsys.readouterr().err
