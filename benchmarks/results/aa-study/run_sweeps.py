"""Run one sweep YAML several times, each into a run root of its own, through the orchestrator as ``wavealign
sweep`` runs it (a copy of ``conf/`` with the YAML filed as ``conf/sweep/<name>.yaml``, a fresh local Ray each):
the sweeps of the A/A study (``aa_study.py`` compares them).

    python benchmarks/results/aa-study/run_sweeps.py SWEEP_YAML RUNS OUT_DIR [OVERRIDE ...]

makes ``OUT_DIR/run<i>`` (run roots) one after the other and prints each one's counts and wall time.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

from rich.console import Console

from orchestrator import config, sweep


def main(argv: list[str]) -> int:
    yaml, runs, out, *overrides = argv
    text = Path(yaml).read_text()
    name = Path(yaml).stem
    out = Path(out)
    conf = out / "conf"
    if not conf.exists():
        shutil.copytree(config.CONF_DIR, conf)
    (conf / "sweep" / f"{name}.yaml").write_text(text)
    os.environ["RAY_ADDRESS"] = "local"  # a fresh Ray per run, never one another user started here
    for run in range(int(runs)):
        start = time.perf_counter()
        root = out / f"run{run}"
        cfg = config.load([f"sweep={name}", f"run_root={root}", "progress=false", "mlflow.enabled=false",
                           *overrides], conf_dir=conf)
        outcome = sweep.run(cfg, Console(quiet=True))
        print(f"{root}: {dict(outcome.counts)} in {time.perf_counter() - start:.0f} s, "
              f"load average {os.getloadavg()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
