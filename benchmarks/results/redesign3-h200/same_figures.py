"""The same cells through two checkouts' sweeps, alternating, then judged: the figures issue 50's redesign must keep.

    python benchmarks/results/redesign3-h200/same_figures.py BEFORE AFTER --rounds 2 --out DIR [--dry-run] [OVERRIDE]

``BEFORE`` and ``AFTER`` are checkouts (``git archive <sha> | tar -x -C DIR``, or this one). Round r runs
``wavealign sweep sweep=same_figures`` (``same_figures.yaml``, copied into each checkout's ``conf/sweep/``) with
BEFORE's code, then with AFTER's, each into a run root of its own (``DIR/<side><r>``), MLflow off, with any
``OVERRIDE`` (e.g. the timed grid on the CPU: ``grid.hardware=[cpu] grid.backend=[reference]``). Each checkout is
imported from its folder (PYTHONPATH): before the redesign its ``wavealign/__init__.py`` mapped the sweep packages
onto their folders at run time (``python -m wavealign.jobs.cli``), after it they are named as their folders
(``python -m jobs.cli``).

Then, with AFTER's code:
- the timed cells: ``wavealign compare`` of each BEFORE run with each AFTER run, and of BEFORE's two rounds (the A/A
  control): each cell judged on each run's own paired speedup over its original; "same" or "ambiguous" everywhere
  is "unchanged within the intervals" (``compare-*.txt``, ``verdicts.csv``);
- the simulated cells: every figure bit-equal across all runs (``simulated.csv``).
Prints one table; exit 1 when a timed verdict is faster/slower between the checkouts or a simulated figure differs.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SIMULATED = ["l2_hit_pct", "hbm_read_bytes", "kernel_ms_median", "reorder_ms", "density", "order_candidate"]
KEY = ["backend", "hardware", "method", "variant", "seq_k"]
READ = """
import json, sys
from orchestrator import dataset
cols = json.loads(sys.argv[2])
rows = dataset.read(sys.argv[1]).to_pylist()
print(json.dumps([{c: r.get(c) for c in cols} for r in rows], default=str))
"""


def cli(checkout: Path) -> str:
    """The module that runs ``checkout``'s CLI: ``wavealign.jobs.cli`` while its package maps the sweep packages at
    run time, else ``jobs.cli``."""
    return "wavealign.jobs.cli" if "_SweepPackagesFinder" in (checkout / "wavealign" / "__init__.py").read_text() \
        else "jobs.cli"


def code_env(code: Path) -> dict[str, str]:
    """This process's environment with ``code`` first on PYTHONPATH (the rest, e.g. the bundles, after it)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(code), os.environ.get("PYTHONPATH")]))}


def tally(verdicts: list[dict]) -> dict[str, int]:
    """How many of ``verdicts`` (compare.csv rows) say each word of the rule."""
    return {w: sum(v.get("verdict") == w for v in verdicts) for w in ("faster", "slower", "same", "ambiguous")}


def sweep(code: Path, root: Path, dry_run: bool, overrides: list[str]) -> int:
    """One sweep of the cells with ``code`` first on PYTHONPATH; its exit status."""
    env = {**code_env(code), "RAY_ADDRESS": "local"}
    args = ["sweep=same_figures", f"run_root={root}", "mlflow.enabled=false", "progress=false",
            *overrides, *(["--dry-run"] if dry_run else [])]
    done = subprocess.run([sys.executable, "-m", cli(code), "sweep", *args], cwd=code, env=env,
                          capture_output=True, text=True, timeout=1800)
    print(f"== {root.name}: exit {done.returncode}\n{done.stdout[-1500:]}{done.stderr[-1500:]}", flush=True)
    return done.returncode


def rows(code: Path, root: Path) -> list[dict]:
    env = code_env(code)
    cols = [*KEY, "measure", "status", *SIMULATED]
    out = subprocess.run([sys.executable, "-c", READ, str(root), json.dumps(cols)], cwd=code, env=env,
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def compare(code: Path, a: Path, b: Path, out: Path) -> list[dict]:
    """``wavealign compare a b`` with ``code``; its per-cell verdicts (from its compare.csv)."""
    env = code_env(code)
    dest = out / f"compare-{a.name}-{b.name}"
    done = subprocess.run([sys.executable, "-m", cli(code), "compare", str(a), str(b), "--out", str(dest)],
                          cwd=code, env=env, capture_output=True, text=True)
    (out / f"compare-{a.name}-{b.name}.txt").write_text(done.stdout + done.stderr + f"exit {done.returncode}\n")
    with open(dest / "compare.csv") as f:
        return [{"pair": f"{a.name}-{b.name}", **r} for r in csv.DictReader(f)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("before", type=Path)
    p.add_argument("after", type=Path)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("overrides", nargs="*", help="sweep overrides for both checkouts")
    args = p.parse_intermixed_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    sides = {"before": args.before.resolve(), "after": args.after.resolve()}
    for checkout in sides.values():
        shutil.copy(HERE / "same_figures.yaml", checkout / "conf" / "sweep" / "same_figures.yaml")
    code = sides
    roots = {side: [] for side in sides}
    for r in range(args.rounds):
        for side in sides:
            root = args.out / f"{side}{r}"
            if sweep(code[side], root, args.dry_run, args.overrides) != 0 and not args.dry_run:
                print(f"{root.name}: the sweep failed", file=sys.stderr)
                return 1
            roots[side].append(root)
    if args.dry_run:
        return 0
    pairs = [*itertools.product(roots["before"], roots["after"]), *itertools.combinations(roots["before"], 2)]
    verdicts = [v for a, b in pairs for v in compare(code["after"], a, b, args.out)]
    with open(args.out / "verdicts.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=sorted({k for v in verdicts for k in v}))
        writer.writeheader()
        writer.writerows(verdicts)
    sim = {}
    for runs in roots.values():
        for root in runs:
            for row in rows(code["after"], root):
                if row["measure"] == "simulated":
                    sim.setdefault(tuple(row[k] for k in KEY), {})[root.name] = [row[k] for k in SIMULATED]
    with open(args.out / "simulated.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([*KEY, "runs", "bit_equal", *SIMULATED])
        unequal = 0
        for key, by_run in sorted(sim.items(), key=str):
            equal = len({json.dumps(v) for v in by_run.values()}) == 1
            unequal += not equal
            writer.writerow([*key, len(by_run), equal, *next(iter(by_run.values()))])
    timed = [v for v in verdicts if v["measure"] != "simulated"]
    between = [v for v in timed if v["pair"].startswith("before") and "after" in v["pair"]]
    counts = tally(between)
    control = [v for v in timed if "after" not in v["pair"]]
    print(f"\ntimed cells, before vs after ({len(between)} verdicts over {args.rounds}x{args.rounds} pairs): {counts}")
    print(f"A/A control, before vs before: {tally(control)}")
    print(f"simulated cells: {len(sim)}, bit-equal in every run: {len(sim) - unequal}")
    return 1 if counts["faster"] or counts["slower"] or unequal else 0


if __name__ == "__main__":
    sys.exit(main())
