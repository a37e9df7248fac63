"""Time how long a command takes to answer a mistake (issue 49, item 3): each command line run RUNS times in a fresh
process from CHECKOUT (``python -m jobs.cli``, so the same environment serves a checkout before and after a
change), the median wall time, its exit status and the start of its one stderr line, as a Markdown table, with the
load average at the start and end.

    .venv/bin/python benchmarks/results/first-hour-cpu/mistakes.py CHECKOUT [RUNS]
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MISTAKES = [
    ["sweep", "sweep=nosuch"],  # a preset with no YAML
    ["sweep", "grid.seq_k=[abc]"],  # a value of the wrong type
    ["sweep", "grid.method=[nosuch]"],  # a name only the library's registry lists
    ["sweep", "run_root=/proc/wavealign-runs"],  # a run root no folder can be made at
    ["sweep", "run_root=a-file/runs"],  # a run root under a file
    ["report", "--run-root", "no-such-runs"],  # a path that is not there
]


def answer(checkout: Path, argv: list[str], cwd: Path) -> tuple[float, int, str]:
    """(wall seconds, exit status, first stderr line) of ``wavealign *argv`` run from ``cwd``."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "jobs.cli", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, check=False)
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("wavealign")] or done.stderr.splitlines() or [""]
    return time.perf_counter() - start, done.returncode, lines[0]


def main() -> None:
    checkout = Path(sys.argv[1]).resolve()
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    print(f"checkout {checkout}; load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"{runs} runs each, median (min-max) seconds\n")
    print("| command | median s | min-max s | exit | stderr |\n|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        cwd = Path(folder)
        (cwd / "a-file").write_text("")
        for argv in MISTAKES:
            results = [answer(checkout, argv, cwd) for _ in range(runs)]
            times = [t for t, _, _ in results]
            said = results[-1][2][:90].replace("|", "\\|")
            print(f"| `wavealign {' '.join(argv)}` | {statistics.median(times):.2f} | {min(times):.2f}-"
                  f"{max(times):.2f} | {results[-1][1]} | {said} |", flush=True)
    print(f"\nload average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
