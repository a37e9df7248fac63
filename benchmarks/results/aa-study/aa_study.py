"""The A/A study of ``wavealign compare``: several sweeps of one identical config, every pair compared; no cell
changed, so every faster or slower verdict is a false positive, and their share must stay within the 5 % a 95 %
interval promises (``analysis.compare.COMPARE_RULE``).

    python benchmarks/results/aa-study/aa_study.py RUN_ROOT RUN_ROOT [RUN_ROOT ...] --out DIR

writes ``DIR/pairs.csv`` (one row per ordered pair and verdict basis: counts of each verdict) and ``DIR/aa.md`` (the
totals and rates), and prints the totals. Also the within-run lines: each sweep's own "variant vs original"
summary lines (``progress.summary_lines``), judged by the same spread rule.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import os
import sys
from pathlib import Path

from analysis import compare
from orchestrator import dataset
from orchestrator.progress import summary_lines
from wavealign import metrics

CALLED = ("faster", "slower")


def pair_counts(roots: list[Path]) -> list[dict]:
    """Per ordered pair (A, B) of ``roots`` (both orders: the ratio is not symmetric in its interval's widening),
    the matched cells and the count of each headline, time and speedup verdict."""
    rows = []
    for a, b in itertools.permutations(roots, 2):
        result = compare.compare(compare.Side(a), compare.Side(b))
        row = {"a": str(a), "b": str(b), "cells": len(result.cells),
               "load_per_cpu_a": result.a_state.load_per_cpu, "load_per_cpu_b": result.b_state.load_per_cpu,
               "too_spread": sum(c.too_spread for c in result.cells)}
        for name, attribute in (("verdict", "verdict_word"), ("time", "time_verdict"),
                                ("speedup", "speedup_verdict")):
            for word in (*metrics.VERDICTS, metrics.NO_VERDICT):
                row[f"{name}_{word}"] = sum(getattr(c, attribute) == word for c in result.cells)
        rows.append(row)
    return rows


def within_run_counts(roots: list[Path]) -> dict[str, int]:
    """Over every sweep's own summary lines that have a verdict (not the baseline's): how many said each."""
    counts = dict.fromkeys((*metrics.VERDICTS,), 0)
    for root in roots:
        latest = dataset.newest_per_cell(dataset.read(root).to_pylist())
        for line in summary_lines(list(latest.values())):
            if line.verdict in counts:
                counts[line.verdict] += 1
    return counts


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("roots", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    rows = pair_counts(args.roots)
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "pairs.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    cells = sum(r["cells"] for r in rows)
    lines = [f"# A/A: {len(args.roots)} identical sweeps, {len(rows)} ordered pairs, {cells} matched cells", "",
             "| basis | faster | slower | same | ambiguous | no verdict | false-positive rate |",
             "|---|---|---|---|---|---|---|"]
    for name in ("verdict", "time", "speedup"):
        total = {w: sum(r[f"{name}_{w}"] for r in rows) for w in (*metrics.VERDICTS, metrics.NO_VERDICT)}
        judged = cells - total[metrics.NO_VERDICT] if name != "speedup" else sum(
            total[w] for w in metrics.VERDICTS)
        rate = sum(total[w] for w in CALLED) / judged if judged else float("nan")
        lines.append(f"| {name} | {total['faster']} | {total['slower']} | {total['same']} | {total['ambiguous']} | "
                     f"{total[metrics.NO_VERDICT]} | {rate:.1%} of {judged} |")
    within = within_run_counts(args.roots)
    judged = sum(within.values())
    lines += ["", f"within-run lines (variant vs its original, each sweep's summary): {within}; called faster or "
              f"slower: {sum(within[w] for w in CALLED)} of {judged}",
              f"load average as the study ended: {os.getloadavg()}"]
    (args.out / "aa.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
