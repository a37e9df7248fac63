"""What the user sees: a live per-GPU-type progress display with an ETA, and the final summary table."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

COUNTS = ("done", "running", "failed", "unschedulable")


class SweepProgress:
    """Cells per placement (a GPU type, or ``cpu``): done, running, failed, unschedulable, with an ETA."""

    def __init__(self, totals: dict[str, int], console: Console, enabled: bool = True) -> None:
        self.counts = {k: dict.fromkeys(COUNTS, 0) for k in totals}
        self.totals = totals
        self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                  TimeRemainingColumn(), console=console, disable=not enabled, transient=False)
        self._tasks = {k: self._progress.add_task(k, total=n) for k, n in totals.items()}
        self._refresh_all()

    def __enter__(self) -> SweepProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def add(self, placement: str, **deltas: int) -> None:
        for key, delta in deltas.items():
            self.counts[placement][key] += delta
        self._refresh(placement)

    def _refresh_all(self) -> None:
        for placement in self.totals:
            self._refresh(placement)

    def _refresh(self, placement: str) -> None:
        c = self.counts[placement]
        finished = c["done"] + c["failed"] + c["unschedulable"]
        text = (f"{placement:<5} done {c['done']}  running {c['running']}  failed {c['failed']}  "
                f"unschedulable {c['unschedulable']}")
        self._progress.update(self._tasks[placement], completed=finished, description=text)


def _median(values: list[float]) -> float:
    values = [v for v in values if v is not None and not math.isnan(v)]
    return statistics.median(values) if values else math.nan


def _fmt(value: float, spec: str) -> str:
    return "-" if value is None or math.isnan(value) else format(value, spec)


def summary_table(rows: list[dict[str, Any]], title: str) -> Table:
    """One line per (hardware, backend, method, variant): cell counts and median figures."""
    groups: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[(row["hardware"], row["backend"], row["method"], row["variant"])].append(row)
    table = Table(title=title)
    for header in ("hardware", "backend", "method", "variant", "done", "failed", "unsched.", "kernel ms",
                   "reorder ms", "speedup", "L2 hit %", "timer"):
        table.add_column(header, justify="right" if header not in ("hardware", "backend", "method", "variant")
                         else "left")
    for key in sorted(groups):
        rs = groups[key]
        done = [r for r in rs if r["status"] == "done"]
        timers = sorted({r["timer"] for r in done if r.get("timer")})
        table.add_row(*key, str(len(done)), str(sum(r["status"] == "failed" for r in rs)),
                      str(sum(r["status"] == "unschedulable" for r in rs)),
                      _fmt(_median([r["kernel_ms_median"] for r in done]), ".3f"),
                      _fmt(_median([r["reorder_ms"] for r in done]), ".2f"),
                      _fmt(_median([r["speedup_vs_original"] for r in done]), ".3f"),
                      _fmt(_median([r["l2_hit_pct"] for r in done]), ".1f"), ",".join(timers) or "-")
    timers = {r.get("timer") for r in rows}
    notes = []
    if "wall_clock" in timers:
        notes.append("wall_clock: the exact reference kernel timed on a CPU, a check of the pipeline, not a GPU "
                     "figure")
    if "simulated" in timers:
        notes.append("simulated: wavealign.sim's prediction for that GPU (kernel ms, L2 hit), not a measurement; "
                     "its reorder ms is reorder.plan measured on this machine's CPU")
    table.caption = "\n".join(notes) or None
    return table
