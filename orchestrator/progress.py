"""What the user sees: a live per-GPU-type progress display with an ETA, and the final summary table."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from wavealign.records import ORIGINAL_VARIANT, order_name

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


def _median(values: list[float | None]) -> float:
    values = [v for v in values if v is not None and not math.isnan(v)]
    return statistics.median(values) if values else math.nan


def _fmt(value: float, spec: str) -> str:
    return "-" if value is None or math.isnan(value) else format(value, spec)


def _fmt_ms(value: float) -> str:
    """Four significant digits, so a ratio of two printed times is right to about 0.1% (0.1782, 98.60, 1572)."""
    if value is None or math.isnan(value):
        return "-"
    decimals = 3 - math.floor(math.log10(abs(value))) if value else 3
    return f"{value:.{max(decimals, 0)}f}"


def _original_ms(row: dict[str, Any]) -> float:
    """The kernel time of the original variant timed beside this cell (its group), which its speedup refers to."""
    kernel_ms, speedup = row.get("kernel_ms_median"), row.get("speedup_vs_original")
    if row.get("variant") == ORIGINAL_VARIANT:
        return math.nan if kernel_ms is None else kernel_ms
    return math.nan if kernel_ms is None or speedup is None else kernel_ms * speedup


def _l2_hit(done: list[dict[str, Any]]) -> tuple[str, str | None]:
    """The median L2 hit of a line and where it comes from: Nsight Compute where measured, else the simulator."""
    for column, source in (("ncu_l2_hit_pct", "ncu"), ("l2_hit_pct", "sim")):
        value = _median([r.get(column) for r in done])
        if not math.isnan(value):
            return f"{value:.1f} ({source})", source
    return "-", None


def _line_order(key: tuple) -> tuple:
    hardware, backend, measure, method, workload, tokens, variant = key
    return (hardware, backend, str(measure), method, str(workload), -1 if tokens is None else tokens,
            variant != ORIGINAL_VARIANT, variant)


def summary_table(rows: list[dict[str, Any]], title: str) -> Table:
    """One line per (hardware, backend, measurer, method, workload, sequence length, launch order): cell counts and
    median figures; the order is the variant, with its reorderer where that is not WaveAlign's Stage 1
    (``records.order_name``). The timer gets a column only when the lines differ in it (a simulated line's is
    ``simulated``).

    Each line's speedup is computed from the medians printed on it (original ms / kernel ms), so the table never
    shows a ratio its own columns contradict; the per-cell ratios are the dataset's ``speedup_vs_original``."""
    lines: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        order = order_name(row["variant"], row.get("reorderer"))
        lines[(row["hardware"], row["backend"], row.get("measure"), row["method"], row.get("workload"),
               row.get("seq_len_tokens"), order)].append(row)
    all_timers = {r.get("timer") for r in rows if r["status"] == "done"}
    table = Table(title=title)
    headers = ["hardware", "backend", "method", "workload", "tokens", "variant", "done", "failed", "unsched.",
               "kernel ms", "original ms", "speedup", "reorder ms", "L2 hit %"]
    headers += ["timer"] if len(all_timers) > 1 else []
    for header in headers:
        text = header in ("hardware", "backend", "method", "workload", "variant")
        table.add_column(header, justify="left" if text else "right", no_wrap=text)
    l2_sources = set()
    for key in sorted(lines, key=_line_order):
        hardware, backend, _, method, workload, tokens, variant = key
        rs = lines[key]
        done = [r for r in rs if r["status"] == "done"]
        timers = sorted({r["timer"] for r in done if r.get("timer")})
        kernel_ms = _median([r["kernel_ms_median"] for r in done])
        original_ms = _median([_original_ms(r) for r in done])
        l2_value, l2_source = _l2_hit(done)
        l2_sources.add(l2_source)
        cells = [hardware, backend, method, str(workload or "-"), "-" if tokens is None else f"{tokens:,}",
                 Text(variant),  # not markup: "wavealign[lsh]" is text
                 str(len(done)), str(sum(r["status"] == "failed" for r in rs)),
                 str(sum(r["status"] == "unschedulable" for r in rs)),
                 _fmt_ms(kernel_ms), _fmt_ms(original_ms),
                 _fmt(original_ms / kernel_ms if kernel_ms > 0 else math.nan, ".3f"),
                 _fmt_ms(_median([r["reorder_ms"] for r in done])), l2_value]
        if len(all_timers) > 1:
            cells.append(",".join(timers) or "-")
        table.add_row(*cells)
    notes = ["speedup = original ms / kernel ms, both medians over the line's done cells; original ms: the "
             "original variant timed in their groups"]
    if len(all_timers) == 1:
        notes.append(f"timer: {next(iter(all_timers))} for every line")
    if any("[" in key[-1] for key in lines):
        notes.append("variant\\[reorderer]: that reorderer's grouping instead of WaveAlign's Stage 1 (spatial: alone; "
                     "wavealign: then Stage 2)")
    if "ncu" in l2_sources:
        notes.append("L2 hit % (ncu): measured by Nsight Compute on the backend's attention kernels")
    if "sim" in l2_sources:
        notes.append("L2 hit % (sim): predicted by wavealign.sim, not measured")
    if "wall_clock" in all_timers:
        notes.append("wall_clock: the exact reference kernel timed on a CPU, a check of the pipeline, not a GPU "
                     "figure")
    if "simulated" in all_timers:
        notes.append("simulated: wavealign.sim's prediction for that GPU (kernel ms, L2 hit), not a measurement; "
                     "its reorder ms is WaveAlign's plan time predicted for that GPU (wavealign.skip.plan_cost; "
                     "the host CPU's is the dataset's host_reorder_ms)")
    table.caption = "\n".join(notes)
    table.caption_justify = "left"
    return table
