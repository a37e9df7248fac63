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

from wavealign.instruments.timing import Speedup
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


def _iqr_pct(iqr_ms: float, median_ms: float) -> str:
    """The interquartile range as a share of the median: the spread a time's repetitions had."""
    return "-" if math.isnan(iqr_ms) or not median_ms > 0 else f"{100 * iqr_ms / median_ms:.1f}"


def _speedup(original_ms: float, original_iqr_ms: float, kernel_ms: float, kernel_iqr_ms: float,
             baseline: bool, timer: str | None) -> tuple[str, bool]:
    """The speedup as printed, and whether it is marked not significant (its spread holds 1.0: ``Speedup``)."""
    if not kernel_ms > 0 or math.isnan(original_ms):
        return "-", False
    if baseline:
        return f"{original_ms / kernel_ms:.3f}", False
    spread = Speedup.of(original_ms, _or_zero(original_iqr_ms), kernel_ms, _or_zero(kernel_iqr_ms), timer)
    if spread.significant:
        return f"{spread.ratio:.3f}", False
    return f"{spread.ratio:.3f} n.s.", True


def _or_zero(iqr_ms: float) -> float:
    return 0.0 if iqr_ms is None or math.isnan(iqr_ms) else iqr_ms


def verdicts(rows: list[dict[str, Any]]) -> dict[tuple, str]:
    """Per summary line (its key, as ``summary_table`` groups rows), the verdict on its speedup: ``significant``,
    ``not significant`` or ``baseline`` (the original order; or no speedup to judge, ``-``)."""
    return {key: line["verdict"] for key, line in _lines(rows).items()}


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


_COUNT_HEADERS = {"failed": "failed", "unschedulable": "unsched."}


def _lines(rows: list[dict[str, Any]]) -> dict[tuple, dict[str, Any]]:
    """The summary's lines, in order: per (hardware, backend, measurer, method, workload, sequence length, launch
    order), its rows and median figures, the original order's timed beside them (in their groups), and the verdict
    on the speedup (``Speedup``: each time's spread is the median IQR of its cells)."""
    grouped: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    originals = {r["group_id"]: r for r in rows if r.get("variant") == ORIGINAL_VARIANT and r["status"] == "done"}
    for row in rows:
        order = order_name(row["variant"], row.get("reorderer"))
        grouped[(row["hardware"], row["backend"], row.get("measure"), row["method"], row.get("workload"),
                 row.get("seq_len_tokens"), order)].append(row)
    lines = {}
    for key in sorted(grouped, key=_line_order):
        done = [r for r in grouped[key] if r["status"] == "done"]
        line = {"rows": grouped[key], "done": done,
                "kernel_ms": _median([r["kernel_ms_median"] for r in done]),
                "kernel_iqr_ms": _median([r.get("kernel_ms_iqr") for r in done]),
                "original_ms": _median([_original_ms(r) for r in done]),
                "original_iqr_ms": _median([originals[r["group_id"]].get("kernel_ms_iqr") for r in done
                                            if r.get("group_id") in originals])}
        baseline = key[-1] == ORIGINAL_VARIANT
        timers = {r.get("timer") for r in done}  # one per line: a line is one hardware, backend and measurer
        line["speedup"], not_significant = _speedup(line["original_ms"], line["original_iqr_ms"], line["kernel_ms"],
                                                    line["kernel_iqr_ms"], baseline, next(iter(timers), None))
        line["verdict"] = ("baseline" if baseline else "-" if line["speedup"] == "-" else
                           "not significant" if not_significant else "significant")
        lines[key] = line
    return lines


def summary_table(rows: list[dict[str, Any]], title: str) -> Table:
    """One line per (hardware, backend, measurer, method, workload, sequence length, launch order): cell counts and
    median figures; the order is the variant, with its reorderer where that is not WaveAlign's Stage 1
    (``records.order_name``). The timer gets a column only when the lines differ in it (a simulated line's is
    ``simulated``), and the failed and unschedulable counts only when some line has one.

    Each line's speedup is computed from the medians printed on it (original ms / kernel ms), so the table never
    shows a ratio its own columns contradict; the per-cell ratios are the dataset's ``speedup_vs_original``. The IQR
    column is the kernel time's spread over its repetitions; a speedup that spread cannot tell from 1.0 is marked
    ``n.s.``."""
    lines = _lines(rows)
    all_timers = {r.get("timer") for r in rows if r["status"] == "done"}
    counted = [c for c in ("failed", "unschedulable") if any(r["status"] == c for r in rows)]
    table = Table(title=title)
    headers = ["hardware", "backend", "method", "workload", "tokens", "variant", "done",
               *(_COUNT_HEADERS[c] for c in counted),
               "kernel ms", "IQR %", "original ms", "speedup", "reorder ms", "L2 hit %"]
    headers += ["timer"] if len(all_timers) > 1 else []
    for header in headers:
        text = header in ("hardware", "backend", "method", "workload", "variant")
        table.add_column(header, justify="left" if text else "right", no_wrap=text)
    l2_sources = set()
    for key, line in lines.items():
        hardware, backend, _, method, workload, tokens, variant = key
        done = line["done"]
        timers = sorted({r["timer"] for r in done if r.get("timer")})
        l2_value, l2_source = _l2_hit(done)
        l2_sources.add(l2_source)
        cells = [hardware, backend, method, str(workload or "-"), "-" if tokens is None else f"{tokens:,}",
                 Text(variant),  # not markup: "wavealign[lsh]" is text
                 str(len(done)), *(str(sum(r["status"] == c for r in line["rows"])) for c in counted),
                 _fmt_ms(line["kernel_ms"]), _iqr_pct(line["kernel_iqr_ms"], line["kernel_ms"]),
                 _fmt_ms(line["original_ms"]), line["speedup"],
                 _fmt_ms(_median([r["reorder_ms"] for r in done])), l2_value]
        if len(all_timers) > 1:
            cells.append(",".join(timers) or "-")
        table.add_row(*cells)
    notes = ["speedup = original ms / kernel ms, both medians over the line's done cells; original ms: the "
             "original variant timed in their groups; IQR %: the kernel time's interquartile range over its "
             "repetitions, as a share of its median"]
    if any(line["verdict"] == "not significant" for line in lines.values()):
        notes.append("n.s.: not significant, the speedup's spread holds 1.0 (each time within one IQR of its median: "
                     "the two times' repetitions overlap; a wall-clock IQR counts as at least 2% of its median)")
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
