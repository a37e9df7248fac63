"""A sweep's MLflow parent run against a real sqlite store: it ends with the sweep (FINISHED, KILLED, FAILED), is
reopened on resume, carries the grid as params and the outcome as metrics; `sync-mlflow` attaches the dataset and
ends what it touches; the printed UI address opens the runs table; MLflow failing mid-sweep is caught up at the
end, or said in one line with what to run."""

from __future__ import annotations

import io
import itertools
import shlex
from collections.abc import Callable
from pathlib import Path

import pytest
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import TEMPORARILY_UNAVAILABLE
from mlflow.tracking import MlflowClient
from rich.console import Console
from test_bench_kernels import CPU_BENCH

import analysis
from jobs import cli, sync_mlflow
from orchestrator import config, dataset, record, sweep, tracking
from orchestrator.summary import runnable

# two tiny exact reference-kernel cells on this CPU: the original and its reordered variant
TINY = ["~sweep", "grid.hardware=[cpu]", "grid.backend=[reference]", "grid.method=[random]",
        "grid.workload=[shape-2h]", "grid.seq_k=[0.5]", "grid.variant=[original,wavealign]", "grid.reps=1",
        "grid.warmup=0", "progress=false", "ray.num_cpus=2"]


def run_sweep(root: Path, *overrides: str, console: Console | None = None, on_workers=None) -> sweep.SweepOutcome:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_ADDRESS", "local")  # a fresh embedded Ray even if another cluster runs on this machine
        cfg = config.load([*TINY, f"run_root={root}", *overrides])
        return sweep.run(cfg, console or Console(quiet=True), on_workers=on_workers)


def parent_run(uri: str, sweep_id: str, experiment: str = "wavealign"):
    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(experiment)
    runs = client.search_runs([found.experiment_id],
                              f"tags.`wavealign.sweep_id` = '{sweep_id}' and tags.`wavealign.kind` = 'sweep'")
    assert len(runs) == 1, "a sweep has exactly one parent run"
    return runs[0]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """One sweep run to its end, with what it printed."""
    root = tmp_path_factory.mktemp("finished")
    printed = io.StringIO()
    outcome = run_sweep(root, console=Console(file=printed, width=300))
    assert outcome.counts == {"done": 2}
    return root, outcome, printed.getvalue()


@pytest.fixture(scope="module")
def synced(tmp_path_factory):
    """A sweep recorded to Parquet only, then `sync-mlflow` to a store that is not next to its run root (so the
    experiment can only find the rows through the parent run's dataset input)."""
    tmp = tmp_path_factory.mktemp("synced")
    root, uri = tmp / "runs", f"sqlite:///{tmp / 'elsewhere' / 'mlflow.db'}"
    (tmp / "elsewhere").mkdir()
    outcome = run_sweep(root, "mlflow.enabled=false")
    assert outcome.counts == {"done": 2}
    assert sync_mlflow.main([f"run_root={root}", f"mlflow.tracking_uri={uri}", "mlflow.experiment=synced"]) == 0
    return root, uri, outcome


def test_a_sweep_that_runs_to_its_end_leaves_its_parent_run_finished_with_an_end_time(finished):
    root, outcome, _ = finished
    run = parent_run(tracking.default_tracking_uri(root), outcome.sweep_id)
    assert run.info.status == "FINISHED"
    assert run.info.end_time is not None and run.info.end_time >= run.info.start_time


def test_the_parent_run_carries_the_grid_and_variants_as_flat_params(finished):
    root, outcome, _ = finished
    params = parent_run(tracking.default_tracking_uri(root), outcome.sweep_id).data.params
    assert params["grid.backend"] == '["reference"]'
    assert params["grid.variant"] == '["original", "wavealign"]'
    assert params["grid.seq_k"] == "[0.5]" and params["grid.reps"] == "1"
    assert params["grid.cpu_profile"] == "h100"
    assert params["variants.wavealign.stages"] == "both" and params["extra_grids"] == "{}"


def test_the_parent_run_carries_counts_wall_times_and_the_shown_speedup_as_metrics(finished):
    root, outcome, _ = finished
    metrics = parent_run(tracking.default_tracking_uri(root), outcome.sweep_id).data.metrics
    reordered = next(r for r in outcome.rows if r["variant"] == "wavealign")
    assert metrics["cells_done"] == 2 and metrics["cells_failed"] == 0 and metrics["cells_unschedulable"] == 0
    assert metrics["speedup_vs_original_measured"] == pytest.approx(reordered["speedup_vs_original"])
    assert metrics["net_speedup_vs_original_measured"] == pytest.approx(reordered["net_speedup_vs_original"])
    assert not any(name.endswith("_simulated") for name in metrics)  # a CPU sweep predicts nothing
    verdicts = {v: metrics[f"cells_{v}_measured"] for v in ("faster", "slower", "same", "ambiguous")}
    assert verdicts == {v: float(v == reordered["verdict"]) for v in verdicts}
    assert metrics["startup_s"] > 0 and metrics["dispatch_s"] > 0
    assert "kernel_busy_fraction" not in metrics  # no GPU worker: no GPU-busy share to log


def test_the_parent_run_carries_the_gpu_busy_fraction_of_the_sweep_s_latest_run(tmp_path):
    """Two GPU workers dispatching for 4 s, one done cell of 3 warm-ups + 7 reps at 100 ms: 1 s busy of 8, and that
    share, from the run record, is the parent run's ``kernel_busy_fraction`` in the sqlite store."""
    uri = tracking.default_tracking_uri(tmp_path)
    tracker = tracking.Tracker(uri, "wavealign", run_root=tmp_path)
    parent = tracker.parent_run("00000000000b0557", "busy")
    timed = {"status": "done", "timer": "cuda_events", "warmup": 3, "reps": 7, "kernel_ms_median": 100.0}
    outcome = record.SweepOutcome(sweep_id="00000000000b0557", run_root=tmp_path, tracking_uri=uri, rows=[timed],
                                  dispatch_s=4.0)
    sweep_dir = tmp_path / "sweeps" / "00000000000b0557"
    sweep_dir.mkdir(parents=True)
    record.write_run_record(sweep_dir, outcome, {"h200": ["w0", "w1"], "cpu": ["w2"]})
    record.end_parent_run(tracker, parent, tmp_path, "00000000000b0557", sweep_rows=[])
    run = parent_run(uri, "00000000000b0557")
    assert run.info.status == "FINISHED"
    assert run.data.metrics["kernel_busy_fraction"] == pytest.approx(0.125) == outcome.kernel_busy_fraction


def test_the_printed_ui_hint_is_the_address_of_the_experiments_runs_table(finished):
    root, _, printed = finished
    experiment_id = MlflowClient(tracking_uri=tracking.default_tracking_uri(root)).get_experiment_by_name(
        "wavealign").experiment_id
    assert f"{runnable('mlflow')} ui --backend-store-uri {tracking.default_tracking_uri(root)}" in printed
    assert f"http://127.0.0.1:5000/#/experiments/{experiment_id}?workflowType=machine_learning" in printed


def test_the_summary_ends_with_the_next_command_to_run(finished):
    root, _, printed = finished
    assert f"report:  {runnable('wavealign')} report --run-root {root}" in printed


def test_the_ui_hint_for_a_server_is_its_runs_table_address():
    assert (tracking.ui_hint("http://mlflow.lab:5000/", "7")
            == "open http://mlflow.lab:5000/#/experiments/7?workflowType=machine_learning")


def test_a_resumed_sweep_reopens_its_parent_run_and_finishes_it_again(tmp_path):
    first = run_sweep(tmp_path)
    uri = tracking.default_tracking_uri(tmp_path)
    ended_first = parent_run(uri, first.sweep_id).info.end_time
    status_while_running = []
    second = run_sweep(tmp_path, "force=true",  # same sweep id; its cells run again
                       on_workers=lambda _: status_while_running.append(parent_run(uri, first.sweep_id).info.status))
    assert second.sweep_id == first.sweep_id and second.counts == {"done": 2}
    assert status_while_running == ["RUNNING"]
    run = parent_run(uri, first.sweep_id)
    assert run.info.status == "FINISHED" and run.info.end_time > ended_first


def test_a_resume_that_runs_nothing_keeps_the_parent_s_wall_times_and_logs_its_own_apart(tmp_path):
    first = run_sweep(tmp_path)
    uri = tracking.default_tracking_uri(tmp_path)
    measured = parent_run(uri, first.sweep_id).data.metrics
    again = run_sweep(tmp_path)  # resume=true: every cell is done
    assert again.counts == {} and again.skipped_done == 2
    metrics = parent_run(uri, first.sweep_id).data.metrics
    assert metrics["startup_s"] == measured["startup_s"] > 0
    assert metrics["dispatch_s"] == measured["dispatch_s"] > 0
    assert metrics["resume_startup_s"] == again.startup_s and metrics["resume_dispatch_s"] == again.dispatch_s


def test_a_sweep_interrupted_before_its_cells_ran_leaves_its_parent_run_killed(tmp_path):
    def interrupt(_):
        raise KeyboardInterrupt

    outcome = run_sweep(tmp_path, on_workers=interrupt)
    assert outcome.interrupted
    run = parent_run(tracking.default_tracking_uri(tmp_path), outcome.sweep_id)
    assert run.info.status == "KILLED" and run.info.end_time is not None


def test_a_driver_that_raises_leaves_its_parent_run_failed(tmp_path):
    def crash(_):
        raise RuntimeError("driver bug")

    with pytest.raises(RuntimeError, match="driver bug"):
        run_sweep(tmp_path, on_workers=crash)
    client = MlflowClient(tracking_uri=tracking.default_tracking_uri(tmp_path))
    runs = client.search_runs([client.get_experiment_by_name("wavealign").experiment_id],
                              "tags.`wavealign.kind` = 'sweep'")
    assert [r.info.status for r in runs] == ["FAILED"] and runs[0].info.end_time is not None


def test_sync_attaches_the_dataset_so_the_experiment_finds_the_synced_rows(synced):
    root, uri, outcome = synced
    frame = analysis.load("synced", tracking_uri=uri)
    assert sorted(frame["result_id"]) == sorted(r["result_id"] for r in outcome.rows)
    sources = [d.dataset.source for d in parent_run(uri, outcome.sweep_id, "synced").inputs.dataset_inputs]
    assert sources == [dataset.results_dir(root).resolve().as_uri()]


def test_sync_leaves_the_parent_run_it_created_ended_with_the_grid_and_metrics(synced):
    _, uri, outcome = synced
    run = parent_run(uri, outcome.sweep_id, "synced")
    assert run.info.status == "FINISHED" and run.info.end_time is not None
    assert run.data.params["grid.backend"] == '["reference"]' and run.data.metrics["cells_done"] == 2


# --- MLflow failing mid-sweep ---

def child_result_ids(uri: str, sweep_id: str) -> list[str]:
    """The result id of each of the sweep's child runs in MLflow, sorted (a result logged twice shows twice)."""
    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("wavealign").experiment_id],
                              f"tags.`wavealign.sweep_id` = '{sweep_id}' and tags.`wavealign.kind` = 'cell'")
    return sorted(r.data.tags["wavealign.result_id"] for r in runs)


def fail_child_logs(monkeypatch, fails: Callable[[int], bool]) -> list[int]:
    """``MlflowClient.log_batch`` raising for the child runs ``fails(n)`` picks (n: 1 for the first child logged,
    counting the attempts again), as MLflow raises for an sqlite store busy past its timeout; every other call of the
    real store is made. Returns the n that failed."""
    real, children, failed = MlflowClient.log_batch, itertools.count(1), []

    def log_batch(self, run_id, *args, tags=(), **kwargs):
        if any(t.key == f"{tracking.TAG}logged" for t in tags) and fails(n := next(children)):
            failed.append(n)
            raise MlflowException("(sqlite3.OperationalError) database is locked",
                                  error_code=TEMPORARILY_UNAVAILABLE)
        return real(self, run_id, *args, tags=tags, **kwargs)

    monkeypatch.setattr(MlflowClient, "log_batch", log_batch)
    return failed


def test_mlflow_failing_once_mid_sweep_is_caught_up_at_the_end_so_every_row_is_a_child_run(tmp_path, monkeypatch):
    failed = fail_child_logs(monkeypatch, lambda n: n == 2)  # the first row logged, then the store busy once
    outcome = run_sweep(tmp_path)
    uri = tracking.default_tracking_uri(tmp_path)
    assert failed == [2] and outcome.counts == {"done": 2}
    assert outcome.mlflow_down_reason is None and outcome.mlflow_missing_rows == 0
    assert child_result_ids(uri, outcome.sweep_id) == sorted(r["result_id"] for r in dataset.read(tmp_path).to_pylist())
    run = parent_run(uri, outcome.sweep_id)
    assert run.info.status == "FINISHED" and run.data.metrics["cells_done"] == 2


def test_mlflow_still_down_at_the_end_is_one_stderr_line_with_the_missing_rows_and_the_command_that_logs_them(
        tmp_path, monkeypatch, capsys):
    fail_child_logs(monkeypatch, lambda n: n >= 2)  # the first row logged, then the store busy for good
    monkeypatch.setenv("RAY_ADDRESS", "local")
    code = cli.main(["sweep", *TINY, f"run_root={tmp_path}"])
    (line,) = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("wavealign")]
    rows = dataset.read(tmp_path).to_pylist()
    assert code == 0 and len(rows) == 2 and {r["status"] for r in rows} == {"done"}
    assert line.startswith("wavealign sweep: MLflow lacks 1 of the sweep's rows (MlflowException: (sqlite3.Operational"
                           "Error) database is locked); they are in Parquet")
    command = f"{runnable('wavealign')} sync-mlflow run_root={tmp_path}"
    assert line.endswith(f": {command}")

    monkeypatch.undo()  # MLflow back
    assert sync_mlflow.main(shlex.split(command.removeprefix(f"{runnable('wavealign')} sync-mlflow "))) == 0
    (sweep_id,) = {r["sweep_id"] for r in rows}
    assert child_result_ids(tracking.default_tracking_uri(tmp_path), sweep_id) == sorted(r["result_id"] for r in rows)


def test_bench_kernels_ends_with_the_same_stderr_line_when_mlflow_lacks_rows(tmp_path, monkeypatch, capsys):
    fail_child_logs(monkeypatch, lambda n: n >= 2)  # the first row logged, then the store busy for good
    monkeypatch.setenv("RAY_ADDRESS", "local")
    code = cli.main(["bench-kernels", *CPU_BENCH, "mlflow.enabled=true", f"run_root={tmp_path}"])
    out, err = capsys.readouterr()
    (line,) = [ln for ln in err.splitlines() if ln.startswith("wavealign")]
    rows = dataset.read(tmp_path).to_pylist()
    assert code == 0 and {r["status"] for r in rows} == {"done"} and "kernel table" in out
    lacks = len(rows) - 1
    assert line.startswith(f"wavealign bench-kernels: MLflow lacks {lacks} of the sweep's rows (MlflowException")
    assert line.endswith(f"they are in Parquet, to log later: {runnable('wavealign')} sync-mlflow run_root={tmp_path}")


def test_mlflow_unreachable_from_the_start_says_at_once_the_sync_command_with_its_uri_and_experiment(
        tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # a refused connection fails at once
    out = io.StringIO()
    uri = "http://127.0.0.1:9"  # the discard port: nothing listens
    outcome = run_sweep(tmp_path, f"mlflow.tracking_uri={uri}", "mlflow.experiment=mine",
                        console=Console(file=out, width=4000))
    (line,) = [ln for ln in out.getvalue().splitlines() if ln.startswith("mlflow unreachable")]
    assert line.endswith(f"Later: {runnable('wavealign')} sync-mlflow run_root={tmp_path} "
                         f"mlflow.tracking_uri={uri} mlflow.experiment=mine")
    assert outcome.counts == {"done": 2} and outcome.mlflow_missing_rows == 2
