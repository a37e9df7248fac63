"""The sweep on a real multi-node Ray cluster (one machine; two "H100" nodes and one "A40" node with fake
GPUs), recording to real MLflow stores (an sqlite file, and a `mlflow server` on 127.0.0.1) and Parquet."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
import ray
from mlflow.tracking import MlflowClient
from ray.cluster_utils import Cluster
from rich.console import Console

from orchestrator import cluster, config, dataset, join, plan, sweep, tracking

REPO = Path(__file__).resolve().parent.parent
LABEL = cluster.ACCELERATOR_LABEL
OBJECT_STORE = 80 * 2**20
# tiny CPU cells: 512 tokens, 2 heads, the exact reference kernel
TINY = ["~sweep", "grid.backend=[reference]", "grid.method=[random]", "grid.workload=[shape-2h]",
        "grid.seq_k=[0.5]", "grid.variant=[original,wavealign]", "grid.reps=2", "grid.warmup=0", "progress=false"]


@pytest.fixture(scope="module")
def ray_cluster():
    nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "object_store_memory": OBJECT_STORE})
    # the H100s as Ray labels detected GPUs; the A40 as a user labels one (`ray start --labels accelerator-type=A40`)
    for label, accelerator in ((LABEL, "H100"), (LABEL, "H100"), (cluster.USER_ACCELERATOR_LABEL, "A40")):
        nodes.add_node(num_cpus=1, num_gpus=1, object_store_memory=OBJECT_STORE, labels={label: accelerator})
    nodes.wait_for_nodes()
    join.connect(nodes.address)
    yield nodes
    ray.shutdown()
    nodes.shutdown()


@ray.remote(num_cpus=0)
def _where_wavealign_lives() -> str:
    import wavealign

    return wavealign.__file__


def test_a_cluster_s_workers_run_the_checkout_ray_shipped_them_not_a_path_on_this_machine(ray_cluster):
    shipped = ray.get(_where_wavealign_lives.remote())
    assert not shipped.startswith(str(REPO)) and "runtime_resources" in shipped, shipped
    assert not (Path(shipped).parents[1] / "benchmarks").exists()  # results and bundles are not sent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MlflowServer:
    """A real `mlflow server` on 127.0.0.1 with an sqlite backend, started and stopped by the test."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.port, self.proc = folder, free_port(), None
        self.uri = f"http://127.0.0.1:{self.port}"

    def start(self) -> MlflowServer:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{self.folder / 'server.db'}",
             "--artifacts-destination", str(self.folder / "artifacts"), "--host", "127.0.0.1",
             "--port", str(self.port), "--workers", "1"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        return self

    def wait_ready(self, timeout_s: float = 180.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(0.5)
        raise TimeoutError(f"mlflow server on {self.uri} did not come up in {timeout_s} s")

    def stop(self) -> None:
        os.killpg(self.proc.pid, signal.SIGTERM)  # the server and its uvicorn worker: our own session
        self.proc.wait(timeout=60)


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    # started first so it boots while the Ray cluster does
    server = MlflowServer(tmp_path_factory.mktemp("mlflow-server")).start()
    yield server
    if server.proc.poll() is None:
        server.stop()


def sqlite_uri(root: Path) -> str:
    return tracking.default_tracking_uri(root)


def run_sweep(root: Path, *overrides: str, **kwargs) -> sweep.SweepOutcome:
    cfg = config.load([*TINY, f"run_root={root}", *overrides])
    return sweep.run(cfg, Console(quiet=True), **kwargs)


def child_runs(uri: str, sweep_id: str) -> dict[str, object]:
    """The sweep's cell runs by result id; two runs for one result would be a duplicate, so that fails here."""
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("wavealign")
    runs = client.search_runs([experiment.experiment_id],
                              f"tags.`wavealign.sweep_id` = '{sweep_id}' and tags.`wavealign.kind` = 'cell'",
                              max_results=1000)
    by_result = {r.data.tags["wavealign.result_id"]: r for r in runs}
    assert len(by_result) == len(runs), "a result was logged as more than one MLflow child run"
    return by_result


@pytest.fixture(scope="module")
def mixed(ray_cluster, mlflow_server, tmp_path_factory):
    """One sweep over H100, A40 and H200 cells; the saved-mask method names a file that does not exist, which only
    the worker can find out, so those cells raise."""
    root = tmp_path_factory.mktemp("mixed")
    outcome = run_sweep(root, "grid.hardware=[h100,a40,h200]", "grid.seed=[0,1]", "grid.method=[random,file]",
                        "+grid.method_params.file.path=missing.npz")
    return root, outcome


def test_cells_run_on_nodes_of_their_gpu_type(mixed):
    _, outcome = mixed
    labels = {n["NodeID"]: next(filter(None, map((n.get("Labels") or {}).get, cluster.LABEL_KEYS)), None)
              for n in ray.nodes()}
    done = [r for r in outcome.rows if r["status"] == "done"]
    assert {r["hardware"] for r in done} == {"h100", "a40"}
    assert all(labels[r["ray_node_id"]] == {"h100": "H100", "a40": "A40"}[r["hardware"]] for r in done)


def test_a_gpu_type_without_nodes_is_unschedulable_not_hung(mixed):
    _, outcome = mixed
    h200 = [r for r in outcome.rows if r["hardware"] == "h200"]
    assert len(h200) == 8 and {r["status"] for r in h200} == {"unschedulable"}
    assert "ray.io/accelerator-type or accelerator-type=H200" in h200[0]["error"]


def test_a_cell_that_raises_is_failed_and_the_others_finish(mixed):
    _, outcome = mixed
    failed = [r for r in outcome.rows if r["status"] == "failed"]
    assert len(failed) == 8 and all(r["method"] == "file" for r in failed)
    assert all("missing.npz" in r["error"] and "Traceback" in r["traceback"] for r in failed)
    assert outcome.counts["done"] == 8


def test_parquet_holds_one_row_per_cell_with_the_fixed_schema(mixed):
    root, outcome = mixed
    table = dataset.read(root)
    assert table.schema.equals(dataset.SCHEMA) and table.num_rows == len(outcome.rows) == 24
    assert sorted(table.column("result_id").to_pylist()) == sorted(r["result_id"] for r in outcome.rows)
    assert {p.parent.name for p in dataset.results_dir(root).rglob("*.parquet")} == {"method=random", "method=file"}


def test_sqlite_mlflow_has_a_child_run_per_row_with_params_and_metrics(mixed):
    root, outcome = mixed
    runs = child_runs(sqlite_uri(root), outcome.sweep_id)
    assert set(runs) == {r["result_id"] for r in outcome.rows}
    row = next(r for r in outcome.rows if r["status"] == "done")
    run = runs[row["result_id"]]
    assert run.data.params["hardware"] == row["hardware"] and run.data.params["variant"] == row["variant"]
    assert run.data.metrics["kernel_ms_median"] == pytest.approx(row["kernel_ms_median"])
    assert run.data.tags["wavealign.cell_id"] == row["cell_id"]


def test_a_second_run_skips_finished_cells(mixed):
    root, _ = mixed
    again = run_sweep(root, "grid.hardware=[h100,a40,h200]", "grid.seed=[0,1]", "grid.method=[random,file]",
                      "+grid.method_params.file.path=missing.npz", "grid.hardware=[h100]")
    # only h100's failed cells run again; its done cells are skipped
    assert again.skipped_done == 4 and again.counts == {"failed": 4}


def test_dry_run_reports_size_per_type_filtered_and_an_estimate(mixed, capsys):
    root, _ = mixed
    cfg = config.load([*TINY, f"run_root={root}", "grid.hardware=[h100,a40,cpu]", "grid.measure=[timed,simulated]",
                       "grid.seed=[0,1,2]"])
    plan.describe(plan.make_plan(cfg), cfg, Console(width=200))
    out = capsys.readouterr().out
    assert "30 cells" in out and re.search(r"h100\s+12 cells", out) and re.search(r"cpu\s+6 cells", out)
    assert "measure simulated models a GPU type; hardware cpu has none" in out
    assert re.search(r"estimate h100 workers: [0-9.]+ worker-minutes for \d+ cells", out)


def test_a_worker_killed_mid_cell_is_retried(ray_cluster, tmp_path):
    pids: dict[str, list[int]] = {}

    def kill_a40_worker_soon(workers):
        pids["a40"] = [w["worker_pid"] for w in workers["a40"]]
        threading.Timer(0.5, os.kill, (pids["a40"][0], signal.SIGKILL)).start()

    # one A40 worker; one group slow enough (reps) to be mid-cell when it is killed
    outcome = run_sweep(tmp_path, "grid.hardware=[a40]", "grid.seq_k=[4]", "grid.reps=8",
                        on_workers=kill_a40_worker_soon)
    assert outcome.counts == {"done": 2}
    assert all(r["worker_pid"] != pids["a40"][0] for r in outcome.rows)


def flaky_worker(poison: Path):
    """A worker actor class whose process exits on every try of the first group any of its workers is given
    (kept in the file ``poison``: a restart forgets everything), noting each dead pid in ``poison``.pids."""

    class FlakyRunner(cluster.CellRunner):
        def run(self, cells, then=None):
            if not poison.exists():
                poison.write_text(cells[0].group_id)
            if poison.read_text() == cells[0].group_id:
                with poison.with_suffix(".pids").open("a") as fh:
                    fh.write(f"{os.getpid()}\n")
                os._exit(1)
            return super().run(cells, then)

    return ray.remote(FlakyRunner)


def test_a_group_that_spends_its_retries_fails_and_its_restarted_worker_takes_the_next(ray_cluster, tmp_path,
                                                                                        monkeypatch):
    poison = tmp_path / "poisoned-group"
    monkeypatch.setattr(cluster, "CellWorker", flaky_worker(poison))
    # the one A40 worker dies on both tries (max_retries=1) of its first group; two groups follow it
    outcome = run_sweep(tmp_path / "runs", "grid.hardware=[a40]", "grid.seed=[0,1,2]", "ray.max_retries=1")
    died = [int(pid) for pid in poison.with_suffix(".pids").read_text().split()]
    failed = [r for r in outcome.rows if r["status"] == "failed"]
    done = [r for r in outcome.rows if r["status"] == "done"]
    assert outcome.workers == 1 and len(died) == 2
    assert len(failed) == 2 and {r["group_id"] for r in failed} == {poison.read_text()}
    assert all(r["error"].startswith("worker died") for r in failed)
    assert len(done) == 4 and len({r["worker_pid"] for r in done}) == 1 and done[0]["worker_pid"] not in died


def test_workers_ray_cannot_place_are_dropped_and_a_type_left_without_fails(ray_cluster, tmp_path):
    # other work holds the A40 and one of the two H100s, so those sweep workers can never be placed
    holders = [cluster.CellWorker.options(num_cpus=0, num_gpus=1, label_selector={key: accel}).remote()
               for key, accel in ((cluster.USER_ACCELERATOR_LABEL, "A40"), (LABEL, "H100"))]
    try:
        ray.get([h.where.remote() for h in holders])
        outcome = run_sweep(tmp_path, "grid.hardware=[h100,a40]", "grid.seed=[0,1]",
                            "ray.worker_start_timeout_s=60")
    finally:
        for holder in holders:
            ray.kill(holder)
    a40 = [r for r in outcome.rows if r["hardware"] == "a40"]
    assert outcome.workers == 1 and len(a40) == 4 and {r["status"] for r in a40} == {"failed"}
    assert "no a40 worker started within ray.worker_start_timeout_s=60" in a40[0]["error"]
    assert [r["status"] for r in outcome.rows if r["hardware"] == "h100"] == ["done"] * 4


def test_a_worker_start_timeout_must_be_positive():
    with pytest.raises(config.ConfigError, match=r"ray\.worker_start_timeout_s=0\.0; expected > 0"):
        config.load([*TINY, "ray.worker_start_timeout_s=0"])


def wait_for_rows(root: Path, driver: subprocess.Popen, rows: int, timeout_s: float = 300) -> None:
    """Until the sweep ``driver`` (still running) has recorded ``rows`` rows under ``root``. Its cells time 40
    repetitions each, so on a loaded two-core machine tens of seconds of work remain when this returns."""
    deadline = time.monotonic() + timeout_s
    while dataset.read(root).num_rows < rows:
        assert driver.poll() is None, f"the sweep ended (exit {driver.returncode}) before recording {rows} rows"
        assert time.monotonic() < deadline, f"no {rows} rows recorded within {timeout_s:g} s"
        time.sleep(0.05)


def test_resume_after_a_killed_driver_loses_and_redoes_nothing(ray_cluster, tmp_path):
    overrides = [*TINY, f"run_root={tmp_path}", "grid.hardware=[cpu]", "grid.seed=[0,1,2,3,4,5,6,7]",
                 "grid.seq_k=[2]", "grid.reps=40", "batch_cells=1", f"ray.address={ray_cluster.address}"]
    driver = subprocess.Popen([sys.executable, "-m", "jobs.sweep", *overrides], cwd=REPO,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for_rows(tmp_path, driver, 2)
    driver.kill()
    driver.wait()
    before = dataset.read(tmp_path).to_pylist()
    assert 2 <= len(before) < 16, "the driver must die part-way for this test to mean anything"

    cfg = config.load(overrides)
    outcome = sweep.run(cfg, Console(quiet=True))
    after = dataset.read(tmp_path).to_pylist()
    assert outcome.skipped_done == len(before) and outcome.counts == {"done": 16 - len(before)}
    assert sorted(r["cell_id"] for r in after) == sorted({r["cell_id"] for r in after})  # none redone
    assert {r["result_id"] for r in before} <= {r["result_id"] for r in after}  # none lost
    assert set(child_runs(sqlite_uri(tmp_path), outcome.sweep_id)) == {r["result_id"] for r in after}


def test_a_variant_added_on_resume_is_timed_against_a_rerun_original_not_recorded_twice(ray_cluster, tmp_path):
    first = run_sweep(tmp_path, "grid.hardware=[cpu]", "grid.variant=[original]")
    second = run_sweep(tmp_path, "grid.hardware=[cpu]", "grid.variant=[original,wavealign]")
    rows = dataset.read(tmp_path).to_pylist()
    assert first.counts == {"done": 1} and second.counts == {"done": 1} and len(rows) == 2
    added = next(r for r in rows if r["variant"] == "wavealign")
    assert added["speedup_vs_original"] > 0  # from the original re-run beside it, back to back


def test_ctrl_c_stops_records_what_finished_and_says_how_to_resume(ray_cluster, tmp_path):
    overrides = [*TINY, f"run_root={tmp_path}", "grid.hardware=[cpu]", "grid.seed=[0,1,2,3,4,5,6,7]",
                 "grid.seq_k=[2]", "grid.reps=40", "batch_cells=1", f"ray.address={ray_cluster.address}"]
    # as a sweep typed in a terminal: Ctrl-C's SIGINT at its default, even when the tests themselves run as a
    # background job, which inherits SIGINT ignored (and so would the sweep, rightly)
    driver = subprocess.Popen([sys.executable, "-m", "jobs.sweep", *overrides], cwd=REPO, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    wait_for_rows(tmp_path, driver, 2)
    driver.send_signal(signal.SIGINT)
    output, _ = driver.communicate(timeout=120)
    rows = dataset.read(tmp_path).to_pylist()
    assert driver.returncode == 130, output
    assert "interrupted" in output and "resume" in output
    assert 2 <= len(rows) < 16 and {r["status"] for r in rows} == {"done"}


def test_mlflow_server_records_runs_params_and_metrics(ray_cluster, mlflow_server, tmp_path, monkeypatch):
    mlflow_server.wait_ready()
    # the sweep's 10 s request timeout is for dead servers; this live one may answer slowly on a loaded machine,
    # and one timed-out request would switch tracking off for the sweep
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "60")
    outcome = run_sweep(tmp_path, "grid.hardware=[h100]", f"mlflow.tracking_uri={mlflow_server.uri}")
    runs = child_runs(mlflow_server.uri, outcome.sweep_id)
    assert set(runs) == {r["result_id"] for r in outcome.rows} and len(runs) == 2
    for row in outcome.rows:
        run = runs[row["result_id"]]
        assert run.data.params["backend"] == "reference"
        assert run.data.metrics["kernel_ms_median"] == pytest.approx(row["kernel_ms_median"])
        assert run.info.status == "FINISHED"


def test_mlflow_server_stopped_mid_sweep_keeps_parquet_and_syncs_later(ray_cluster, mlflow_server, tmp_path):
    mlflow_server.wait_ready()
    outcome = run_sweep(tmp_path, "grid.hardware=[h100,a40]", f"mlflow.tracking_uri={mlflow_server.uri}",
                        on_workers=lambda workers: mlflow_server.stop())
    assert outcome.mlflow_down_reason is not None
    assert dataset.read(tmp_path).num_rows == len(outcome.rows) == 4

    mlflow_server.start().wait_ready()
    from jobs import sync_mlflow

    assert sync_mlflow.main([f"run_root={tmp_path}", f"mlflow.tracking_uri={mlflow_server.uri}"]) == 0
    assert set(child_runs(mlflow_server.uri, outcome.sweep_id)) == {r["result_id"] for r in outcome.rows}


def test_a_reorderer_axis_runs_each_grouping_alone_and_with_stage2_against_one_original(ray_cluster, tmp_path):
    outcome = run_sweep(tmp_path, "grid.hardware=[cpu]", "grid.variant=[original,spatial,wavealign]",
                        "grid.reorderer=[wavealign,lsh,minhash]", "+grid.reorderer_params.minhash.num_perm=[16,32]",
                        "+grid.reorderer_params.minhash.bands=4", "mlflow.enabled=false")
    rows = dataset.read(tmp_path).to_pylist()
    # the original once; spatial and wavealign each with wavealign, lsh and minhash at two num_perm
    assert outcome.counts == {"done": 9} and len(rows) == 9
    assert len({r["group_id"] for r in rows}) == 1
    orders = sorted((r["variant"], r["reorderer"], r["reorderer_params"]) for r in rows)
    assert orders[0] == ("original", "identity", "{}")
    assert {(v, r) for v, r, _ in orders[1:]} == {(v, r) for v in ("spatial", "wavealign")
                                                  for r in ("wavealign", "lsh", "minhash")}
    minhash = [json.loads(p) for v, r, p in orders if r == "minhash"]
    assert sorted(p["num_perm"] for p in minhash) == [16, 16, 32, 32]
    assert all(r["speedup_vs_original"] > 0 and r["reorder_ms"] > 0 for r in rows if r["variant"] != "original")
