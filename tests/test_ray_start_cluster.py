"""The cluster route as users take it: a `ray start --head` node and `ray start --address` worker nodes as real
processes on this machine (addresses on 127.0.0.1, Ray token authentication on), then `wavealign sweep
ray.address=127.0.0.1:PORT`, the README's `ray job submit`, refused tokens, and a worker node killed mid-sweep.

CPU cells stand in for GPU cells: each worker node declares one GPU (`--num-gpus 1`) and an accelerator type
(`--labels accelerator-type=H100`), which is all the orchestrator places by; the cell's reference backend then runs
on that worker's CPU (``pipeline.device_for``). Every process is stopped by its PID when the module ends (not by
`ray stop`, which stops every Ray process of the machine, other users' too)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest
import readme_commands
from mlflow.tracking import MlflowClient

from jobs.sweep import EXIT_CELLS_FAILED
from orchestrator import dataset, tracking
from wavealign import hardware

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent  # the environment's scripts: `ray`, and the `python` a job's entrypoint finds
# tiny CPU cells (512 tokens, 2 heads, the exact reference kernel) on two GPU types
TINY = ["~sweep", "grid.backend=[reference]", "grid.method=[random]", "grid.workload=[shape-2h]",
        "grid.seq_k=[0.5]", "grid.variant=[original,wavealign]", "grid.reps=2", "grid.warmup=0",
        "grid.hardware=[h100,a40]", "grid.seed=[0,1,2]", "progress=false"]
RUN_TIMEOUT_S = 240


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``, from /proc."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                children = [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
            found += children
            todo += children
    return found


class RayStartCluster:
    """A Ray cluster of `ray start --block` processes with token authentication on: a head with no GPU, and worker
    nodes of one GPU each labelled with an accelerator type. Its state is read from the dashboard's REST API."""

    def __init__(self) -> None:
        # Ray's Unix socket paths live under its temp dir and must stay short: not pytest's tmp_path
        self.temp_dir = Path(tempfile.mkdtemp(prefix="wa-ray-", dir="/tmp"))
        self.token = secrets.token_hex(16)
        self.port, self.dashboard_port = free_port(), free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.dashboard = f"http://127.0.0.1:{self.dashboard_port}"
        # as a user's shell with the environment activated: the job's entrypoint runs with the head's PATH
        self.env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "RAY_AUTH_MODE": "token",
                    "RAY_AUTH_TOKEN": self.token, "RAY_USAGE_STATS_ENABLED": "0"}
        self.env.pop("RAY_ADDRESS", None)
        self.nodes_started: dict[str, subprocess.Popen] = {}

    def _ray_start(self, name: str, *args: str) -> subprocess.Popen:
        log = (self.temp_dir / f"{name}.log").open("w")
        proc = subprocess.Popen([str(BIN / "ray"), "start", "--block", "--disable-usage-stats",
                                 "--node-ip-address", "127.0.0.1", *args], env=self.env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        self.nodes_started[name] = proc
        return proc

    def _readme_options(self, words: list[str]) -> list[str]:
        """The README's shared-host options for a node, as this machine must take them (it is shared: CI runners,
        other engineers' Ray): the head's port and dashboard port this cluster's, every other port a free one."""
        chosen = {"--port": self.port, "--dashboard-port": self.dashboard_port, "--address": self.address}
        options = []
        for word in words:
            flag, _, _ = word.partition("=")
            if flag != "--head":
                options.append(f"{flag}={chosen.get(flag) or free_port()}")
        return options

    def start_head(self) -> None:
        head, _ = readme_commands.shared_host_ray_start()
        self._ray_start("head", "--head", *self._readme_options(head), "--num-cpus", "1", "--num-gpus", "0",
                        "--temp-dir", str(self.temp_dir), "--dashboard-host", "127.0.0.1")

    def add_node(self, accelerator: str) -> None:
        _, worker = readme_commands.shared_host_ray_start()
        self._ray_start(accelerator, *self._readme_options(worker), "--num-cpus", "1", "--num-gpus", "1",
                        "--labels", f"accelerator-type={accelerator}")

    def nodes(self) -> list[dict]:
        """The cluster's nodes, as Ray's state API lists them (`ray list nodes`); [] while the dashboard is not up."""
        request = urllib.request.Request(f"{self.dashboard}/api/v0/nodes?detail=1&limit=100",
                                         headers={"Authorization": f"Bearer {self.token}"})
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return json.load(response)["data"]["result"]["result"]
        except OSError:
            return []

    def wait_for(self, alive: int, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while sum(n["state"] == "ALIVE" for n in self.nodes()) < alive:
            dead = [name for name, proc in self.nodes_started.items() if proc.poll() is not None]
            assert not dead and time.monotonic() < deadline, (
                f"{alive} nodes not alive within {timeout_s} s (exited: {dead}): " + self.logs())
            time.sleep(0.5)

    def labels_by_node_id(self) -> dict[str, str | None]:
        return {n["node_id"]: n["labels"].get("accelerator-type") for n in self.nodes()}

    def head_ip(self) -> str:
        return next(n["node_ip"] for n in self.nodes() if n["is_head_node"])

    def raylet_pid(self, name: str) -> int:
        (pid,) = [p for p in descendants(self.nodes_started[name].pid)
                  if Path(f"/proc/{p}/comm").read_text().strip() == "raylet"]
        return pid

    def logs(self) -> str:
        return "".join(f"\n--- {p.name}\n{p.read_text()[-2000:]}" for p in sorted(self.temp_dir.glob("*.log")))

    def stop(self) -> None:
        """Each `ray start --block` stops its node's processes on SIGTERM; whatever outlives it is killed by PID."""
        below = {name: descendants(proc.pid) for name, proc in self.nodes_started.items()}
        for proc in self.nodes_started.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for name, proc in self.nodes_started.items():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)
            for pid in below[name]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def ray_start():
    if not (BIN / "ray").is_file():
        pytest.skip(f"Ray's CLI is not installed beside {sys.executable} (pip install 'wavealign[sweep]')")
    nodes = RayStartCluster()
    try:
        nodes.start_head()
        nodes.wait_for(alive=1)
        for alive, accelerator in enumerate(("H100", "A40"), start=2):  # one at a time: a 2-core CI machine
            nodes.add_node(accelerator)
            nodes.wait_for(alive=alive)
        yield nodes
    finally:
        nodes.stop()


def run_cli(env: dict[str, str], *args: str, timeout_s: float = RUN_TIMEOUT_S) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jobs.cli", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout_s)


def rows_of(run_root: Path) -> list[dict]:
    return dataset.read(run_root).to_pylist()


def assert_each_cell_ran_on_a_node_of_its_type(rows: list[dict], cluster: RayStartCluster) -> None:
    labels = cluster.labels_by_node_id()
    placed = {(r["hardware"], labels[r["ray_node_id"]]) for r in rows}
    assert placed == {(hw, hardware.get(hw).ray_accelerator_type) for hw in ("h100", "a40")}, placed


# ---- the README's ports for a shared host

def test_the_readme_s_shared_host_commands_move_every_port_ray_start_takes_by_default():
    """Every port `ray start` binds at a fixed default (as the installed Ray declares its options; the worker port
    range excepted, whose ports Ray picks free) is set in the README's shared-host head command, and the node-level
    one, the dashboard agent's, in its worker command too; the cluster of this module starts from those lines."""
    from ray.scripts.scripts import start

    fixed = {p.opts[0] for p in start.params if "port" in p.name and isinstance(p.default, int) and p.default > 0
             and p.name not in ("min_worker_port", "max_worker_port")}
    # a head's GCS and Ray Client server take 6379 and 10001 where the head starts, not as their options' defaults
    head_only = {"--port", "--ray-client-server-port", "--dashboard-port"}
    head, worker = (set(w.partition("=")[0] for w in words) for words in readme_commands.shared_host_ray_start())
    assert fixed >= {"--dashboard-port", "--dashboard-agent-listen-port"}, fixed  # the installed Ray's, as read
    assert fixed | {"--port", "--ray-client-server-port"} <= head
    assert fixed - head_only <= worker and "--address" in worker


# ---- wavealign sweep ray.address=127.0.0.1:PORT

@pytest.fixture(scope="module")
def by_address(ray_start, tmp_path_factory):
    run_root = tmp_path_factory.mktemp("by-address")
    done = run_cli(ray_start.env, "sweep", *TINY, f"run_root={run_root}", f"ray.address={ray_start.address}")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:] + ray_start.logs()
    return done, run_root


def test_a_sweep_given_the_head_s_address_runs_each_cell_only_on_a_node_of_its_type(ray_start, by_address):
    _, run_root = by_address
    rows = rows_of(run_root)
    assert len(rows) == 12 and {r["status"] for r in rows} == {"done"}
    assert_each_cell_ran_on_a_node_of_its_type(rows, ray_start)


def test_a_sweep_prints_the_cluster_it_joined_before_dispatching(ray_start, by_address):
    done, _ = by_address
    line = (f"cluster {ray_start.head_ip()}:{ray_start.port} (ray.address={ray_start.address}): 3 nodes, "
            "GPUs A40 x1, H100 x1, 3 CPUs")
    assert line in done.stdout
    assert done.stdout.index(line) < done.stdout.index("this run: done 12")


def test_the_run_record_and_the_mlflow_parent_run_name_the_cluster(ray_start, by_address):
    _, run_root = by_address
    (record_path,) = run_root.glob("sweeps/*/run-*.json")
    joined = json.loads(record_path.read_text())["cluster"]
    assert joined == {"address": f"{ray_start.head_ip()}:{ray_start.port}",
                      "found": f"ray.address={ray_start.address}", "nodes": 3,
                      "gpus_by_type": {"A40": 1, "H100": 1}, "untyped_gpus": 0, "cpus": 3}
    client = MlflowClient(tracking.default_tracking_uri(run_root))
    (parent,) = client.search_runs([client.get_experiment_by_name("wavealign").experiment_id],
                                   "tags.`wavealign.kind` = 'sweep'")
    tags = parent.data.tags
    assert tags["wavealign.cluster.address"] == joined["address"] and tags["wavealign.cluster.nodes"] == "3"
    assert json.loads(tags["wavealign.cluster.gpus_by_type"]) == {"A40": 1, "H100": 1}


# ---- ray job submit, with the README's entrypoint

def test_the_readme_s_ray_job_submit_runs_the_sweep_in_the_cluster(ray_start, tmp_path):
    _, entrypoint = readme_commands.ray_job_submit()
    # the README's grid and run root are the paper's: this job runs the tiny grid, in a folder of the test's
    keep = [w for w in entrypoint if not w.startswith(("sweep=", "run_root="))]
    assert keep[:4] == ["python", "-m", "jobs.cli", "sweep"] and "ray.address=auto" in keep
    submit = [str(BIN / "ray"), "job", "submit", "--address", ray_start.dashboard, "--working-dir", str(REPO), "--",
              *keep, *TINY, f"run_root={tmp_path}"]
    done = subprocess.run(submit, cwd=REPO, env=ray_start.env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    assert "(ray.address=auto, from RAY_ADDRESS: this Ray job's cluster): 3 nodes" in done.stdout
    rows = rows_of(tmp_path)
    assert len(rows) == 12 and {r["status"] for r in rows} == {"done"}
    assert_each_cell_ran_on_a_node_of_its_type(rows, ray_start)


# ---- a refused token: one line, exit 2, nothing written

@pytest.mark.parametrize(("auth", "expected"), [
    ({}, "the cluster refused this driver's Ray token (RAY_AUTH_MODE=unset); expected RAY_AUTH_MODE=token"),
    ({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "not-the-cluster-s"},
     "the cluster refused this driver's Ray token (RAY_AUTH_MODE=token); expected RAY_AUTH_MODE=token"),
    ({"RAY_AUTH_MODE": "token"}, "RAY_AUTH_MODE=token but this machine has no Ray token; expected"),
], ids=["no-token-mode", "wrong-token", "no-token"])
def test_a_refused_token_is_one_line_naming_ray_auth_mode_and_exit_2_before_anything_is_written(
        ray_start, tmp_path, auth, expected):
    env = {k: v for k, v in ray_start.env.items() if not k.startswith("RAY_AUTH_")}
    env |= {"HOME": str(tmp_path / "home"), **auth}  # no ~/.ray/auth_token either
    run_root = tmp_path / "runs"
    done = run_cli(env, "sweep", *TINY, f"run_root={run_root}", f"ray.address={ray_start.address}", timeout_s=120)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stderr.startswith(f"wavealign sweep: ray.address={ray_start.address}: {expected}")
    assert done.stderr.count("\n") == 1, done.stderr
    assert not run_root.exists()


def test_a_port_that_answers_but_is_no_ray_head_is_refused_within_the_timeout(ray_start):
    dashboard = f"127.0.0.1:{ray_start.dashboard_port}"
    code = ("from orchestrator import join\n"
            f"try:\n    join.check({dashboard!r}, timeout_s=3)\nexcept join.CannotJoin as exc:\n    print(exc)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=ray_start.env, capture_output=True, text=True,
                          timeout=60)  # Ray's own client waits 40 s per try
    assert done.stdout.startswith(f"ray.address={dashboard}: {dashboard} is not a Ray head's GCS (no answer within "
                                  "3 s); expected the port `ray start --head --port` took"), done.stdout + done.stderr


# ---- a worker node killed mid-sweep

def test_a_worker_node_killed_mid_sweep_loses_no_finished_row_and_records_the_rest(ray_start, tmp_path):
    ray_start.add_node("B200")
    ray_start.wait_for(alive=4)
    run_root = tmp_path / "runs"
    overrides = [*TINY, "grid.hardware=[h100,b200]", "grid.seed=[0,1,2,3,4,5]", "grid.seq_k=[2]", "grid.reps=20",
                 "batch_cells=1", "ray.worker_start_timeout_s=15", "mlflow.enabled=false", f"run_root={run_root}",
                 f"ray.address={ray_start.address}"]
    driver = subprocess.Popen([sys.executable, "-m", "jobs.cli", "sweep", *overrides], cwd=REPO,
                              env=ray_start.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while not (finished := [r for r in rows_of(run_root) if r["hardware"] == "b200" and r["status"] == "done"]):
            assert driver.poll() is None and time.monotonic() < deadline, "no b200 cell finished"
            time.sleep(0.2)
        os.kill(ray_start.raylet_pid("B200"), signal.SIGKILL)
        output, _ = driver.communicate(timeout=RUN_TIMEOUT_S)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait(timeout=30)
    rows = {r["result_id"]: r for r in rows_of(run_root)}
    assert all(rows[r["result_id"]]["status"] == "done" for r in finished)  # no finished row lost
    assert len({r["cell_id"] for r in rows.values()}) == 24  # every cell recorded, once
    assert {r["status"] for r in rows.values() if r["hardware"] == "h100"} == {"done"}
    lost = [r for r in rows.values() if r["hardware"] == "b200" and r["status"] != "done"]
    assert lost and {r["status"] for r in lost} == {"failed"}, output[-3000:]
    assert all(re.match(r"worker died|every worker of this type died", r["error"]) for r in lost), output[-3000:]
    assert driver.returncode == EXIT_CELLS_FAILED, output[-3000:]
