"""The orchestration load benchmark (issue 32, item 19): a sweep of many near-free cells over local Ray worker nodes.

    .venv/bin/python benchmarks/results/orchestration-load/load.py [--cells 10000] [--nodes 8] [--kill 2] [--out DIR]

Starts a real Ray cluster on this machine with ``ray start`` (a head that takes no cells, and ``--nodes`` worker
nodes of one CPU each, all on 127.0.0.1), then runs ``wavealign sweep`` against it (``ray.address=127.0.0.1:<port>``)
with the cheapest real cell that every CPU worker may run at once: the ``reference`` backend on one 128-token
``dense`` block of a modelled H100, measured ``simulated`` (the simulator pool takes one worker per CPU; cells timed on
a CPU get one worker, so that no two time at once). Parquet only (MLflow's own cost per row is measured in
../orchestration/). The cells are ``--cells`` = seeds x wave sizes (100 wave sizes), so the command line stays
short. Every second it samples the driver's resident memory and CPU time and the rows recorded so far; once a third
of the cells are recorded it kills ``--kill`` worker nodes outright (SIGKILL to every process of the node). At the
end it checks the dataset: every cell of the grid recorded exactly once. Writes ``timeline.csv`` and ``result.json``
to ``--out``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(REPO))

from orchestrator import watchdog  # noqa: E402  (the checkout first, as the sweep runs it)

WAVE_SIZES = 100


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Ray 2.60 turns token authentication on for a cluster it starts (the token in ~/.ray/auth_token); every process
# that joins it, nodes and drivers, says so too
ENV = {**os.environ, "RAY_AUTH_MODE": "token", "PYTHONPATH": str(REPO)}
ENV.pop("RAY_ADDRESS", None)


def _ray(*args: str) -> subprocess.Popen:
    """``ray start ... --block`` in a session of its own: the node's processes are its descendants."""
    ray = Path(sys.executable).with_name("ray")
    return subprocess.Popen([str(ray), "start", "--block", "--node-ip-address=127.0.0.1", "--disable-usage-stats",
                             *args], start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=ENV)


def _alive_nodes(address: str) -> int:
    code = (f"import ray; ray.init(address={address!r}, logging_level='ERROR'); "
            "print(sum(n['Alive'] for n in ray.nodes()))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=ENV)
    return int(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 and done.stdout.strip() else 0


def _kill_node(node: subprocess.Popen) -> int:
    """SIGKILL every process of a node started by ``_ray`` (its raylet, agents and workers); returns how many."""
    pids = [node.pid, *watchdog.descendants(node.pid)]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return len(pids)


def _driver_sample(pid: int) -> tuple[float, float]:
    """(resident MB, user + system CPU seconds) of a process."""
    status = Path(f"/proc/{pid}/status").read_text()
    rss_kb = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()
    return rss_kb / 1024, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class RowCounter:
    """Rows in the results files there now: each file's row count, from its footer, read once (the merge at the end
    of the sweep replaces many files by one: the count follows it)."""

    def __init__(self, results: Path) -> None:
        self.results, self.rows_by_file = results, {}

    def count(self) -> int:
        import pyarrow.parquet as pq

        present = set(self.results.rglob("part-*.parquet")) if self.results.is_dir() else set()
        for path in present - set(self.rows_by_file):
            with contextlib.suppress(OSError):  # merged away meanwhile
                self.rows_by_file[path] = pq.read_metadata(path).num_rows
        self.rows_by_file = {p: n for p, n in self.rows_by_file.items() if p in present}
        return sum(self.rows_by_file.values())


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--kill", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("/tmp/wavealign-load"))
    args = parser.parse_args(argv)
    seeds = args.cells // WAVE_SIZES
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    run_root = out / "run"
    port = _free_port()
    address = f"127.0.0.1:{port}"
    head = _ray("--head", f"--port={port}", "--num-cpus=0", "--num-gpus=0", "--include-dashboard=false")
    nodes: list[subprocess.Popen] = []
    try:
        started = time.monotonic()
        for joined in range(1, args.nodes + 2):  # the head, then one node at a time (started together they collide)
            if joined > 1:
                nodes.append(_ray(f"--address={address}", "--num-cpus=1", "--num-gpus=0"))
            while _alive_nodes(address) < joined:
                if time.monotonic() - started > 900:
                    raise RuntimeError(f"only {joined - 1} of {args.nodes + 1} nodes joined within 900 s")
                time.sleep(1)
        cluster_up_s = time.monotonic() - started
        overrides = ["~sweep", "grid.hardware=[h100]", "grid.backend=[reference]", "grid.measure=[simulated]",
                     "grid.method=[dense]", "grid.workload=[shape-2h]", "grid.seq_k=[0.128]", "grid.variant=[original]",
                     f"grid.seed=[{','.join(map(str, range(seeds)))}]",
                     f"grid.wave_size=[{','.join(map(str, range(1, WAVE_SIZES + 1)))}]", "grid.reps=1",
                     "grid.warmup=0", "mlflow.enabled=false", "progress=false", f"ray.address={address}",
                     f"run_root={run_root}"]
        driver = subprocess.Popen([sys.executable, "-m", "jobs.cli", "sweep", *overrides], cwd=REPO, env=ENV,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        counter = RowCounter(run_root / "results")
        timeline, killed_at, begun = [], None, time.monotonic()
        while driver.poll() is None:
            try:
                rss_mb, cpu_s = _driver_sample(driver.pid)
            except (OSError, StopIteration):
                break
            rows = counter.count()
            event = ""
            if killed_at is None and rows >= args.cells // 3:
                killed = [_kill_node(node) for node in nodes[:args.kill]]
                killed_at, event = rows, f"killed {args.kill} nodes ({sum(killed)} processes)"
            timeline.append((round(time.monotonic() - begun, 2), round(rss_mb, 1), round(cpu_s, 2), rows, event))
            time.sleep(1.0)
        output, _ = driver.communicate()
    finally:
        for node in [*nodes, head]:
            _kill_node(node)
    (out / "driver.log").write_text(output)
    with (out / "timeline.csv").open("w") as fh:
        fh.write("t_s,driver_rss_mb,driver_cpu_s,rows_recorded,event\n")
        fh.writelines(",".join(map(str, sample)) + "\n" for sample in timeline)
    result = _check(run_root, args, driver.returncode, cluster_up_s, killed_at, timeline)
    (out / "result.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0 if result["lost_cells"] == 0 and result["duplicated_rows"] == 0 else 1


def _check(run_root: Path, args: argparse.Namespace, returncode: int, cluster_up_s: float, killed_at: int | None,
           timeline: list[tuple]) -> dict:
    """What the dataset holds against the grid, and the figures of the run."""
    from collections import Counter

    from orchestrator import dataset

    rows = dataset.read(run_root).to_pylist()
    (record_path,) = sorted(run_root.glob("sweeps/*/run-*.json"))[-1:]
    record = json.loads(record_path.read_text())
    cells = Counter(r["cell_id"] for r in rows)
    done = [r for r in rows if r["status"] == "done"]
    own_s = sum(r["cell_wall_s"] + r["mask_ms"] / 1e3 for r in done)
    workers = sum(record["workers"].values())
    # the samples while cells were being recorded: from the first row to the one where every cell was (the merge of
    # the sweep's files and the summary's reads come after)
    whole = next((i for i, s in enumerate(timeline) if s[3] >= args.cells), len(timeline) - 1)
    dispatch = [s for s in timeline[:whole + 1] if s[3] > 0]
    first, last = (dispatch[0], dispatch[-1]) if len(dispatch) > 1 else (None, None)
    return {
        "cells": args.cells, "nodes": args.nodes, "killed_nodes": args.kill, "killed_after_rows": killed_at,
        "sweep_exit_code": returncode, "rows": len(rows), "distinct_cells": len(cells),
        "lost_cells": args.cells - len(cells), "duplicated_rows": len(rows) - len(cells),
        "duplicated_result_ids": len(rows) - len({r["result_id"] for r in rows}),
        "statuses": dict(Counter(r["status"] for r in rows)), "workers": workers,
        "cluster_up_s": round(cluster_up_s, 1), "startup_s": round(record["startup_s"], 2),
        "dispatch_s": round(record["dispatch_s"], 2),
        "dispatch_ms_per_cell": round(record["dispatch_s"] / args.cells * 1e3, 3),
        "cell_own_work_ms": round(own_s / max(len(done), 1) * 1e3, 3),
        "overhead_ms_per_cell_worker_time": round((record["dispatch_s"] * workers - own_s) / args.cells * 1e3, 2),
        "driver_cpu_ms_per_cell": round((last[2] - first[2]) / max(last[3] - first[3], 1) * 1e3, 3) if first else None,
        "driver_rss_mb_first_last_max": [first[1], last[1], max(s[1] for s in dispatch)] if first else None,
        "driver_rss_mb_at_the_end": max(s[1] for s in timeline),
        "driver_rss_mb_per_1000_rows": round((last[1] - first[1]) / max(last[3] - first[3], 1) * 1000, 2)
        if first else None,
        "python": platform.python_version(), "machine": f"{os.cpu_count()} CPUs, {platform.machine()}",
        "date": time.strftime("%Y-%m-%d"),
    }


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
