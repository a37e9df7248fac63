"""Time and peak memory of each refusal of issue 48 (round 4), as a user meets it and the check alone.

Commands (``COMMANDS``): each run as ``python -m jobs.cli ...`` under ``/usr/bin/time -v`` (wall time and
peak resident memory, most of it the interpreter and its imports), checked to end in one stderr line with exit 2
and, for the sweep's config, without torch, Ray or MLflow imported (``TORCH_FREE``). Library checks (``CHECKS``):
the call alone in this process once its imports are loaded (wall time; the peak of Python's allocations,
``tracemalloc``). Not a unit test: a measurement, run by hand; writes ``result.json`` and prints a Markdown table.

    python benchmarks/results/reliability-round4/refusals.py --out /tmp/round4
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
WAVEALIGN = [sys.executable, "-m", "jobs.cli"]
CPU_GRID = ["~sweep", "grid.hardware=[cpu]", "grid.backend=[reference]", "grid.method=[planted]",
            "grid.workload=[shape-2h]", "grid.seq_k=[1]", "grid.variant=[original,wavealign]"]
SVG2_GRID = ["~sweep", "grid.hardware=[cpu]", "grid.backend=[reference]", "grid.method=[svg2]",
             "grid.workload=[wan1.3b-480p-2h]", "grid.seq_k=[3]", "grid.variant=[original,wavealign]"]


def commands(work: Path) -> list[tuple[str, list[str]]]:
    """(what, argv after ``wavealign``) of each command-line refusal; the files they need made under ``work``."""
    table = work / "ncu.csv"
    table.write_text("backend,stages,mask_kind,seq_len,heads,block_size,head_dim,density,seed,l2_hit_pct,"
                     "dram_read_bytes,kernel_ms\nflex,none,random,-5,2,128,64,0.5,0,50,1e6,1\n")
    never = f"run_root={work / 'never'}"
    return [
        ("sweep name=${oc.env:SECRET}", ["sweep", "--dry-run", *CPU_GRID, "name=${oc.env:SECRET}", never]),
        ("sweep grid.ncu=no", ["sweep", "--dry-run", *CPU_GRID, "grid.ncu=no", never]),
        ("sweep extra_grids=[]", ["sweep", "--dry-run", *CPU_GRID, "extra_grids=[]", never]),
        ("sweep grid.method_params=[]", ["sweep", "--dry-run", *CPU_GRID, "grid.method_params=[]", never]),
        ("sweep svg2 q_clusters=1e9", ["sweep", "--dry-run", *SVG2_GRID,
                                       "+grid.method_params.svg2.q_clusters=1000000000", never]),
        ("sweep svg2 iters=1e9", ["sweep", "--dry-run", *SVG2_GRID, "+grid.method_params.svg2.iters=1000000000",
                                  never]),
        ("sweep curve on a bare-shape workload", ["sweep", "--dry-run", *CPU_GRID, "grid.reorderer=[curve]", never]),
        ("validate-sim seq_len=-5", ["validate-sim", str(table), "--out", str(work / "vs")]),
    ]


def run_command(argv: list[str]) -> dict:
    probe = ("import runpy, sys\nsys.argv = ['wavealign'] + sys.argv[1:]\ntry:\n"
             "    runpy.run_module('jobs.cli', run_name='__main__')\nexcept SystemExit as exc:\n"
             "    print('imported:', *(m for m in ('torch', 'ray', 'mlflow') if m in sys.modules), file=sys.stderr)\n"
             "    raise\n")
    done = subprocess.run(["/usr/bin/time", "-v", sys.executable, "-c", probe, *argv], cwd=REPO,
                          capture_output=True, text=True, env={**os.environ, "SECRET": "hunter2"}, timeout=300)
    lines = [line for line in done.stderr.splitlines() if not line.startswith("\t") and line.strip()
             and not line.startswith("Command exited")]
    said = [line for line in lines if line.startswith("wavealign ")]
    imported = next(line for line in lines if line.startswith("imported:")).split()[1:]
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", done.stderr)[1]
    rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)[1])
    minutes, _, seconds = wall.rpartition(":")
    return {"exit": done.returncode, "line": said[0] if len(said) == 1 else said, "one_line": len(said) == 1,
            "imported": imported, "wall_s": float(minutes or 0) * 60 + float(seconds), "peak_rss_mib": rss_kb / 1024}


def checks() -> list[tuple[str, object]]:
    """(what, call) of each library refusal, its imports loaded first."""
    import torch

    from wavealign import masks
    from wavealign.masks import svg2
    from wavealign.masks._common import check_latent

    q = torch.randn(1, 1, 256, 16)
    meta = torch.empty(1, 2, 1024, 64, device="meta")
    return [
        ("svg2 q_clusters=1e9 (library)", lambda: masks.build("svg2", q, q, q, block_size=64, q_clusters=10 ** 9)),
        ("svg2 iters=1e9 (library)", lambda: svg2.kmeans(q[0], 4, 10 ** 9)),
        ("radial latent T=1e7", lambda: masks.get("radial").from_shape(
            1, 78125, 78125, block_size=128, decay_factor=1.0, model_type="wan", latent=(10 ** 7, 1, 1))),
        ("latent of 2^28 tokens", lambda: check_latent("latent", (16384, 16384, 1))),
        ("xattention on meta tensors", lambda: masks.build("xattention", meta, meta, meta)),
    ]


def parquet_bomb(work: Path) -> tuple[str, object]:
    """A 65 MiB traceback in a few KB of zstd, under a run root's results/: refused from its footer."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from orchestrator import dataset
    from wavealign.records import Cell, CellResult

    root = Path(tempfile.mkdtemp(prefix="bomb-", dir=work))  # a fresh run root each time
    cell = Cell.from_flat(dict(cell_id="c", group_id="g", hardware="cpu", profile_hardware="h100",
                               backend="reference", method="random", variant="original", stages="none",
                               skip="force", workload="shape", seq_len_tokens=512, num_heads=1, head_dim=16,
                               block_size=128, wave_size=4, reps=1, warmup=0))
    dataset.write(root, [dataset.make_row(cell, CellResult("c", "g", "done", kernel_ms_median=1.0,
                                                           kernel_ms_reps=[1.0]), sweep_id="a" * 16,
                                          sweep_name="s")])
    table = dataset.read(root).drop_columns(list(dataset.PARTITION_COLUMNS))
    huge = "x" * (dataset.MIN_EXPANSION_BYTES + 2 ** 20)
    table = table.set_column(table.schema.get_field_index("traceback"), "traceback", pa.array([huge], pa.string()))
    path = dataset.results_dir(root) / "hardware=cpu" / "method=random" / "part-bomb.parquet"
    pq.write_table(table, path, compression="zstd", use_dictionary=False)
    relative = path.relative_to(dataset.results_dir(root))
    return f"Parquet bomb ({path.stat().st_size:,} B, 65 MiB inside)", lambda: _refused(
        dataset.untrusted_reason(path, relative))


def _refused(reason: str | None) -> None:
    if reason is None:
        raise AssertionError("not refused")
    raise ValueError(reason)


def run_check(call) -> dict:
    tracemalloc.start()
    start = time.perf_counter()
    try:
        call()
    except ValueError as exc:
        message = str(exc).splitlines()[0]
    else:
        raise AssertionError("not refused")
    finally:
        seconds = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return {"wall_s": seconds, "python_peak_mib": peak / 2 ** 20, "line": message}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    result = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "load_at_start": os.getloadavg(),
              "cpus": os.cpu_count(), "commands": {}, "checks": {}}
    for what, command in commands(args.out):
        result["commands"][what] = run_command(command)
    sys.path.insert(0, str(REPO))
    for what, call in [*checks(), parquet_bomb(args.out)]:
        result["checks"][what] = run_check(call)
    result["load_at_end"] = os.getloadavg()
    (args.out / "result.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"{result['date']}, load {result['load_at_start'][0]:.1f} -> {result['load_at_end'][0]:.1f} on "
          f"{result['cpus']} CPUs\n\n| refusal | wall | peak | before torch, Ray, MLflow |\n|---|---|---|---|")
    for what, r in result["commands"].items():
        print(f"| `{what}` (command, exit {r['exit']}) | {r['wall_s']:.2f} s | {r['peak_rss_mib']:.0f} MiB RSS | "
              f"{'yes' if not r['imported'] else 'no: ' + ', '.join(r['imported'])} |")
    for what, r in result["checks"].items():
        print(f"| {what} (the check alone) | {r['wall_s'] * 1000:.1f} ms | {r['python_peak_mib']:.2f} MiB "
              "Python | - |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
