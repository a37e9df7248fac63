"""Kernel benchmark: the sweep ``sweep=kernels`` (backends x controls x reorder variants x Wan2.1-14B lengths),
then its kernel table.

    wavealign bench-kernels [PATH=VALUE ...]    # Hydra overrides of the sweep, as `wavealign sweep` takes them
    wavealign bench-kernels grid.backend=[flex,triton,fa4] grid.measure=[ncu] run_root=DIR

Every cell runs through the sweep's own path (``wavealign.pipeline.run_group`` on a Ray worker of the GPU type),
so a figure here and the same cell in any sweep are one measurement. The table (kernel and reorder ms, net
speedup over the same backend's original order and over flex's, effective TFLOP/s, the gap to the 1/rho bound
against the backend's dense cell, and with ``grid.measure=[ncu]`` L2 hit % and DRAM GB) is
``analysis.tables.kernel_benchmark`` of the sweep's rows, written beside them as ``kernels.md`` /
``kernels.csv``.
"""

from __future__ import annotations

import shlex
import sys

from rich.console import Console

from jobs.arguments import Parser
from jobs.sweep import check_before_loading, refusals
from orchestrator.run_root import RunRoot

EXTRAS = ("sweep",)
COMMAND = "wavealign bench-kernels"  # how its stderr lines begin
__all__ = ["main", "refusals"]


def main(argv: list[str]) -> int:
    from orchestrator.config_compose import override_keys

    overrides = Parser("bench-kernels", __doc__, config_paths=override_keys).parse_args(argv).overrides
    check_before_loading(["sweep=kernels", *overrides])
    from orchestrator import config

    cfg = config.load(["sweep=kernels", *overrides])
    from analysis.load import load
    from analysis.tables import kernel_benchmark, to_markdown
    from jobs.sweep import EXIT_STORAGE_REFUSED, ended, run

    console = Console(width=160)
    if (outcome := run(cfg, console, COMMAND)) is None:
        return EXIT_STORAGE_REFUSED
    frame = load(cfg.run_root)
    frame = frame[frame["sweep_id"] == outcome.sweep_id]
    if not (frame["status"] == "done").any():
        return ended(cfg, outcome, COMMAND)  # nothing measured: no table (the summary said why)
    table = kernel_benchmark(frame)
    folder = RunRoot(outcome.run_root).sweep(outcome.sweep_id)
    table.to_csv(folder / "kernels.csv", index=False)
    markdown = to_markdown(table)
    (folder / "kernels.md").write_text(f"{COMMAND} {shlex.join(argv)}\n\n{markdown}\n")
    console.print(markdown)
    console.print(f"kernel table: {folder / 'kernels.md'}")
    return ended(cfg, outcome, COMMAND)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
