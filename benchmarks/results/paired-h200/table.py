"""The blocked-vs-paired table of issue 41 from the two run roots run.sh brought back (OUT/run1, OUT/run2, each a
runroot.tar): per mask and variant, the speedup over the original order with its 95 % interval, blocked and paired,
in each run; how far the two runs' speedups moved apart; and the reps the paired stability rule used.

    python benchmarks/results/paired-h200/table.py OUT > benchmarks/results/paired-h200/table.md
"""

from __future__ import annotations

import json
import sys
import tarfile
import tempfile
from pathlib import Path

from orchestrator import dataset
from wavealign import metrics, variants


def rows(tar_path: Path) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(tar_path) as tar:
            tar.extractall(tmp, filter="data")
        return [r for r in dataset.read(tmp).to_pylist() if r["status"] == "done"]


def main(out: Path) -> None:
    runs = {name: rows(out / name / "runroot.tar") for name in ("run1", "run2")}
    table: dict[tuple, dict] = {}
    for name, found in runs.items():
        for r in found:
            mode = "paired" if json.loads(r["measure_params"]).get("paired", True) else "blocked"
            table.setdefault((r["method"], r["variant"]), {})[(mode, name)] = r
    print("| mask | variant | timing | run 1: speedup [95 % CI] | run 2 | run 2 - run 1 | CI width run 1 / run 2 "
          "| reps run 1 / run 2 | verdicts |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (method, variant), cells in sorted(table.items()):
        if variants.get(variant).is_baseline:
            continue
        for mode in ("blocked", "paired"):
            a, b = cells.get((mode, "run1")), cells.get((mode, "run2"))
            if a is None or b is None:
                continue
            text = [metrics.interval_text(r["speedup_vs_original"], r["speedup_ci_low"], r["speedup_ci_high"])
                    for r in (a, b)]
            widths = [f"{100 * (r['speedup_ci_high'] - r['speedup_ci_low']):.2f} %" for r in (a, b)]
            moved = b["speedup_vs_original"] - a["speedup_vs_original"]
            print(f"| {method} | {variant} | {mode} | {text[0]} | {text[1]} | {moved:+.4f} | {' / '.join(widths)} | "
                  f"{a['reps_done']} / {b['reps_done']} | {a['verdict']} / {b['verdict']} |")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
