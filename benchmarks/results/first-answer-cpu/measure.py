"""Time the CLI's first answer: each command line run RUNS times in a fresh process, the median wall time printed
beside the floor (``python -c pass``) and the load average, as a Markdown table; with ``--every``, every command's
``--help`` and ``--bogus`` (a mistyped flag) instead.

    .venv/bin/python benchmarks/results/first-answer-cpu/measure.py [RUNS] [--every]   # from the checkout's root
"""

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).parent
LINES = [
    [sys.executable, "-c", "pass"],
    [BIN / "wavealign", "--help"],
    [BIN / "wavealign", "swep"],
    [BIN / "wavealign", "sweep", "--help"],
    [BIN / "wavealign", "sweep", "grid.seed=abc"],
    [BIN / "wavealign", "report", "--help"],
    [BIN / "wavealign", "report", "--bogus"],
    [BIN / "wavealign", "mask-fidelity", "--help"],
    [BIN / "wavealign", "sync-mlflow", "--help"],
]


def wall_s(argv: list) -> float:
    start = time.perf_counter()
    subprocess.run([str(a) for a in argv], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start


def every_command() -> list[list]:
    """Each command's ``--help`` and ``--bogus``."""
    from jobs import cli

    return [[BIN / "wavealign", name, flag] for name in sorted(cli.commands()) for flag in ("--help", "--bogus")]


def main() -> None:
    numbers = [a for a in sys.argv[1:] if a.isdigit()]
    runs = int(numbers[0]) if numbers else 5
    lines = every_command() if "--every" in sys.argv[1:] else LINES
    print(f"load average at start: {os.getloadavg()[0]:.2f}; {runs} runs each, median (min-max) seconds\n")
    print("| command | median s | min-max s |\n|---|---|---|")
    for argv in lines:
        times = [wall_s(argv) for _ in range(runs)]
        shown = " ".join(["python" if a == sys.executable else Path(str(a)).name if i == 0 else str(a)
                          for i, a in enumerate(argv)])
        print(f"| `{shown}` | {statistics.median(times):.2f} | {min(times):.2f}-{max(times):.2f} |", flush=True)
    print(f"\nload average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
