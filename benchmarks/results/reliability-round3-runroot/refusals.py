"""Time and peak memory of each run-root refusal of issue 39 (items 2, 3, 4, 6, 9, 10).

From the command line as a user meets them (``commands``): each case makes its crafted run root, runs the command
under ``/usr/bin/time -v`` and checks that it ends in one stderr line with the documented exit status, no traceback
and no password. Then the check alone, in this process once its imports are loaded (``checks``): wall time and the
peak of Python's allocations (``tracemalloc``; pyarrow's own buffers are not among them). Not a unit test: a
measurement, run by hand. Needs root for item 10's 1 MiB tmpfs (skipped otherwise); ``--load-root`` names a run root
of many rows (the orchestration-load benchmark's) for item 6's run number.

    .venv/bin/python benchmarks/results/reliability-round3-runroot/refusals.py --out /tmp/wavealign-refusals \
        --load-root /tmp/wavealign-load/runs
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tests"))
WAVEALIGN = [sys.executable, "-m", "jobs.cli"]
ONE_CELL = ["~sweep", "grid.hardware=[cpu]", "grid.backend=[reference]", "grid.method=[random]",
            "grid.workload=[shape-2h]", "grid.seq_k=[0.5]", "grid.variant=[original]", "grid.reps=1", "grid.warmup=0",
            "progress=false", "ray.num_cpus=1"]
PASSWORD = "p@ss/w0rd"


@contextlib.contextmanager
def _child_until_ready(code: str, ready: str):
    """A Python child running ``code`` for the block, once it has printed ``ready``."""
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == ready
        yield
    finally:
        proc.kill()
        proc.wait()


def holding(run_root: Path):
    """Another driver holding ``run_root`` (``lock.hold``) for the block."""
    return _child_until_ready(
        "from orchestrator import lock\nimport time\n"
        f"with lock.hold({str(run_root)!r}, 'wavealign sweep other'):\n    print('held', flush=True)\n"
        "    time.sleep(600)\n", "held")


def store_locked(store: Path):
    """Another process in an exclusive transaction on the sqlite ``store`` for the block."""
    return _child_until_ready(
        f"import sqlite3, time\ndb = sqlite3.connect({str(store)!r}, isolation_level=None)\n"
        "db.execute('BEGIN EXCLUSIVE')\nprint('locked', flush=True)\ntime.sleep(600)\n", "locked")


@contextlib.contextmanager
def tiny_tmpfs(folder: Path, size: str = "1m"):
    """A file system of ``size`` mounted at ``folder`` for the block."""
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], check=True)
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def measured(name: str, argv: list[str], expected_exit: int) -> dict:
    """Run ``argv`` under ``/usr/bin/time -v``; its wall time, peak RSS, exit status and stderr's last line."""
    env = {**os.environ, "RAY_ADDRESS": "local"}
    done = subprocess.run(["/usr/bin/time", "-v", *argv], capture_output=True, text=True, env=env, cwd=REPO)
    timing, _, _ = done.stderr.rpartition("\tCommand being timed:")
    ours = [ln for ln in timing.splitlines() if ln.startswith("wavealign")]
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", done.stderr)[1]
    minutes, seconds = wall.rsplit(":", 1)
    rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)[1])
    row = {"case": name, "exit": done.returncode, "expected_exit": expected_exit,
           "wall_s": round(int(minutes.split(":")[-1]) * 60 + float(seconds), 2), "peak_rss_mb": round(rss_kb / 1024),
           "stderr_lines": len(ours), "traceback": "Traceback" in done.stdout + timing,
           "password_shown": PASSWORD in done.stdout + timing, "line": ours[-1] if ours else ""}
    print(json.dumps(row), flush=True)
    return row


def commands(out: Path) -> list[dict]:
    rows = []
    sweep = [*WAVEALIGN, "sweep", *ONE_CELL]

    root = out / "item2-lock-deleted"
    (root / "results").mkdir(parents=True)
    with holding(root):
        (root / ".lock").unlink()
        rows.append(measured("2: second sweep, .lock deleted under the holder", [*sweep, f"run_root={root}"], 2))

    uri = f"http://alice:{PASSWORD}@127.0.0.1:9"
    rows.append(measured("3: report --experiment, server not answering, '@' and '/' in the password",
                         [*WAVEALIGN, "report", "--experiment", "wavealign", "--tracking-uri", uri, "--out",
                          str(out / "item3-report")], 2))
    root = out / "item3-sync"
    (root / "results").mkdir(parents=True)
    rows.append(measured("3: sync-mlflow, server not answering", [*WAVEALIGN, "sync-mlflow", f"run_root={root}",
                                                                  f"mlflow.tracking_uri={uri}"], 1))

    for planted in (".lock", "results"):
        root, victim = out / f"item4-{planted.strip('.')}-link", out / f"item4-{planted.strip('.')}-victim"
        root.mkdir(parents=True)
        if planted == ".lock":
            victim.write_text("keep me")
        else:
            victim.mkdir()
        (root / planted).symlink_to(victim)
        rows.append(measured(f"4: sweep, {planted} planted as a link", [*sweep, f"run_root={root}"], 5))

    if os.geteuid() == 0:
        with tiny_tmpfs(out / "item10-1MiB") as small:
            rows.append(measured("10: sweep on a 1 MiB file system", [*sweep, f"run_root={small / 'runs'}"], 5))
    root = out / "item10-locked"
    (root / "results").mkdir(parents=True)
    subprocess.run([sys.executable, "-c", "from orchestrator import sqlite_store; from pathlib import Path; "
                    f"sqlite_store.create(Path({str(root / 'mlflow.db')!r}), Path({str(root / 'mlartifacts')!r}))"],
                   check=True, cwd=REPO)
    with store_locked(root / "mlflow.db"):
        rows.append(measured("10: sync-mlflow, store locked by another process",
                             [*WAVEALIGN, "sync-mlflow", f"run_root={root}"], 1))
    with contextlib.closing(sqlite3.connect(root / "mlflow.db")) as db:  # never set aside
        assert db.execute("SELECT count(*) FROM alembic_version").fetchone() == (1,)
    return rows


def check(name: str, action) -> dict:
    """``action()`` timed, with the peak of Python's allocations while it ran; what it raised, in one line."""
    tracemalloc.start()
    started = time.perf_counter()
    try:
        action()
        outcome = "passed"
    except Exception as exc:  # the refusal being measured
        outcome = f"{type(exc).__name__}: {exc}"
    wall_ms = (time.perf_counter() - started) * 1e3
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    row = {"check": name, "wall_ms": round(wall_ms, 2), "python_peak_kib": round(peak / 1024, 1),
           "outcome": outcome[:300]}
    print(json.dumps(row), flush=True)
    return row


def checks(out: Path, load_root: Path | None) -> list[dict]:
    from test_reliability_stores import _flip_bytes, _rows  # the tests' own crafted rows and damage

    from orchestrator import dataset, files, lock, mlflow_server, record, run_root, sqlite_store, sweep

    rows = []
    root = out / "lock"
    root.mkdir(parents=True)
    with holding(root):
        (root / ".lock").unlink()
        rows.append(check("2: lock.hold refused, .lock deleted", lambda: lock.hold(root, "me").__enter__()))
    rows.append(check("3: mlflow_server.unanswered, nothing listening",
                      lambda: print(mlflow_server.unanswered(f"http://alice:{PASSWORD}@127.0.0.1:9"))))
    root = out / "links"
    root.mkdir()
    (root / "results").symlink_to(out)
    rows.append(check("4: files.check_writable, results a link",
                      lambda: files.check_writable(root, run_root.WRITTEN_FOLDERS)))
    root = out / "damaged"
    paths = [p for i in range(3) for p in dataset.write(root, _rows(1, start=i))]
    stat = paths[1].stat()
    _flip_bytes(paths[1])
    os.utime(paths[1], ns=(stat.st_atime_ns, stat.st_mtime_ns))
    rows.append(check("9: dataset.read_written, 1 of 3 files damaged in place",
                      lambda: print(dataset.read_written(root, paths).num_rows, "rows kept")))
    if os.geteuid() == 0:
        with tiny_tmpfs(out / "1MiB") as small:
            rows.append(check("10: sweep.check_free_space, 1 MiB free",
                              lambda: sweep.check_free_space(small, 1, f"sqlite:///{small / 'mlflow.db'}")))
    store = out / "locked" / "mlflow.db"
    sqlite_store.create(store, store.parent / "mlartifacts")
    with store_locked(store):
        rows.append(check("10: sqlite_store.problem, store locked", lambda: sqlite_store.problem(store)))
    if load_root is not None:
        rows.append(check(f"6: record.next_run_seq over {dataset.read(load_root, ['result_id']).num_rows:,} rows",
                          lambda: print(record.next_run_seq(load_root))))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="a scratch folder (emptied)")
    parser.add_argument("--load-root", type=Path, help="a run root of many rows, for item 6's run number")
    args = parser.parse_args()
    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    started = time.time()
    rows = commands(args.out)
    result = {"date": time.strftime("%Y-%m-%d"), "command": " ".join(sys.argv), "commands": rows,
              "all_as_documented": all(r["exit"] == r["expected_exit"] and r["stderr_lines"] == 1
                                       and not r["traceback"] and not r["password_shown"] for r in rows),
              "checks": checks(args.out / "checks", args.load_root), "total_s": round(time.time() - started, 1)}
    (Path(__file__).parent / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"all as documented: {result['all_as_documented']}")


if __name__ == "__main__":
    main()
